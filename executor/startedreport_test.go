package executor_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// startedWorker runs a worker with the builtins and a gate handler
// ("gate") whose StartedDelay is delay.
func startedWorker(t *testing.T, delay time.Duration) (*world, *gate, executor.Options) {
	w := newWorld(t)
	g := newGate()
	mux := builtins()
	mux.Handle("gate", g)
	opts := w.options(mux)
	opts.StartedDelay = delay
	executortest.Run(t, opts)
	return w, g, opts
}

// An attempt that ends within StartedDelay sends its final report alone;
// one that runs longer is reported started once the delay has passed, while
// it runs, and before its final report.
func TestStartedReportOnlyForAttemptsThatRunPastTheDelay(t *testing.T) {
	t.Parallel()
	w, g, opts := startedWorker(t, 200*time.Millisecond)

	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: executor.BuiltinEcho})
	quick := w.nextOf(schemas.ReportSucceeded, 1)
	if quick.StartedAt.IsZero() || quick.At.Before(quick.StartedAt) {
		t.Errorf("final report of the quick attempt = %+v: it must say when it started", quick.Report)
	}

	// Dispatched after the quick attempt ended, the slow one's started
	// report falls due after any the quick one could have sent: the next
	// report being the slow one's shows the quick one sent none.
	dispatched := time.Now()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "gate"})
	<-g.entered
	started := w.nextOf(schemas.ReportStarted, 2)
	if d := time.Since(dispatched); d < opts.StartedDelay {
		t.Errorf("started report came %v after the dispatch, want at least %v", d, opts.StartedDelay)
	}
	if !started.At.Equal(started.StartedAt) {
		t.Errorf("started report at %v, started at %v: a started report is dated by the start", started.At, started.StartedAt)
	}
	close(g.open)
	done := w.nextOf(schemas.ReportSucceeded, 2)
	if !done.StartedAt.Equal(started.StartedAt) {
		t.Errorf("final report started at %v, the started report at %v", done.StartedAt, started.StartedAt)
	}
	w.dispatchEmpty()
	w.noMoreReports()
}

// The start a report gives is the handler's: after the lease is taken and
// the dispatch's ack confirmed (on a cluster, two replicated writes), not
// when the worker began to take the lease.
func TestReportedStartIsAfterTheLease(t *testing.T) {
	t.Parallel()
	w, g, _ := startedWorker(t, -1) // reported started before the handler runs

	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "gate"})
	<-g.entered
	entry, err := w.leases.Get(t.Context(), streams.LeaseKey(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	var lease schemas.Lease
	if err := json.Unmarshal(entry.Value(), &lease); err != nil {
		t.Fatal(err)
	}
	started := w.nextOf(schemas.ReportStarted, 1)
	if !started.StartedAt.After(lease.AcquiredAt) {
		t.Errorf("reported started at %v, the lease taken at %v: the handler starts after the lease and the ack",
			started.StartedAt, lease.AcquiredAt)
	}
	close(g.open)
	if done := w.nextOf(schemas.ReportSucceeded, 1); !done.StartedAt.Equal(started.StartedAt) {
		t.Errorf("final report started at %v, the started report at %v", done.StartedAt, started.StartedAt)
	}
}
