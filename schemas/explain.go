package schemas

import "time"

// Explanation answers "why did (or didn't) this run?" for a task's tick or
// an instance (GET /v1/explain, ax explain): a verdict in one sentence and
// the decision timeline that led to it, in words, read from what AX
// recorded — the schedule, the operator actions, the trigger's decisions,
// the instance's transitions and events.
type Explanation struct {
	// Subject is what was asked about: "TASK@INSTANT" or "instance ID".
	Subject    string     `json:"subject"`
	Task       string     `json:"task"`
	Tick       *time.Time `json:"tick,omitempty"`
	EventID    string     `json:"event_id,omitempty"`
	InstanceID int64      `json:"instance_id,omitempty"`
	// Verdict is the answer in one sentence.
	Verdict string        `json:"verdict"`
	Steps   []ExplainStep `json:"steps"`
}

// ExplainStep is one decision or event of an [Explanation], oldest first.
type ExplainStep struct {
	// At is when it happened; zero for a step that is a fact of the
	// definition, not an event (the schedule).
	At time.Time `json:"at,omitzero"`
	// Kind names the step: schedule, paused, resumed, disabled, enabled,
	// misfire, created, waiting, dispatched, started, mutex_wait, retrying,
	// stale_report, refused_report, succeeded, failed, skipped, cancelled,
	// no_instance, ...
	Kind string `json:"kind"`
	// Actor is who decided: "trigger@host:pid", "dispatcher", "reaper",
	// "worker:ID", an operator's token name.
	Actor string `json:"actor,omitempty"`
	// Text says it in words.
	Text string `json:"text"`
}
