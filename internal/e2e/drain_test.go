package e2e_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// lockedBuffer is an io.Writer a process writes to while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _ = os.Stderr.Write(p)
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	var stderr lockedBuffer
	drainer := exec.Command(bin, "executor", "--nats-url", s.srv.URL, "--worker-id", "drainer", "--slots", "4",
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
	waitFor(t, "the executor to stop pulling", 20*time.Second, func() (bool, error) {
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
	inst := s.waitState(id, schemas.StateSucceeded, 10*time.Second)
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
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	s.executor("successor", mux, 4)
	next := s.waitState(later, schemas.StateSucceeded, 20*time.Second)
	if next.WorkerID != "successor" || next.Attempt != 1 {
		t.Errorf("the firing after SIGTERM ran on %q attempt %d, want successor attempt 1", next.WorkerID, next.Attempt)
	}
}
