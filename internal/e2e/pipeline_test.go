package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// builtinsMux is a mux with the built-in handlers (builtin.echo, .fail and
// .sleep).
func builtinsMux() *executor.Mux {
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	return mux
}

// countingMux serves "test.count", which counts its runs and echoes its
// payload, beside the built-in handlers.
func countingMux(runs *atomic.Int64) *executor.Mux {
	mux := builtinsMux()
	mux.HandleFunc("test.count", func(_ context.Context, t *executor.Job) (any, error) {
		runs.Add(1)
		return t.Payload, nil
	})
	return mux
}

// countingExecutor starts worker w1 with countingMux and slots slots, and
// returns the count of test.count's runs.
func (s *system) countingExecutor(slots int) *atomic.Int64 {
	s.t.Helper()
	runs := new(atomic.Int64)
	s.executor("w1", countingMux(runs), slots)
	return runs
}

// ranOnce checks, once the recorder has taken every report, that
// test.count ran once.
func (s *system) ranOnce(runs *atomic.Int64) {
	s.t.Helper()
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	if n := runs.Load(); n != 1 {
		s.t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestFireRunsOnceAndSucceeds(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	runs := s.countingExecutor(4)
	s.apply(`
task_name: hello
owner: team-a
execution:
  handler: test.count
`)
	id := s.fire("hello", map[string]string{"greeting": "hi"})
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)

	want := []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}
	if got := path(inst); !slices.Equal(got, want) {
		t.Errorf("transitions = %v, want %v", got, want)
	}
	if inst.Attempt != 1 || inst.WorkerID != "w1" {
		t.Errorf("attempt %d on worker %q, want 1 on w1", inst.Attempt, inst.WorkerID)
	}
	var out map[string]string
	if err := json.Unmarshal(inst.Output, &out); err != nil || out["greeting"] != "hi" {
		t.Errorf("output = %s (%v), want the payload", inst.Output, err)
	}
	s.ranOnce(runs)
}

func TestSameEventThreeTimesMakesOneInstance(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	runs := s.countingExecutor(4)
	s.apply(`
task_name: once
execution:
  handler: test.count
`)
	// Three messages with the same event id and no Nats-Msg-Id, so that
	// JetStream keeps all three: only PostgreSQL's uniqueness holds them to one.
	for range 3 {
		m := nats.NewMsg(s.srv.Topology.Trigger("once"))
		m.Data = []byte(`{"event_id": "order-42", "payload": {"n": 1}}`)
		if _, err := s.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	inst, err := s.store.InstanceByEvent(context.Background(), "once", "order-42")
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(inst.ID, schemas.StateSucceeded, 60*time.Second)
	list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "once"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("%d instances, want 1", len(list))
	}
	s.ranOnce(runs)
}

func TestFailingTaskEndsFailedAfterItsAttempts(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := builtinsMux()
	s.executor("w1", mux, 4)
	s.apply(`
task_name: flaky
execution:
  handler: builtin.fail
  retry:
    max_attempts: 3
    backoff: fixed
    initial_interval_sec: 0.2
`)
	id := s.fire("flaky", map[string]string{"message": "disk full"})
	inst := s.waitState(id, schemas.StateFailed, 60*time.Second)

	want := []string{
		"→CREATED", "CREATED→DISPATCHED",
		"DISPATCHED→RUNNING", "RUNNING→RETRYING", "RETRYING→DISPATCHED",
		"DISPATCHED→RUNNING", "RUNNING→RETRYING", "RETRYING→DISPATCHED",
		"DISPATCHED→RUNNING", "RUNNING→FAILED",
	}
	if got := path(inst); !slices.Equal(got, want) {
		t.Errorf("transitions = %v, want %v", got, want)
	}
	if inst.Attempt != 3 || inst.Error != "disk full" {
		t.Errorf("attempt %d, error %q; want attempt 3, error %q", inst.Attempt, inst.Error, "disk full")
	}
	// Each attempt is recorded with its number, and the retries waited.
	var attempts []int
	var failedAt, retriedAt []time.Time
	for _, tr := range inst.Transitions {
		switch {
		case tr.To == schemas.StateRunning:
			attempts = append(attempts, tr.Attempt)
		case tr.To == schemas.StateRetrying:
			failedAt = append(failedAt, tr.At)
		case tr.From == schemas.StateRetrying:
			retriedAt = append(retriedAt, tr.At)
		}
	}
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("RUNNING attempts = %v, want [1 2 3]", attempts)
	}
	for i := range retriedAt {
		// 0.2 s less at most 10% jitter.
		if wait := retriedAt[i].Sub(failedAt[i]); wait < 180*time.Millisecond {
			t.Errorf("retry %d started %v after the failure, want ≥ 180ms", i+1, wait)
		}
	}
}

func TestReportsFromAStaleAttemptChangeNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := builtinsMux()
	s.executor("w1", mux, 4)
	s.apply(`
task_name: fenced
execution:
  handler: builtin.fail
  retry:
    max_attempts: 2
    initial_interval_sec: 0
`)
	id := s.fire("fenced", nil)
	before := s.waitState(id, schemas.StateFailed, 60*time.Second)

	// A late success from attempt 1 must not resurrect the instance.
	late := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "ghost", Kind: schemas.ReportSucceeded,
		At: time.Now(), StartedAt: time.Now(), Output: json.RawMessage(`{"late":true}`)}
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, late.WorkerID, id), "", late); err != nil {
		t.Fatal(err)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	after, err := s.store.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != before.State || after.Attempt != before.Attempt || len(after.Transitions) != len(before.Transitions) ||
		string(after.Output) != string(before.Output) {
		t.Errorf("stale report changed the instance: before %s/%d/%d transitions, after %s/%d/%d",
			before.State, before.Attempt, len(before.Transitions), after.State, after.Attempt, len(after.Transitions))
	}
}

func TestTaskFailingTwiceThenSucceedsWithExponentialBackoff(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.third-time-lucky", func(_ context.Context, task *executor.Job) (any, error) {
		if task.Attempt < 3 {
			return nil, fmt.Errorf("attempt %d: not yet", task.Attempt)
		}
		return map[string]int{"attempt": task.Attempt}, nil
	})
	s.executor("w1", mux, 4)
	s.apply(`
task_name: lucky
execution:
  handler: test.third-time-lucky
  retry:
    max_attempts: 5
    backoff: exp
    initial_interval_sec: 0.2
`)
	id := s.fire("lucky", nil)
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	if inst.Attempt != 3 || string(inst.Output) != `{"attempt": 3}` {
		t.Errorf("attempt %d, output %s; want attempt 3 with its output", inst.Attempt, inst.Output)
	}
	// The waits grow: 0.2 s, then 0.4 s, each less at most 10% jitter.
	var failed, retried []time.Time
	var reasons []string
	for _, tr := range inst.Transitions {
		switch {
		case tr.To == schemas.StateRetrying:
			failed = append(failed, tr.At)
			reasons = append(reasons, tr.Reason)
		case tr.From == schemas.StateRetrying:
			retried = append(retried, tr.At)
		}
	}
	if len(failed) != 2 || len(retried) != 2 {
		t.Fatalf("transitions %v: want two failures and two retries", path(inst))
	}
	for i, min := range []time.Duration{180 * time.Millisecond, 360 * time.Millisecond} {
		if wait := retried[i].Sub(failed[i]); wait < min {
			t.Errorf("retry %d waited %v, want ≥ %v", i+1, wait, min)
		}
	}
	if reasons[0] != "attempt 1: not yet" || reasons[1] != "attempt 2: not yet" {
		t.Errorf("failure reasons = %q, want each attempt's error", reasons)
	}
}
