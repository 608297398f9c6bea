package e2e_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// TestPauseAndResume pauses a task while one of its runs is going: the run
// finishes, firings while paused make no run, cron ticks missed while paused
// follow the trigger's misfire policy (fire_once) on resume.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	release := make(chan struct{})
	mux := builtinsMux()
	mux.HandleFunc("test.gate", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.executor("w1", mux, 4)
	start := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := triggertest.NewClock(start)
	s.trigger("trigger", clock)
	s.apply(`
task_name: pausable
execution:
  handler: test.gate
triggers:
  - type: cron
    schedule: "30 * * * * *"
    misfire: fire_once
`)
	ctx := context.Background()
	// The first tick fires and its run holds.
	clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return slices.ContainsFunc(d, start.Add(30*time.Second).Equal) })
	clock.Set(start.Add(30 * time.Second))
	var running schemas.Instance
	waitFor(t, "the first tick's run", 60*time.Second, func() (bool, error) {
		list, err := s.store.ListInstances(ctx, store.InstanceFilter{Task: "pausable"})
		if len(list) == 1 {
			running = list[0]
		}
		return len(list) == 1 && list[0].State == schemas.StateRunning, err
	})

	if _, err := s.client.SetTaskPaused(ctx, "pausable", true); err != nil {
		t.Fatal(err)
	}
	close(release)
	s.waitState(running.ID, schemas.StateSucceeded, 60*time.Second)

	// While paused: the API refuses, a plain publish is recorded SKIPPED, ticks pass.
	var apiErr *wire.Error
	if _, err := s.client.Fire(ctx, "pausable", wire.FireRequest{}); !errors.As(err, &apiErr) || apiErr.Code != "task_paused" {
		t.Errorf("fire while paused: %v, want a task_paused error", err)
	}
	m := nats.NewMsg(s.srv.Topology.Trigger("pausable"))
	m.Data = []byte(`{"event_id": "while-paused"}`)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var skipped schemas.Instance
	waitFor(t, "the plain firing's instance", 60*time.Second, func() (bool, error) {
		var err error
		skipped, err = s.store.InstanceByEvent(ctx, "pausable", "while-paused")
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
	if skipped.State != schemas.StateSkipped {
		t.Errorf("plain firing while paused: %s, want SKIPPED", skipped.State)
	}
	clock.Set(start.Add(3*time.Minute + 45*time.Second)) // ticks at 1:30, 2:30 and 3:30 missed

	if _, err := s.client.SetTaskPaused(ctx, "pausable", false); err != nil {
		t.Fatal(err)
	}
	var cron []schemas.Instance
	waitFor(t, "the catch-up firing after resume", 60*time.Second, func() (bool, error) {
		list, err := s.store.ListInstances(ctx, store.InstanceFilter{Task: "pausable"})
		cron = cron[:0]
		for _, inst := range list {
			if inst.Source == schemas.SourceCron {
				cron = append(cron, inst)
			}
		}
		return len(cron) == 2, err
	})
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	list, err := s.store.ListInstances(ctx, store.InstanceFilter{Task: "pausable"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list); n != 3 {
		t.Errorf("%d instances, want 3: the first tick, the skipped publish and one catch-up", n)
	}
	catchUp, err := s.store.GetInstance(ctx, cron[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !catchUp.FiredAt.Equal(start.Add(3*time.Minute+30*time.Second)) || !strings.Contains(catchUp.Transitions[0].Reason, "misfire") {
		t.Errorf("catch-up fired for %v with reason %q, want the latest missed tick 10:03:30 with a misfire reason",
			catchUp.FiredAt, catchUp.Transitions[0].Reason)
	}
}
