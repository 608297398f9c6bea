package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestReaperFailsAnAttemptThatOutlivesItsTimeout plays a hung executor: it
// takes the attempt, keeps its lease alive and reports it started, but never
// ends it. The reaper must fail it past its timeout and tell the worker to stop.
func TestReaperFailsAnAttemptThatOutlivesItsTimeout(t *testing.T) {
	t.Parallel()
	s := newSystem(t, func(o *dispatcher.Options) {
		o.TimeoutCheck = 100 * time.Millisecond
		o.TimeoutGrace = 200 * time.Millisecond
	})
	s.apply(`
task_name: hung
execution:
  handler: builtin.sleep
  timeout: 1s
`)
	ctx := context.Background()
	top := s.srv.Topology
	nc, js := s.srv.Connect()
	orders, err := nc.SubscribeSync(top.Control("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, top.DispatchStream(), top.PoolConsumer("default", schemas.PriorityNormal, "builtin.sleep"))
	if err != nil {
		t.Fatal(err)
	}
	id := s.fire("hung", map[string]int{"seconds": 60})
	msg, err := cons.Next(jetstream.FetchMaxWait(60 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var d schemas.Dispatch
	if err := json.Unmarshal(msg.Data(), &d); err != nil {
		t.Fatal(err)
	}
	leases, err := js.KeyValue(ctx, top.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	key := streams.LeaseKey(d.InstanceID, d.Attempt)
	rev, err := leases.Create(ctx, key, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	// Its record and grant keys, as an SDK writes them.
	s.putWorker("stuck", map[string]any{"handlers": []string{"builtin.sleep"}})
	now := time.Now()
	started := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "stuck", Kind: schemas.ReportStarted, At: now, StartedAt: now}
	if _, err := streams.Publish(ctx, js, top.Report(schemas.DefaultPool, started.WorkerID, id), "", started); err != nil {
		t.Fatal(err)
	}
	_ = msg.Ack()
	s.waitState(id, schemas.StateRunning, 60*time.Second)

	// Keep the lease alive, as a hung but connected executor would.
	renewed := make(chan struct{})
	renewCtx, stopRenewing := context.WithCancel(ctx)
	go func() {
		defer close(renewed)
		tick := time.NewTicker(leaseTTL / 4)
		defer tick.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-tick.C:
				next, err := leases.Update(renewCtx, key, []byte(`{}`), rev)
				if err != nil {
					if renewCtx.Err() == nil {
						t.Errorf("renew lease: %v", err)
					}
					return
				}
				rev = next
			}
		}
	}()
	defer func() { stopRenewing(); <-renewed }()

	inst := s.waitState(id, schemas.StateFailed, 60*time.Second)
	if !strings.HasPrefix(inst.Error, "timeout") {
		t.Errorf("error = %q, want a timeout", inst.Error)
	}
	last := inst.Transitions[len(inst.Transitions)-1]
	if last.From != schemas.StateRunning || last.Operator != "reaper" {
		t.Errorf("last transition %s→%s by %s, want RUNNING→FAILED by the reaper", last.From, last.To, last.Operator)
	}
	if took := last.At.Sub(now); took < time.Second {
		t.Errorf("failed %v after the start, before the 1s timeout", took)
	}
	order, err := orders.NextMsg(60 * time.Second)
	if err != nil {
		t.Fatalf("no stop order to the worker: %v", err)
	}
	var c schemas.Control
	if err := json.Unmarshal(order.Data, &c); err != nil || c.Action != schemas.ControlCancel || c.InstanceID != id || c.Attempt != 1 {
		t.Errorf("order = %s, want cancel of instance %d attempt 1", order.Data, id)
	}
}
