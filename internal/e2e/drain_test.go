package e2e_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	drillsys "github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestSIGTERMDrainsTheExecutor sends SIGTERM to a real `ax executor`
// process in the middle of an attempt, as Kubernetes does on scale-in: the
// executor stops pulling at once, the running attempt finishes and
// succeeds exactly once, the executor exits cleanly, and an attempt fired
// after the signal waits for another worker instead of reaching it.
func TestSIGTERMDrainsTheExecutor(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	s := newSystem(t)
	s.apply(`
task_name: drained
execution:
  handler: builtin.sleep
  retry:
    max_attempts: 3
`)
	stderr := logtest.Buffer{Echo: os.Stderr}
	drainer := exec.Command(bin, "executor", "--require-nats-auth=false", "--nats-url", s.srv.URL, "--worker-id", "drainer", "--slots", "4",
		"--shutdown-timeout", "60s", "--log-level", "info")
	drainer.Stdout, drainer.Stderr = os.Stderr, &stderr
	if err := drainer.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- drainer.Wait() }()
	t.Cleanup(func() {
		_ = drainer.Process.Kill()
		<-exited
	})

	id := s.fire("drained", map[string]float64{"seconds": 4})
	running := s.waitState(id, schemas.StateRunning, 30*time.Second)
	if running.WorkerID != "drainer" || running.Attempt != 1 {
		t.Fatalf("running on %q attempt %d, want drainer attempt 1", running.WorkerID, running.Attempt)
	}
	if err := drainer.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Once it says it waits for its attempts, it pulls no more.
	waitFor(t, "the executor to stop pulling", 60*time.Second, func() (bool, error) {
		return strings.Contains(stderr.String(), "waiting for running attempts"), nil
	})
	later := s.fire("drained", map[string]float64{"seconds": 0})

	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the executor exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the executor did not exit within 60 s of SIGTERM")
	}
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	succeeded := 0
	for _, tr := range inst.Transitions {
		if tr.To == schemas.StateSucceeded {
			succeeded++
		}
		if tr.To == schemas.StateRetrying || tr.To == schemas.StateFailed {
			t.Errorf("the drained attempt ended %s (%s): %v", tr.To, tr.Reason, path(inst))
		}
	}
	if succeeded != 1 || inst.Attempt != 1 || inst.WorkerID != "drainer" {
		t.Errorf("SUCCEEDED %d times, attempt %d by %q, want once, attempt 1 by drainer: %v",
			succeeded, inst.Attempt, inst.WorkerID, path(inst))
	}

	// The firing after the signal waited for a worker that pulls.
	if got, err := s.store.GetInstance(t.Context(), later); err != nil || got.State != schemas.StateDispatched {
		t.Fatalf("the firing after SIGTERM is %s (%v), want DISPATCHED, waiting", got.State, err)
	}
	mux := builtinsMux()
	s.executor("successor", mux, 4)
	next := s.waitState(later, schemas.StateSucceeded, 60*time.Second)
	if next.WorkerID != "successor" || next.Attempt != 1 {
		t.Errorf("the firing after SIGTERM ran on %q attempt %d, want successor attempt 1", next.WorkerID, next.Attempt)
	}
}

// TestSIGTERMHandsBackWhatOutlivesTheGrace sends SIGTERM to a real `ax
// executor` process running two attempts of a task with max_attempts 1: a
// short one, which finishes within the shutdown timeout and succeeds there,
// and a long one, which outlives it: it is cancelled and handed back (a
// released report, its lease deleted), and runs again on another worker as
// attempt 2, which spends no attempt — with max_attempts 1 a spent one
// would fail the instance. The ledger shows the long one's handler started
// twice (the hand-back re-runs it) and the short one's once.
func TestSIGTERMHandsBackWhatOutlivesTheGrace(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	// A lease TTL far longer than the test's waits: the next attempt must
	// start without waiting for the handed-back one's lease to expire.
	s := newSystemTTL(t, 5*time.Minute)
	s.apply(`
task_name: handback
execution:
  handler: drill.work
  retry:
    max_attempts: 1
`)
	ledger := filepath.Join(t.TempDir(), "ledger")
	// The short attempt works 8 s from its start, which the test sees
	// before it signals: it ends inside the grace, however late the signal.
	// The long one works 40 s: it outlives the grace unless the machine
	// takes 25 s between its start and the signal.
	const grace = 15 * time.Second
	stderr := logtest.Buffer{Echo: os.Stderr}
	drainer := exec.Command(bin, "executor", "--require-nats-auth=false", "--nats-url", s.srv.URL, "--worker-id", "drainer", "--slots", "4",
		"--shutdown-timeout", grace.String(), "--log-level", "info", "--drill-ledger", ledger)
	drainer.Stdout, drainer.Stderr = os.Stderr, &stderr
	if err := drainer.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- drainer.Wait() }()
	t.Cleanup(func() {
		_ = drainer.Process.Kill()
		<-exited
	})

	runsOf := func() map[int64][]drillsys.LedgerRun {
		runs, err := drillsys.ReadLedger(ledger)
		if err != nil {
			t.Fatal(err)
		}
		by := make(map[int64][]drillsys.LedgerRun)
		for _, r := range runs {
			by[r.Instance] = append(by[r.Instance], r)
		}
		return by
	}
	started := func(id int64) {
		waitFor(t, "a handler to start on the drainer", 60*time.Second, func() (bool, error) {
			return len(runsOf()[id]) == 1, nil
		})
	}
	long := s.fire("handback", drillsys.Work{MS: 40_000})
	started(long)
	short := s.fire("handback", drillsys.Work{MS: 8_000})
	started(short)
	signalled := time.Now()
	if err := drainer.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the executor exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(grace + 60*time.Second):
		t.Fatal("the executor did not exit within the shutdown timeout and 60 s of SIGTERM")
	}

	// The short attempt was in flight at the signal and finished there.
	by := runsOf()
	if runs := by[short]; len(runs) != 1 || runs[0].Cancelled || runs[0].End.IsZero() || !runs[0].End.After(signalled) {
		t.Fatalf("short attempt's runs %+v, want one run that ended after the signal (%v)", runs, signalled)
	}
	inst := s.waitState(short, schemas.StateSucceeded, 30*time.Second)
	if inst.Attempt != 1 || inst.WorkerID != "drainer" {
		t.Errorf("short attempt: attempt %d by %q, want attempt 1 by drainer: %v", inst.Attempt, inst.WorkerID, path(inst))
	}

	// The long one was cancelled and handed back: its lease is gone at
	// once, and the instance waits for a worker at attempt 2 of 2.
	if runs := by[long]; len(runs) != 1 || !runs[0].Cancelled {
		t.Fatalf("long attempt's runs %+v, want one cancelled run", runs)
	}
	leases, err := s.js.KeyValue(t.Context(), s.srv.Topology.LeasesBucket())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := leases.Get(t.Context(), streams.LeaseKey(long, 1)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease of the handed-back attempt: %v %v, want it deleted", e, err)
	}
	var waiting schemas.Instance
	waitFor(t, "the handed-back instance to be DISPATCHED at attempt 2", 30*time.Second, func() (bool, error) {
		var err error
		waiting, err = s.store.GetInstance(t.Context(), long)
		return err == nil && waiting.State == schemas.StateDispatched && waiting.Attempt == 2, err
	})
	if waiting.MaxAttempts != 2 {
		t.Errorf("handed-back instance: max_attempts %d, want 2 (the task's 1, and one for the hand-back)", waiting.MaxAttempts)
	}

	mux := executor.NewMux()
	drillsys.RegisterHandlers(mux, ledger)
	s.executor("successor", mux, 4)
	inst = s.waitState(long, schemas.StateSucceeded, 90*time.Second)
	if inst.Attempt != 2 || inst.WorkerID != "successor" {
		t.Errorf("long attempt: attempt %d by %q, want attempt 2 by successor: %v", inst.Attempt, inst.WorkerID, path(inst))
	}
	handedBack := 0
	for _, tr := range inst.Transitions {
		switch {
		case tr.To == schemas.StateFailed:
			t.Errorf("the handed-back instance failed on the way: %v", path(inst))
		case tr.From == schemas.StateRunning && tr.To == schemas.StateRetrying:
			handedBack++
			if tr.Attempt != 1 || tr.Operator != "worker:drainer" || !strings.HasPrefix(tr.Reason, "handed back: worker drainer stopped") {
				t.Errorf("hand-back transition %+v, want attempt 1 by worker:drainer, reason \"handed back: …\"", tr)
			}
		}
	}
	if handedBack != 1 {
		t.Errorf("%d RUNNING→RETRYING transitions, want the one hand-back: %v", handedBack, path(inst))
	}
	by = runsOf()
	if runs := by[long]; len(runs) != 2 || runs[1].Attempt != 2 || runs[1].Worker != "successor" || runs[1].Cancelled || runs[1].End.IsZero() {
		t.Errorf("long attempt's runs %+v, want the cancelled one and attempt 2 on successor to its end", runs)
	}
	if runs := by[short]; len(runs) != 1 {
		t.Errorf("short attempt's runs %+v, want one: a handler runs twice only where a hand-back happened", runs)
	}
}
