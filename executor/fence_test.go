package executor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// redeliver makes the next delivery of the n dispatch messages waiting for
// handler redeliveries, as a server that lost their acknowledgements
// would: the test takes them from the handler's pool consumer and gives
// them back. The worker must not run yet (the consumer is the one it will
// use).
func (w *world) redeliver(handler string, n int) {
	w.t.Helper()
	c, err := w.js.CreateOrUpdateConsumer(w.t.Context(), w.topo.DispatchStream(), w.topo.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, handler))
	if err != nil {
		w.t.Fatal(err)
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		w.t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.Nak(); err != nil {
			w.t.Fatal(err)
		}
		got++
	}
	if got != n {
		w.t.Fatalf("took %d dispatch messages to give back, want %d (%v)", got, n, batch.Error())
	}
}

// onlyInstance2MayStart answers every fence question as a dispatcher
// that knows instance 2 never ran and every other instance did, and
// returns the questions asked, by instance id.
func (w *world) onlyInstance2MayStart() *sync.Map {
	asked := new(sync.Map)
	w.answerFences(func(q schemas.FenceQuestion) schemas.FenceAnswer {
		asked.Store(q.InstanceID, q)
		return schemas.FenceAnswer{Start: q.InstanceID == 2, Reason: "instance 2 never ran, the others did"}
	})
	return asked
}

// TestRedeliveryAsksTheFence: a first delivery starts without a question;
// a redelivered one starts only when a dispatcher says so, is terminated
// when it says no, and waits, unrun, while no dispatcher answers.
func TestRedeliveryAsksTheFence(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux, calls := countingMux()
	asked := w.onlyInstance2MayStart()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Attempt: 3, Handler: "count"})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "count"})
	w.redeliver("count", 2)
	executortest.Run(t, w.options(mux))

	w.succeeded(2)
	w.dispatchEmpty()
	if calls(1) != 0 || calls(2) != 1 {
		t.Errorf("calls = %d and %d, want instance 1 never (the dispatcher said no), instance 2 once", calls(1), calls(2))
	}
	q, ok := asked.Load(int64(1))
	if !ok || q.(schemas.FenceQuestion) != (schemas.FenceQuestion{InstanceID: 1, Attempt: 3, WorkerID: "w1"}) {
		t.Errorf("question about instance 1 = %+v, want attempt 3 from w1", q)
	}
	if _, err := w.leases.Get(t.Context(), streams.LeaseKey(1, 3)); !isKeyMissing(err) {
		t.Errorf("lease of the attempt told not to start: %v, want none", err)
	}

	// A first delivery asks nothing.
	before := w.fenced.Load()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 3, Handler: "count"})
	w.succeeded(3)
	if n := w.fenced.Load() - before; n != 0 {
		t.Errorf("%d fence questions for a first delivery, want none", n)
	}
	w.noMoreReports()
}

// countingMux serves the handler "count", which counts its runs by
// instance, and returns the count of an instance.
func countingMux() (*executor.Mux, func(id int64) int) {
	var mu sync.Mutex
	calls := map[int64]int{}
	mux := executor.NewMux()
	mux.HandleFunc("count", func(_ context.Context, task *executor.Job) (any, error) {
		mu.Lock()
		calls[task.InstanceID]++
		mu.Unlock()
		return nil, nil
	})
	return mux, func(id int64) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[id]
	}
}

// TestRepublishedAsksTheFence: a dispatch message that says it is
// republished asks the fence on its first delivery (after a server restart
// the stream may have stored it as new although an earlier message of its
// attempt ran), and runs only when the dispatcher says it never ran.
func TestRepublishedAsksTheFence(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux, calls := countingMux()
	asked := w.onlyInstance2MayStart()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Attempt: 2, Handler: "count", Republished: true})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "count", Republished: true})
	executortest.Run(t, w.options(mux))

	w.succeeded(2)
	w.dispatchEmpty()
	if calls(1) != 0 || calls(2) != 1 {
		t.Errorf("calls = %d and %d, want instance 1 never (the dispatcher said it ran), instance 2 once", calls(1), calls(2))
	}
	for _, id := range []int64{1, 2} {
		if _, ok := asked.Load(id); !ok {
			t.Errorf("no fence question about republished instance %d", id)
		}
	}
	if _, err := w.leases.Get(t.Context(), streams.LeaseKey(1, 2)); !isKeyMissing(err) {
		t.Errorf("lease of the attempt told not to start: %v, want none", err)
	}
	w.noMoreReports()
}

// TestFirstDeliveryAfterAReconnectAsksTheFence: for a while after the
// worker's connection comes back from losing its server, a first delivery
// asks the fence too (a restarted server may deliver again, as new, a
// message whose ack it had confirmed), and runs only when the dispatcher
// says it never ran.
func TestFirstDeliveryAfterAReconnectAsksTheFence(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux, calls := countingMux()
	asked := w.onlyInstance2MayStart()
	executortest.Run(t, w.options(mux))
	before := w.nc.Stats().Reconnects
	if err := w.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, "the connection to come back", 30*time.Second, func() (bool, error) {
		return w.nc.Stats().Reconnects > before && w.nc.IsConnected(), nil
	})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "count"})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "count"})

	w.succeeded(2)
	w.dispatchEmpty()
	if calls(1) != 0 || calls(2) != 1 {
		t.Errorf("calls = %d and %d, want instance 1 never (the dispatcher said it ran), instance 2 once", calls(1), calls(2))
	}
	for _, id := range []int64{1, 2} {
		if _, ok := asked.Load(id); !ok {
			t.Errorf("no fence question about instance %d, delivered first just after a reconnect", id)
		}
	}
	w.noMoreReports()
}

// TestRedeliveryWaitsForADispatcher: with no dispatcher to answer, a
// redelivered attempt does not run; it runs once one answers.
func TestRedeliveryWaitsForADispatcher(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var calls atomic.Int32
	mux := executor.NewMux()
	mux.HandleFunc("count", func(context.Context, *executor.Job) (any, error) {
		calls.Add(1)
		return nil, nil
	})
	if err := w.fences.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 4, Handler: "count"})
	w.redeliver("count", 1)
	opts := w.options(mux)
	opts.IdleWait = 50 * time.Millisecond
	executortest.Run(t, opts)
	// Unanswered, the message goes back and comes again: wait for a few
	// deliveries, and the attempt has not run.
	c, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), streams.PoolConsumerName(schemas.DefaultPool, schemas.PriorityNormal, "count"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unanswered redelivery to come back twice", func() bool {
		info, err := c.Info(t.Context())
		return err == nil && info.NumRedelivered > 0 && info.Delivered.Consumer >= 4
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times with no dispatcher to ask, want 0", n)
	}
	w.answerFences(func(schemas.FenceQuestion) schemas.FenceAnswer {
		return schemas.FenceAnswer{Start: true, Reason: "never ran"}
	})
	w.succeeded(4)
	w.dispatchEmpty()
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}
