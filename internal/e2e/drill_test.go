package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/drill/drillfaults"
	"github.com/ax-scheduler/ax/examples/executor/handlers"
	"github.com/ax-scheduler/ax/executor"
)

// runTaskDrill applies examples/<file>, drills its task against a system
// whose dispatcher has drill faults on, with the example handlers (their
// ledger under the test's folder), and returns the verdict.
func runTaskDrill(t *testing.T, file, task string, payload string) *drill.Report {
	t.Helper()
	s := newSystem(t, func(o *dispatcher.Options) { o.Faults = drillfaults.New(drillfaults.Options{Store: o.Store}) })
	data, err := os.ReadFile(filepath.Join("../../examples", file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.ApplyTask(context.Background(), data, "application/yaml"); err != nil {
		t.Fatalf("apply %s: %v", file, err)
	}
	ledger := filepath.Join(t.TempDir(), "ledger")
	mux := builtinsMux()
	mux.Handle("ledger.append", &handlers.Ledger{Path: ledger, Once: true})
	mux.Handle("ledger.append-unsafe", &handlers.Ledger{Path: ledger})
	h, _ := handlersMux().Handler("sleep.ignore-cancel")
	mux.Handle("sleep.ignore-cancel", h)
	var conns []*nats.Conn
	t.Cleanup(func() {
		for _, nc := range conns {
			nc.Close()
		}
	})
	connect := func(name string) (*nats.Conn, error) {
		nc, err := nats.Connect(s.srv.URL, nats.Name(name))
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}
	dispatch, err := connect("drill dispatch")
	if err != nil {
		t.Fatal(err)
	}
	var p json.RawMessage
	if payload != "" {
		p = json.RawMessage(payload)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := drill.Task(ctx, drill.TaskOptions{Task: task, Client: s.client, Connect: connect, Dispatch: dispatch,
		Payload: p, Runs: 3, LeaseTTL: leaseTTL, Grace: 500 * time.Millisecond, StormFailures: 2, Wait: time.Minute, Logger: s.log}, mux)
	if err != nil {
		t.Fatalf("drill task %s: %v", task, err)
	}
	var b bytes.Buffer
	_ = r.WriteTable(&b)
	t.Logf("verdict:\n%s", b.String())
	return r
}

// handlersMux is the example executor's handlers.
func handlersMux() *executor.Mux {
	m := executor.NewMux()
	handlers.Register(m)
	return m
}

// TestDrillTaskPasses drills a handler that is idempotent and honours
// cancellation: every check of the four faults passes.
func TestDrillTaskPasses(t *testing.T) {
	t.Parallel()
	r := runTaskDrill(t, "drill-ledger.yaml", "ledger", "")
	if !r.Passed() {
		t.Fatalf("the drill of a sound handler failed: %v", r.Failed())
	}
	for _, want := range []string{"node crash: retry started in time", "node crash: ended as the policy says",
		"database jitter: reports refused and redelivered", "database jitter: nothing failed, doubled or lost",
		"retry storm: backoff follows the policy", "retry storm: attempts and interval capped",
		"retry storm: other firings' start latency", "duplicate delivery: handler called once",
		"cancellation: honoured within the grace", "idempotency: under a re-run",
		"fence: the crashed attempt's write is refused"} {
		if !slices.ContainsFunc(r.Checks, func(c drill.Check) bool { return c.Name == want && c.Pass }) {
			t.Errorf("the verdict lacks a passing check %q", want)
		}
	}
}

// TestDrillTaskCatchesBadHandlers drills the examples of a handler that is
// not idempotent under a re-run and of one that ignores cancellation: each
// verdict fails, naming the check.
func TestDrillTaskCatchesBadHandlers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, task, payload, check string
	}{
		{"drill-not-idempotent.yaml", "ledger-unsafe", "", "idempotency: under a re-run"},
		{"drill-ignores-cancel.yaml", "sleepy", `{"seconds": 2}`, "cancellation: honoured within the grace"},
	} {
		t.Run(tc.task, func(t *testing.T) {
			t.Parallel()
			r := runTaskDrill(t, tc.file, tc.task, tc.payload)
			if r.Passed() {
				t.Fatalf("the drill of %s passed", tc.task)
			}
			if failed := r.Failed(); !slices.Contains(failed, tc.check) {
				t.Errorf("failed checks %v, want %q among them", failed, tc.check)
			}
		})
	}
}
