package schemas

import (
	"time"
)

// FailureStreak is a task whose latest ended instances FAILED, one after another.
type FailureStreak struct {
	Task string `json:"task"`
	// Failures is how many of the task's latest ended instances FAILED
	// without a SUCCEEDED one between them (instances SKIPPED or CANCELLED
	// do not count), at most the limit asked for.
	Failures int `json:"failures"`
	// LastInstanceID and LastError are the latest failure's; Since is when
	// the first failure of the streak ended.
	LastInstanceID int64     `json:"last_instance_id"`
	LastError      string    `json:"last_error"`
	Since          time.Time `json:"since,omitzero"`
}

// HealthReport is the fleet's health: what needs a look, by section, each
// section with the rule that put a task there.
type HealthReport struct {
	GeneratedAt time.Time `json:"generated_at"`
	// Rules states each section's rule in words, with the thresholds used.
	Rules HealthRules `json:"rules"`
	// ConsecutiveFailures lists the tasks whose latest ended instances
	// failed in a row, longest streak first.
	ConsecutiveFailures []FailureStreak `json:"consecutive_failures"`
	// MissedSchedules lists the cron triggers that did not fire when their
	// schedule says they should have.
	MissedSchedules []MissedSchedule `json:"missed_schedules"`
	// DurationOutliers lists the tasks whose latest run took far longer
	// than their history.
	DurationOutliers []SlowRun `json:"duration_outliers"`
	// WithoutOwner names the tasks whose definition names no owner.
	WithoutOwner []string `json:"tasks_without_owner"`
}

// HealthRules are the rules of a [HealthReport]'s sections, in words.
type HealthRules struct {
	ConsecutiveFailures string `json:"consecutive_failures"`
	MissedSchedules     string `json:"missed_schedules"`
	DurationOutliers    string `json:"duration_outliers"`
	WithoutOwner        string `json:"tasks_without_owner"`
}

// MissedSchedule is a cron trigger of an enabled, unpaused task that has
// not fired a tick that is past.
type MissedSchedule struct {
	Task string `json:"task"`
	// TriggerIndex is the trigger's index in the task's triggers.
	TriggerIndex int    `json:"trigger_index"`
	Schedule     string `json:"schedule"`
	Timezone     string `json:"timezone"`
	// LastTick is the latest tick a trigger service settled for this
	// schedule; nil when none has planned it since the task last changed.
	LastTick *time.Time `json:"last_tick,omitempty"`
	// ExpectedAt is the first tick after that (or after the task last
	// changed) that should have fired.
	ExpectedAt time.Time `json:"expected_at"`
}

// SlowRun is a task's latest SUCCEEDED run that took far longer than the
// runs before it.
type SlowRun struct {
	Task            string  `json:"task"`
	InstanceID      int64   `json:"instance_id"`
	DurationSeconds float64 `json:"duration_seconds"`
	MedianSeconds   float64 `json:"median_seconds"`
	P95Seconds      float64 `json:"p95_seconds"`
	// Runs is how many earlier runs the median and p95 are over.
	Runs int `json:"runs"`
}
