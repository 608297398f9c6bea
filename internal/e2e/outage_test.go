package e2e_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// TestFinalReportAfterAReconnectWinsOverTheLeaseExpiry: a lease that
// expires just after the dispatcher's connection came back (as every lease
// does whose holder could not renew it while the server was down) leaves
// the holder a grace for its final report, which is on its way: the attempt
// is recorded as the report says, not failed as lost and run again.
func TestFinalReportAfterAReconnectWinsOverTheLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSystem(t)
	s.apply(`
task_name: outage-report
execution:
  handler: nobody-serves-it
`)
	id := s.fire("outage-report", nil)
	s.waitState(id, schemas.StateDispatched, 30*time.Second)

	// A worker takes the attempt's lease (by hand: no executor serves the
	// pool, so the attempt's own message stays where it is).
	const worker = "w-outage"
	// Its record and grant keys, as an SDK writes them.
	s.putWorker(worker, map[string]any{"handlers": []string{"nobody-serves-it"}})
	key := streams.LeaseKey(id, 1)
	leases, err := s.js.KeyValue(ctx, s.srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	watch, err := leases.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	lease, err := json.Marshal(schemas.Lease{InstanceID: id, Attempt: 1, WorkerID: worker, AcquiredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("$KV." + s.srv.Topology.LeasesBucket() + "." + key)
	m.Data = lease
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dispatcher to see the lease", 30*time.Second, func() (bool, error) {
		return s.dispatcher.LeaseSeen(id, 1), nil
	})

	// The dispatcher's connection drops and comes back.
	before := s.dispatchConn.Stats().Reconnects
	if err := s.dispatchConn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dispatcher's connection to come back", 30*time.Second, func() (bool, error) {
		return s.dispatchConn.Stats().Reconnects > before && s.dispatchConn.IsConnected(), nil
	})

	// The lease is never renewed: it expires one TTL after its put.
	expired := false
	for !expired {
		select {
		case e := <-watch.Updates():
			expired = e != nil && e.Operation() == jetstream.KeyValuePurge
		case <-time.After(time.Minute):
			t.Fatal("the lease did not expire within a minute")
		}
	}
	// The final report comes a second after the expiry, as one retried
	// while the server started again does.
	time.Sleep(time.Second)
	now := time.Now()
	rep, err := json.Marshal(schemas.Report{InstanceID: id, Attempt: 1, WorkerID: worker, Kind: schemas.ReportSucceeded,
		StartedAt: now.Add(-3 * time.Second), At: now.Add(-2 * time.Second), Output: json.RawMessage(`{"ran":"once"}`)})
	if err != nil {
		t.Fatal(err)
	}
	rm := nats.NewMsg(s.srv.Topology.Report(schemas.DefaultPool, worker, id))
	rm.Data = rep
	rm.Header.Set(streams.HeaderMsgID, strconv.FormatInt(id, 10)+"-1-final-outage")
	if _, err := s.js.PublishMsg(ctx, rm); err != nil {
		t.Fatal(err)
	}

	var got schemas.Instance
	waitFor(t, "the report or the reaper to decide the attempt", 30*time.Second, func() (bool, error) {
		got, err = s.store.GetInstance(ctx, id)
		return err == nil && (got.State.Terminal() || got.Attempt > 1 || got.State == schemas.StateRetrying), err
	})
	if got.State != schemas.StateSucceeded || got.Attempt != 1 {
		t.Fatalf("instance %s at attempt %d, want SUCCEEDED at attempt 1 (its report came within the grace): %v", got.State, got.Attempt, path(got))
	}
	for _, tr := range got.Transitions {
		if tr.Operator == store.OperatorReaper {
			t.Errorf("the reaper moved it %s→%s (%s)", tr.From, tr.To, tr.Reason)
		}
	}
}
