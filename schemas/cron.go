package schemas

import (
	"strconv"
	"time"
)

// CronEventID is the event id of a cron trigger's firing: the task, the
// trigger's index in the task's triggers and the tick, in UTC, such as
// "cron:nightly-report:0:2024-05-01T02:00:00Z". It depends on nothing else,
// so every trigger service replica firing the same tick sends the same id:
// JetStream's duplicate window keeps one message and PostgreSQL one instance.
// The task is part of it because the duplicate window spans all subjects of
// the stream.
func CronEventID(task string, trigger int, tick time.Time) string {
	return CronEventIDPrefix + task + ":" + strconv.Itoa(trigger) + ":" + tick.UTC().Format(time.RFC3339)
}

// WithDefaults returns t with the defaults of a cron trigger filled in:
// timezone "UTC", misfire "skip" and, with "catch_up", max_catch_up 10.
// Triggers of other types are returned as they are.
func (t Trigger) WithDefaults() Trigger {
	if t.Type != TriggerTypeCron {
		return t
	}
	if t.Timezone == "" {
		t.Timezone = DefaultTimezone
	}
	if t.Misfire == "" {
		t.Misfire = DefaultMisfire
	}
	if t.Misfire == MisfireCatchUp && t.MaxCatchUp == 0 {
		t.MaxCatchUp = DefaultMaxCatchUp
	}
	return t
}
