package e2e_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/conformance"
	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
)

// conformancePool is the pool the conformance tests' workers serve.
const conformancePool = "conformance"

// runConformance runs the conformance kit against a worker serving mux on
// conformancePool, with the drain check when drain is set.
func runConformance(t *testing.T, mux *executor.Mux, drain bool) *drill.Report {
	t.Helper()
	s := newSystem(t)
	stop := s.worker(executor.Options{WorkerID: "under-test", Pools: []string{conformancePool}, Mux: mux,
		ShutdownTimeout: 20 * time.Second})
	observer, _ := s.srv.Connect()
	opts := conformance.Options{Pool: conformancePool, Client: s.client, Conn: observer, Topology: s.srv.Topology,
		Wait: time.Minute, Logger: s.log}
	if drain {
		// The worker's Run returns once it drained: do not wait for it here.
		opts.Drain = func() error { go stop(); return nil }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := conformance.Executor(ctx, opts)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	var b bytes.Buffer
	_ = r.WriteTable(&b)
	t.Logf("verdict:\n%s", b.String())
	return r
}

// conformanceChecks are the checks every run of the kit makes.
var conformanceChecks = []string{"registration: worker record", "registration: protocol version", "started: reported for a long attempt",
	"cancel: honoured within the grace", "ends: every instance ends", "echo: output recorded", "retries: failed attempts retried", "permanent: failed without retry",
	"deadline: honoured", "logs: shipped", "unknown handler: left alone", "reports: subjects, bodies and ids",
	"lease: taken before the first report", "lease: taken create-only", "ack: confirmation awaited",
	"logs: flushed before the final report", "fence: asked on a redelivery", "heartbeats: fresh", "drain: on SIGTERM"}

// TestConformanceGoExecutor runs the conformance kit against the Go
// executor with the example conformance handlers: every check passes,
// the drain included.
func TestConformanceGoExecutor(t *testing.T) {
	t.Parallel()
	mux := executor.NewMux()
	handlers.RegisterConformance(mux, conformance.DefaultHandlerPrefix)
	r := runConformance(t, mux, true)
	if !r.Passed() {
		t.Fatalf("the Go executor failed the conformance kit: %v", r.Failed())
	}
	for _, name := range conformanceChecks {
		if !slices.ContainsFunc(r.Checks, func(c drill.Check) bool { return c.Name == name && c.Pass && !c.Info }) {
			t.Errorf("the verdict lacks a passing check %q", name)
		}
	}
}

// TestConformanceCatchesBadWorker runs the kit against a worker whose
// sleep ignores cancel and deadline and whose log handler ships nothing:
// those checks fail, the others pass, and the drain is not checked.
func TestConformanceCatchesBadWorker(t *testing.T) {
	t.Parallel()
	good := executor.NewMux()
	handlers.RegisterConformance(good, conformance.DefaultHandlerPrefix)
	mux := executor.NewMux()
	for _, name := range []string{conformance.Echo, conformance.Fail, conformance.Permanent} {
		h, _ := good.Handler(conformance.DefaultHandlerPrefix + name)
		mux.Handle(conformance.DefaultHandlerPrefix+name, h)
	}
	mux.HandleFunc(conformance.DefaultHandlerPrefix+conformance.Sleep, func(context.Context, *executor.Job) (any, error) {
		time.Sleep(8 * time.Second) // ignores its context
		return nil, nil
	})
	mux.HandleFunc(conformance.DefaultHandlerPrefix+conformance.Log, func(context.Context, *executor.Job) (any, error) {
		return map[string]int{"lines": 3}, nil
	})
	r := runConformance(t, mux, false)
	if r.Passed() {
		t.Fatal("a worker that ignores cancel and ships no logs passed the conformance kit")
	}
	failed := r.Failed()
	for _, want := range []string{"cancel: honoured within the grace", "deadline: honoured", "logs: shipped"} {
		if !slices.Contains(failed, want) {
			t.Errorf("failed checks %v, want %q among them", failed, want)
		}
	}
	for _, ok := range []string{"echo: output recorded", "retries: failed attempts retried", "lease: taken before the first report", "unknown handler: left alone"} {
		if slices.Contains(failed, ok) {
			t.Errorf("check %q failed for handlers that do it right", ok)
		}
	}
	if !slices.ContainsFunc(r.Checks, func(c drill.Check) bool { return c.Name == "drain: on SIGTERM" && c.Info }) {
		t.Error("the drain check is not marked not checked")
	}
}
