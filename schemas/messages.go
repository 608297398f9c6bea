package schemas

import (
	"encoding/json"
	"time"
)

// Source says what fired a trigger event.
type Source string

// The trigger sources.
const (
	SourceEvent  Source = "event"  // an HTTP call or a plain NATS publish
	SourceManual Source = "manual" // an operator (ax fire, the console)
	SourceRetry  Source = "retry"  // the dispatcher, starting the next attempt
)

// TriggerEvent is the message on ax.trigger.<task>: one firing of a task.
// The dispatcher makes exactly one instance per (task, EventID).
//
// Any NATS client may publish one; every field may be left out. Without an
// EventID the message's Nats-Msg-Id header is used, and without that the
// stream sequence (each such message is then a firing of its own).
type TriggerEvent struct {
	// EventID identifies the firing; firings with the same id are one.
	EventID string `json:"event_id,omitempty"`
	// Task repeats the subject's task name; when set it must match it.
	Task string `json:"task,omitempty"`
	// Source says what fired the task (default "event").
	Source Source `json:"source,omitempty"`
	// Operator names who fired a manual run.
	Operator string `json:"operator,omitempty"`
	// Payload is handed to the handler as it is (any JSON value).
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadVersion must equal the task's schema_version (default 1).
	PayloadVersion int `json:"payload_version,omitempty"`
	// Priority overrides the task's priority for this firing.
	Priority Priority `json:"priority,omitempty"`
	// FiredAt is when the event happened; the dispatcher uses the time it
	// reads the message when it is zero.
	FiredAt time.Time `json:"fired_at,omitzero"`
	// Retry is set on the dispatcher's own trigger for a task's next attempt.
	Retry *RetryOf `json:"retry,omitempty"`
}

// RetryOf names the attempt a retry trigger starts.
type RetryOf struct {
	InstanceID int64 `json:"instance_id"`
	// Attempt is the number of the attempt to start (the failed one + 1).
	Attempt int `json:"attempt"`
}

// Dispatch is the message on ax.dispatch.<pool>.<priority>: one attempt of an
// instance for an executor to run.
type Dispatch struct {
	InstanceID  int64           `json:"instance_id"`
	Task        string          `json:"task"`
	TaskVersion int             `json:"task_version"`
	Handler     string          `json:"handler"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	EventID     string          `json:"event_id"`
	Priority    Priority        `json:"priority"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	// TimeoutMS is how long the attempt may run, in milliseconds.
	TimeoutMS int64 `json:"timeout_ms"`
	// FiredAt is when the trigger fired; DispatchedAt when this attempt was routed.
	FiredAt      time.Time `json:"fired_at"`
	DispatchedAt time.Time `json:"dispatched_at"`
}

// Timeout returns the attempt's time limit.
func (d *Dispatch) Timeout() time.Duration { return time.Duration(d.TimeoutMS) * time.Millisecond }

// ReportKind says what a report tells.
type ReportKind string

// The report kinds.
const (
	ReportStarted   ReportKind = "started"
	ReportSucceeded ReportKind = "succeeded"
	ReportFailed    ReportKind = "failed"
)

// Report is the message on ax.report.<instance_id>: an executor's word on one
// attempt. Only a report whose Attempt is the instance's current attempt
// changes anything.
type Report struct {
	InstanceID int64      `json:"instance_id"`
	Attempt    int        `json:"attempt"`
	WorkerID   string     `json:"worker_id"`
	Kind       ReportKind `json:"kind"`
	// At is when the executor saw it happen.
	At time.Time `json:"at"`
	// StartedAt is when the attempt started (set on every kind).
	StartedAt time.Time `json:"started_at"`
	// Output is the handler's result on success (any JSON value).
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the handler's error on failure.
	Error string `json:"error,omitempty"`
	// Permanent marks a failure that must not be retried.
	Permanent bool `json:"permanent,omitempty"`
}

// Worker is the value of key <worker_id> in the ax-workers bucket, put on
// every heartbeat.
type Worker struct {
	ID       string   `json:"id"`
	Hostname string   `json:"hostname,omitempty"`
	Version  string   `json:"version"`
	Pools    []string `json:"pools"`
	Handlers []string `json:"handlers"`
	// Slots is how many attempts the worker runs at once; Busy how many it runs now.
	Slots       int       `json:"slots"`
	Busy        int       `json:"busy"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
}

// Lease is the value of key <instance_id>.<attempt> in the ax-leases bucket:
// proof that a worker runs that attempt. The bucket's TTL expires it when the
// worker stops renewing it.
type Lease struct {
	InstanceID int64     `json:"instance_id"`
	Attempt    int       `json:"attempt"`
	WorkerID   string    `json:"worker_id"`
	AcquiredAt time.Time `json:"acquired_at"`
}

// ControlAction is what a control message asks of an executor.
type ControlAction string

// The control actions.
const (
	ControlCancel ControlAction = "cancel"
)

// Control is the core NATS message on ax.control.<worker_id>.
type Control struct {
	Action     ControlAction `json:"action"`
	InstanceID int64         `json:"instance_id"`
	Attempt    int           `json:"attempt"`
	Reason     string        `json:"reason"`
}

// Transition is one row of an instance's history (and of the audit trail).
// From is empty for the creation.
type Transition struct {
	ID         int64     `json:"id"`
	InstanceID int64     `json:"instance_id"`
	Task       string    `json:"task"`
	From       State     `json:"from"`
	To         State     `json:"to"`
	Attempt    int       `json:"attempt"`
	Operator   string    `json:"operator"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
}

// Instance is one firing of a task, as the store and the API show it.
type Instance struct {
	ID          int64           `json:"id"`
	Task        string          `json:"task"`
	TaskVersion int             `json:"task_version"`
	EventID     string          `json:"event_id"`
	Source      Source          `json:"source"`
	State       State           `json:"state"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Priority    Priority        `json:"priority"`
	Pool        string          `json:"pool"`
	WorkerID    string          `json:"worker_id"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Error       string          `json:"error,omitempty"`
	FiredAt     time.Time       `json:"fired_at"`
	CreatedAt   time.Time       `json:"created_at"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	Transitions []Transition    `json:"transitions,omitempty"`
}
