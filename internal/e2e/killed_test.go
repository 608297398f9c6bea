package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	drillsys "github.com/ax-scheduler/ax/drill/system"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

func TestKilledExecutorLosesItsLeaseAndTheNextAttemptSucceeds(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	s := newSystem(t)
	s.apply(`
task_name: survivor
execution:
  handler: builtin.sleep
  retry:
    max_attempts: 3
`)

	// An executor in a process of its own, to be killed without a goodbye.
	victim, err := drillsys.StartProc("victim", os.Stderr, nil, bin, "executor", "--require-nats-auth=false", "--nats-url", s.srv.URL, "--worker-id", "victim", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Kill() })

	id := s.fire("survivor", map[string]float64{"seconds": 1.5})
	running := s.waitState(id, schemas.StateRunning, 30*time.Second)
	if running.WorkerID != "victim" || running.Attempt != 1 {
		t.Fatalf("running on %q attempt %d, want victim attempt 1", running.WorkerID, running.Attempt)
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()

	mux := builtinsMux()
	s.executor("rescuer", mux, 4)
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	if inst.Attempt != 2 || inst.WorkerID != "rescuer" {
		t.Errorf("succeeded on attempt %d by %q, want attempt 2 by rescuer", inst.Attempt, inst.WorkerID)
	}
	var redispatched time.Time
	for _, tr := range inst.Transitions {
		if tr.From == schemas.StateRetrying && tr.To == schemas.StateDispatched && tr.Attempt == 2 {
			redispatched = tr.At
		}
		if tr.To == schemas.StateRetrying && tr.Operator != "reaper" {
			t.Errorf("attempt 1 ended by %q, want the reaper", tr.Operator)
		}
	}
	if redispatched.IsZero() {
		t.Fatalf("no RETRYING→DISPATCHED transition for attempt 2: %v", path(inst))
	}
	if lag := redispatched.Sub(killedAt); lag > leaseTTL+time.Second {
		t.Errorf("dispatched again %v after the kill, want within lease TTL + 1s = %v", lag, leaseTTL+time.Second)
	}

	// The dead attempt's report, arriving now, changes nothing.
	late := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "victim", Kind: schemas.ReportFailed,
		At: time.Now(), StartedAt: time.Now(), Error: "late news", Permanent: true}
	if _, err := streams.Publish(context.Background(), s.js, s.srv.Topology.Report(schemas.DefaultPool, late.WorkerID, id), "", late); err != nil {
		t.Fatal(err)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	after, err := s.store.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != schemas.StateSucceeded || after.Attempt != 2 || len(after.Transitions) != len(inst.Transitions) {
		t.Errorf("late report of attempt 1 changed the instance: %s attempt %d, %d transitions (was %d)",
			after.State, after.Attempt, len(after.Transitions), len(inst.Transitions))
	}
	var out map[string]float64
	if err := json.Unmarshal(after.Output, &out); err != nil || out["slept_seconds"] != 1.5 {
		t.Errorf("output = %s, want attempt 2's", after.Output)
	}
}
