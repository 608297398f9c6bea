package taskdef_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// TestCalendarAfterValidation checks the calendar-aligned after entries:
// a good one parses; each mistake is refused with its field and the fix.
func TestCalendarAfterValidation(t *testing.T) {
	t.Parallel()
	const cron = `, "triggers": [{"type": "cron", "schedule": "0 6 * * *", "timezone": "Europe/Berlin"}]`
	for _, tc := range []struct {
		name, after, triggers, want string
	}{
		{"good", `{"task": "hourly-load", "window": "previous_day", "require": "all", "timeout": "6h", "on_timeout": "skip"}`, cron, ""},
		{"unknown window", `{"task": "hourly-load", "window": "last_week"}`, cron, "after[0].window"},
		{"require any", `{"task": "hourly-load", "window": "same_day", "require": "any"}`, cron, "after[0].require"},
		{"bad timeout", `{"task": "hourly-load", "window": "previous_hour", "timeout": "soon"}`, cron, `after[0].timeout: "soon" is not a positive Go duration`},
		{"bad on_timeout", `{"task": "hourly-load", "window": "previous_day", "on_timeout": "retry"}`, cron, "after[0].on_timeout"},
		{"no cron trigger", `{"task": "hourly-load", "window": "previous_day"}`, "", "after[0].window: a calendar-aligned dependency counts its window around the task's cron ticks"},
		{"timeout without window", `{"task": "hourly-load", "timeout": "6h"}`, cron, "after[0].timeout: belongs to a calendar-aligned dependency"},
		{"on failure", `{"task": "hourly-load", "window": "previous_day", "on": "failure"}`, cron, "after[0].on: a calendar-aligned dependency waits for its parents' successes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := `{"task_name": "daily-report", "execution": {"handler": "h"}, "after": [` + tc.after + `]` + tc.triggers + `}`
			_, err := taskdef.ParseTask([]byte(def))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseTask = %v, want it to parse", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ParseTask = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestDeadline checks the deadlines of a task: a local time in its zone,
// the first after the tick, also across a DST change; a duration after the
// tick; and a mistake refused with the fix.
func TestDeadline(t *testing.T) {
	t.Parallel()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	def := func(deadline string) *schemas.Task {
		return &schemas.Task{Deadline: deadline, Triggers: []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "0 2 * * *", Timezone: "Europe/Berlin"}}}
	}
	for _, tc := range []struct {
		deadline string
		tick     time.Time
		want     time.Time
	}{
		{"06:00", time.Date(2026, 3, 10, 2, 0, 0, 0, berlin), time.Date(2026, 3, 10, 6, 0, 0, 0, berlin)},
		{"01:00", time.Date(2026, 3, 10, 2, 0, 0, 0, berlin), time.Date(2026, 3, 11, 1, 0, 0, 0, berlin)},
		{"06:00", time.Date(2026, 3, 29, 1, 0, 0, 0, berlin), time.Date(2026, 3, 29, 6, 0, 0, 0, berlin)},
		{"90m", time.Date(2026, 3, 10, 2, 0, 0, 0, berlin), time.Date(2026, 3, 10, 3, 30, 0, 0, berlin)},
	} {
		got, ok := taskdef.Deadline(def(tc.deadline), tc.tick)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("Deadline(%q, %v) = %v, %t; want %v", tc.deadline, tc.tick, got, ok, tc.want)
		}
	}
	_, err := taskdef.ParseTask([]byte(`{"task_name": "r", "execution": {"handler": "h"}, "deadline": "6am"}`))
	if err == nil || !strings.Contains(err.Error(), `deadline: "6am" is neither a local time HH:MM`) {
		t.Errorf("ParseTask with deadline 6am = %v, want the fix", err)
	}
}
