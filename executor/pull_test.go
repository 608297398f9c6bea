package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
)

func TestSlots(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	g := newGate()
	var inFlight peak
	mux.HandleFunc("gate", func(ctx context.Context, task *executor.Job) (any, error) {
		defer inFlight.enter()()
		return g.HandleTask(ctx, task)
	})
	opts := w.options(mux)
	opts.Slots = 2
	s := executortest.Run(t, opts)
	if s.Slots() != 2 {
		t.Fatalf("Slots() = %d", s.Slots())
	}
	for i := range 5 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: "gate"})
	}
	<-g.entered
	<-g.entered
	if s.Busy() != 2 {
		t.Errorf("Busy() = %d with two blocked attempts", s.Busy())
	}
	keys, err := w.leases.Keys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Errorf("leases %v while two attempts run", keys)
	}
	close(g.open)

	// In stream order, no more than two attempts are ever between started and finished.
	running, finished := 0, 0
	for finished < 5 {
		switch r := w.next(); r.Kind {
		case schemas.ReportStarted:
			if running++; running > 2 {
				t.Fatalf("%d attempts started and not finished", running)
			}
		case schemas.ReportSucceeded:
			running--
			finished++
		default:
			t.Fatalf("report %+v", r.Report)
		}
	}
	if most := inFlight.most.Load(); most != 2 {
		t.Errorf("at most %d handlers ran at once, want 2", most)
	}
}

func TestPriorities(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.dispatch(schemas.PriorityLow, schemas.Dispatch{InstanceID: 1, Handler: executor.BuiltinEcho})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: executor.BuiltinEcho})
	w.dispatch(schemas.PriorityUrgent, schemas.Dispatch{InstanceID: 3, Handler: executor.BuiltinEcho})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 4, Handler: executor.BuiltinEcho})
	opts := w.options(builtins())
	opts.Slots = 1
	executortest.Run(t, opts)
	for _, id := range []int64{3, 2, 4, 1} {
		w.succeeded(id)
	}
}

// TestLowPriorityProgressesUnderUrgentLoad queues a long urgent backlog and
// a little low-priority work: one round in five takes low-priority work
// first, so it starts long before the urgent backlog is drained.
func TestLowPriorityProgressesUnderUrgentLoad(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for i := range 12 {
		w.dispatch(schemas.PriorityUrgent, schemas.Dispatch{InstanceID: int64(i + 1), Handler: executor.BuiltinEcho})
	}
	for i := range 3 {
		w.dispatch(schemas.PriorityLow, schemas.Dispatch{InstanceID: int64(101 + i), Handler: executor.BuiltinEcho})
	}
	opts := w.options(builtins())
	opts.Slots = 1
	executortest.Run(t, opts)
	// With one slot each round takes one attempt: rounds 5, 10 and 15 go low first.
	for _, id := range []int64{1, 2, 3, 4, 101, 5, 6, 7, 8, 102, 9, 10, 11, 12, 103} {
		w.succeeded(id)
	}
}

func TestDoorbell(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	opts := w.options(builtins())
	opts.IdleWait = time.Hour
	executortest.Run(t, opts)
	// counted waits until the queue's consumer counts its one attempt: the
	// server counts a stored message after it acks the publish, and a ring
	// heard before then fetches nothing and is spent (the worker would find
	// the attempt at its next poll, an hour away here).
	counted := func(p schemas.Priority) {
		t.Helper()
		c, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), w.topo.PoolConsumer(schemas.DefaultPool, p, executor.BuiltinEcho).Durable)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the "+string(p)+" queue's consumer to count its attempt", func() bool {
			info, err := c.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return info.NumPending > 0 || info.Delivered.Consumer > 0
		})
	}
	// The worker polled once, found nothing and waits for an hour or a ring.
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: executor.BuiltinEcho})
	counted(schemas.PriorityNormal)
	w.ring(schemas.PriorityNormal, executor.BuiltinEcho)
	w.succeeded(1)
	// A freed slot is another reason to look again; the next attempt needs a ring.
	w.dispatch(schemas.PriorityUrgent, schemas.Dispatch{InstanceID: 2, Handler: executor.BuiltinEcho})
	counted(schemas.PriorityUrgent)
	w.ring(schemas.PriorityUrgent, executor.BuiltinEcho)
	w.succeeded(2)
}

// TestDoorbellBeforeTheAttempt rings a queue's doorbell before its attempt
// is in the stream, as a ring heard before the server counts a stored
// message is: the fetch the ring sends finds nothing, and the worker must not
// spend the ring on it. It waits on the server for the queue's next message
// (a pull request the server holds: the consumer counts it waiting) and
// takes the attempt the moment it comes, with no other ring and no poll
// (IdleWait an hour).
func TestDoorbellBeforeTheAttempt(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	opts := w.options(builtins())
	opts.IdleWait = time.Hour
	opts.DoorbellWait = time.Minute
	executortest.Run(t, opts)
	c, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), w.topo.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, executor.BuiltinEcho).Durable)
	if err != nil {
		t.Fatal(err)
	}
	w.ring(schemas.PriorityNormal, executor.BuiltinEcho)
	eventually(t, "the worker to wait on the server for the rung queue's attempt", func() bool {
		info, err := c.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.NumWaiting > 0
	})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: executor.BuiltinEcho})
	w.succeeded(1)
}
