package e2e_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// TestAppliedScheduleIsPlannedAtOnce starts a trigger service before the task
// exists: only the API's announcement on the tasks bucket can tell it about
// the task, so a firing proves the watch works end to end. It also checks the
// next fire times the API shows.
func TestAppliedScheduleIsPlannedAtOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	start := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := triggertest.NewClock(start)
	s.trigger("trigger", clock)

	s.apply(`
task_name: minutely
execution:
  handler: builtin.echo
triggers:
  - type: cron
    schedule: "30 * * * * *"
    timezone: Europe/Berlin
`)
	info, err := s.client.GetTask(context.Background(), "minutely")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.NextFireTimes) != 1 || len(info.NextFireTimes[0].UTC) != 5 {
		t.Fatalf("next fire times = %+v, want 5 for the one cron trigger", info.NextFireTimes)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range info.NextFireTimes[0].Local {
		_, offset := at.Zone()
		_, want := at.In(berlin).Zone()
		if at.Second() != 30 || offset != want || !at.Equal(info.NextFireTimes[0].UTC[i]) {
			t.Errorf("fire time %d = %v (utc %v), want second 30 in Europe/Berlin's offset", i, at, info.NextFireTimes[0].UTC[i])
		}
	}

	// The trigger learns of the task from the bucket and plans its timer.
	tick := start.Add(30 * time.Second)
	clock.WaitFor(t, func(_ time.Time, deadlines []time.Time) bool {
		return slices.ContainsFunc(deadlines, tick.Equal)
	})
	clock.Set(tick)
	waitFor(t, "the cron firing's instance", 60*time.Second, func() (bool, error) {
		list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "minutely"})
		return len(list) == 1, err
	})
}

// TestDeletedTaskStopsFiring deletes a task with a cron trigger: the trigger
// service drops its schedule at once, and its next tick fires nothing.
func TestDeletedTaskStopsFiring(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	start := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	clock := triggertest.NewClock(start)
	s.trigger("trigger", clock)
	s.apply(`
task_name: doomed
execution:
  handler: builtin.echo
triggers:
  - type: cron
    schedule: "30 * * * * *"
`)
	tick := start.Add(30 * time.Second)
	clock.WaitFor(t, func(_ time.Time, deadlines []time.Time) bool { return slices.ContainsFunc(deadlines, tick.Equal) })
	if _, err := s.client.DeleteTask(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	// Once the schedule is gone, no timer waits for the tick any more.
	clock.WaitFor(t, func(_ time.Time, deadlines []time.Time) bool { return !slices.ContainsFunc(deadlines, tick.Equal) })
	clock.Set(tick.Add(time.Minute))
	list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "doomed"})
	if err != nil || len(list) != 0 {
		t.Errorf("%d instances of the deleted task (%v), want none", len(list), err)
	}
}
