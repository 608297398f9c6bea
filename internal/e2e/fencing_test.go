package e2e_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/fencehttp"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store/storetest"
)

// buildFenceExample builds examples/fence, the worked example of the
// fencing token, into the test's temporary folder.
func buildFenceExample(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "fence")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/fence")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/fence: %v\n%s", err, out)
	}
	return bin
}

// startFenceWorker starts examples/fence as a process, its stderr in the
// returned buffer.
func startFenceWorker(t *testing.T, bin string, args ...string) (*exec.Cmd, *logtest.Buffer) {
	t.Helper()
	stderr := &logtest.Buffer{Echo: io.Discard}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, stderr
}

// pauseStaleAttempt fires settle, pauses (SIGSTOP) the victim that runs
// attempt 1 past its lease, lets rescue start the worker that runs
// attempt 2 to success, resumes the victim, and waits until the victim
// says its write was fenced out. It returns the instance.
func (s *system) pauseStaleAttempt(t *testing.T, victim *exec.Cmd, victimLog *logtest.Buffer, rescue func()) schemas.Instance {
	t.Helper()
	s.apply(`
task_name: settle
execution:
  handler: example.settle
  timeout: 1m
  retry: {max_attempts: 3, initial_interval_sec: 0}
`)
	id := s.fire("settle", map[string]any{"account": "acme", "amount_cents": 1200})
	running := s.waitState(id, schemas.StateRunning, 30*time.Second)
	if running.WorkerID != "victim" || running.Attempt != 1 {
		t.Fatalf("running on %q attempt %d, want victim attempt 1", running.WorkerID, running.Attempt)
	}
	if err := victim.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rescue()
	done := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	if done.Attempt != 2 || done.WorkerID != "rescuer" {
		t.Fatalf("succeeded at attempt %d on %q, want attempt 2 on rescuer", done.Attempt, done.WorkerID)
	}
	if err := victim.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resumed stale attempt to be fenced out", 30*time.Second, func() (bool, error) {
		return strings.Contains(victimLog.String(), "settlement fenced out"), nil
	})
	return done
}

// TestFencePGRefusesAPausedAttemptsWrite: a worker (a real process) is
// paused with SIGSTOP past its lease while its handler works towards a
// write through fencepg; the retry on another worker commits; the paused
// attempt, resumed, writes nothing: the user's table holds one row, the
// retry's, and the fence is the retry's token, greater than the first's.
func TestFencePGRefusesAPausedAttemptsWrite(t *testing.T) {
	t.Parallel()
	bin := buildFenceExample(t)
	s := newSystem(t)
	userDB := storetest.URL(t) // the user's own database
	victim, victimLog := startFenceWorker(t, bin, "--nats-url", s.srv.URL, "--worker-id", "victim",
		"--database-url", userDB, "--work", "3s", "--ignore-cancel")

	s.pauseStaleAttempt(t, victim, victimLog, func() {
		startFenceWorker(t, bin, "--nats-url", s.srv.URL, "--worker-id", "rescuer", "--database-url", userDB)
	})

	db, err := pgxpool.New(t.Context(), userDB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, attempt int
	var rowFence, fence int64
	if err := db.QueryRow(t.Context(), `SELECT count(*), max(attempt), max(fence) FROM settlements`).Scan(&rows, &attempt, &rowFence); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(t.Context(), `SELECT fence FROM ax_fences`).Scan(&fence); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || attempt != 2 || fence != rowFence {
		t.Errorf("settlements: %d rows, attempt %d, fence %d (ax_fences %d); want 1 row, attempt 2's, its fence", rows, attempt, rowFence, fence)
	}
	if !strings.Contains(victimLog.String(), "fenced out") {
		t.Errorf("the stale attempt did not say it was fenced out:\n%s", victimLog.String())
	}
}

// TestFenceHTTPRefusesAPausedAttemptsWrite is the same pause with the
// AX-Fence header to a downstream service guarded by fencehttp: the
// service serves the retry's request and refuses the resumed attempt's
// with 409, having accepted one settlement.
func TestFenceHTTPRefusesAPausedAttemptsWrite(t *testing.T) {
	t.Parallel()
	bin := buildFenceExample(t)
	s := newSystem(t)
	var accepted, refused atomic.Int64
	guard := fencehttp.NewGuard(func(r *http.Request) string { return r.URL.Path })
	guarded := guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepted.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		guarded.ServeHTTP(rec, r)
		if rec.Code == http.StatusConflict {
			refused.Add(1)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer downstream.Close()

	victim, victimLog := startFenceWorker(t, bin, "--nats-url", s.srv.URL, "--worker-id", "victim",
		"--downstream", downstream.URL, "--work", "3s", "--ignore-cancel")
	s.pauseStaleAttempt(t, victim, victimLog, func() {
		startFenceWorker(t, bin, "--nats-url", s.srv.URL, "--worker-id", "rescuer", "--downstream", downstream.URL)
	})
	if accepted.Load() != 1 || refused.Load() != 1 {
		t.Errorf("downstream accepted %d and refused %d settlements, want 1 and 1", accepted.Load(), refused.Load())
	}
}

// TestFenceGrowsWithAttemptsAndMutexHolders: Job.Fence is greater for
// each later attempt of an instance, and for each later holder of a mutex
// key, whatever the instance.
func TestFenceGrowsWithAttemptsAndMutexHolders(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply("task_name: retried\nexecution: {handler: test.retried, retry: {max_attempts: 3, initial_interval_sec: 0}}\n")
	s.apply("task_name: exclusive\nconcurrency: {mutex_key: books}\nexecution: {handler: test.exclusive}\n")
	var mu sync.Mutex
	var attempts, holders []uint64
	mux := executor.NewMux()
	mux.HandleFunc("test.retried", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		attempts = append(attempts, j.Fence())
		mu.Unlock()
		if j.Attempt < 3 {
			return nil, errors.New("again")
		}
		return nil, nil
	})
	mux.HandleFunc("test.exclusive", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		holders = append(holders, j.Fence())
		mu.Unlock()
		return nil, nil
	})
	s.executor("w1", mux, 4)
	s.executor("w2", mux, 4)
	id := s.fire("retried", nil)
	s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	var ids []int64
	for range 4 {
		ids = append(ids, s.fire("exclusive", nil))
	}
	for _, id := range ids {
		s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, fences := range map[string][]uint64{"attempts": attempts, "mutex holders": holders} {
		for i, f := range fences {
			if f == 0 || (i > 0 && f <= fences[i-1]) {
				t.Errorf("%s' fences %v: not strictly increasing from 1", name, fences)
				break
			}
		}
	}
	if len(attempts) != 3 || len(holders) != 4 {
		t.Errorf("%d attempts and %d holders ran, want 3 and 4", len(attempts), len(holders))
	}
}
