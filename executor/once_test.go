package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

type orderPayload struct {
	Order int `json:"order"`
}

func chargeKey(p orderPayload) string { return "charge-order-" + strconv.Itoa(p.Order) }

// An attempt that fails after its business step is retried, and the retry
// skips the step that succeeded.
func TestOnceSkipsDoneWorkOnRetry(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var charges atomic.Int32
	mux := executor.NewMux()
	mux.Handle("checkout", executor.JSON(func(ctx context.Context, task *executor.Job, p orderPayload) (any, error) {
		err := executor.Once(ctx, chargeKey(p), func(context.Context) error {
			charges.Add(1)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if task.Attempt == 1 {
			return nil, errors.New("mail service down")
		}
		return nil, nil
	}))
	w.worker("w1", mux, nil)
	payload := json.RawMessage(`{"order": 42}`)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "checkout", Payload: payload})
	w.nextOf(schemas.ReportStarted, 1)
	if r := w.nextOf(schemas.ReportFailed, 1); r.Error != "mail service down" {
		t.Errorf("attempt 1: %+v", r.Report)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Attempt: 2, Handler: "checkout", Payload: payload})
	if r := w.succeeded(1); r.Attempt != 2 {
		t.Errorf("report %+v, want attempt 2 to succeed", r.Report)
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("the business step ran %d times, want 1", n)
	}
	// The record says who did the work.
	e, err := w.onces().Get(t.Context(), "charge-order-42")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec["state"] != "done" || rec["attempt"] != 1.0 || rec["instance_id"] != 1.0 {
		t.Errorf("once record %s (%v)", e.Value(), err)
	}
}

// A business step that fails is not recorded: the retry runs it again. So
// is one that panics.
func TestOnceRetriesFailedWork(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var calls atomic.Int32
	mux := executor.NewMux()
	mux.HandleFunc("flaky", func(ctx context.Context, task *executor.Job) (any, error) {
		err := executor.Once(ctx, "flaky-step", func(context.Context) error {
			calls.Add(1)
			switch task.Attempt {
			case 1:
				return executor.Permanent(errors.New("card declined"))
			case 2:
				panic("step crashed")
			}
			return nil
		})
		return nil, err
	})
	w.worker("w1", mux, nil)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "flaky"})
	w.nextOf(schemas.ReportStarted, 1)
	// fn's error comes back as it is: still permanent.
	if r := w.nextOf(schemas.ReportFailed, 1); r.Error != "card declined" || !r.Permanent {
		t.Errorf("attempt 1: %+v, want the permanent error of fn", r.Report)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Attempt: 2, Handler: "flaky"})
	w.nextOf(schemas.ReportStarted, 1)
	if r := w.nextOf(schemas.ReportFailed, 1); !strings.Contains(r.Error, "step crashed") {
		t.Errorf("attempt 2: %+v, want the panic", r.Report)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Attempt: 3, Handler: "flaky"})
	w.succeeded(1)
	if n := calls.Load(); n != 3 {
		t.Errorf("the step ran %d times, want 3", n)
	}
}

// Two attempts of the same business key on two workers: the second waits
// while the first runs the step, then skips it.
func TestOnceConcurrentCallsWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var calls atomic.Int32
	arrived := make(chan int64, 2)
	entered := make(chan int64, 2)
	release := make(chan struct{})
	mux := executor.NewMux()
	mux.HandleFunc("send", func(ctx context.Context, task *executor.Job) (any, error) {
		arrived <- task.InstanceID
		return nil, executor.Once(ctx, "welcome-mail-7", func(ctx context.Context) error {
			calls.Add(1)
			entered <- task.InstanceID
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	})
	w.worker("w1", mux, nil)
	w.worker("w2", mux, nil)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "send"})
	first := <-entered
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "send"})
	<-arrived
	<-arrived
	// The second call waits on the record and does not enter fn, for
	// twice the record's TTL: the renewals keep it alive.
	select {
	case id := <-entered:
		t.Fatalf("instance %d entered the step while instance %d runs it", id, first)
	case <-time.After(2 * leaseTTL):
	}
	close(release)
	_, finals := w.collect(2)
	if len(finals) != 2 {
		t.Errorf("finals %v, want both attempts to succeed", finals)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the step ran %d times, want 1", n)
	}
}

// A running record left by a worker that died expires, and the waiting
// call then runs the step.
func TestOnceTakesOverAnExpiredRecord(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var calls atomic.Int32
	ran := make(chan time.Time, 1)
	mux := executor.NewMux()
	mux.HandleFunc("import", func(ctx context.Context, task *executor.Job) (any, error) {
		return nil, executor.Once(ctx, "import-9", func(context.Context) error {
			calls.Add(1)
			ran <- time.Now()
			return nil
		})
	})
	w.worker("w1", mux, nil)
	const ttl = 2 * time.Second
	created := time.Now()
	if _, err := w.onces().Create(t.Context(), "import-9", []byte(`{"state":"running","instance_id":8,"attempt":1,"worker_id":"gone"}`),
		jetstream.KeyTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 9, Handler: "import"})
	w.succeeded(9)
	if at := <-ran; at.Sub(created) < ttl-100*time.Millisecond {
		t.Errorf("the step ran %s after the record of the dead worker was made, before its TTL of %s", at.Sub(created), ttl)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the step ran %d times, want 1", n)
	}
}

func TestOnceMisuse(t *testing.T) {
	t.Parallel()
	called := false
	fn := func(context.Context) error { called = true; return nil }
	err := executor.Once(context.Background(), "k", fn)
	if err == nil || !strings.Contains(err.Error(), "context a worker passes to a handler") {
		t.Errorf("Once outside a worker = %v", err)
	}
	if called {
		t.Error("Once outside a worker called fn")
	}
	if err := executor.Once(context.Background(), "k", nil); !executor.IsPermanent(err) {
		t.Errorf("Once with a nil fn = %v, want a permanent error", err)
	}

	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("bad-key", func(ctx context.Context, _ *executor.Job) (any, error) {
		return nil, executor.Once(ctx, "order 42", fn)
	})
	w.worker("w1", mux, nil)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "bad-key"})
	w.nextOf(schemas.ReportStarted, 1)
	r := w.nextOf(schemas.ReportFailed, 1)
	if !r.Permanent || !strings.Contains(r.Error, `once key "order 42" is not a KV key`) {
		t.Errorf("report %+v, want a permanent error about the key", r.Report)
	}
	if called {
		t.Error("Once with a bad key called fn")
	}
}

func (w *world) onces() jetstream.KeyValue {
	w.t.Helper()
	kv, err := w.js.KeyValue(w.t.Context(), w.topo.OnceBucket())
	if err != nil {
		w.t.Fatal(err)
	}
	return kv
}
