package schemas

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Source says what fired a trigger event.
type Source string

// The trigger sources.
const (
	SourceEvent  Source = "event"  // an HTTP call or a plain NATS publish
	SourceManual Source = "manual" // an operator (ax fire, the console)
	SourceRetry  Source = "retry"  // the dispatcher, starting the next attempt
	SourceCron   Source = "cron"   // the trigger service, at a cron trigger's tick
	SourceChain  Source = "chain"  // the dispatcher, once a chained task's parents ended
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
	// Cancel, when set, makes the message an order to cancel an instance of
	// the task (the API's POST /v1/instances/{id}/cancel), not a firing.
	Cancel *CancelOf `json:"cancel,omitempty"`
	// Reason says why the firing happens as it does when that is not plain:
	// the trigger service sets it on a missed cron tick that its misfire
	// policy fires late ("misfire catch_up: …"), the API on a rerun ("rerun
	// of instance 42"). The dispatcher records it on the CREATED transition.
	Reason string `json:"reason,omitempty"`
	// IdempotencyKey makes the firing's event id "idem-<key>": firing again
	// with the same key makes no second instance. It excludes EventID.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// RunAt is when the instance is due: the dispatcher creates it no
	// earlier, and records RunAt as its fired_at. A time in the past fires
	// at once. It excludes Delay.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay is RunAt as a Go duration ("90s", "2h") after FiredAt, or after
	// the message reached the stream when FiredAt is zero. It excludes RunAt.
	Delay string `json:"delay,omitempty"`
	// RunID names the run the firing belongs to: the tasks chained after
	// this one (their after) fire in the same run. Empty starts a new run,
	// "run-<instance id>"; a firing may join a run started elsewhere, e.g.
	// the second root of a join.
	RunID string `json:"run_id,omitempty"`
	// Parents is set on the dispatcher's chain firings (Source "chain"):
	// how each parent of the task ended in the run, by parent task name.
	Parents map[string]ParentResult `json:"parents,omitempty"`
}

// ParentResult is how one parent of a chained task ended in a run: its
// instance, its terminal state and, when it succeeded, its output.
type ParentResult struct {
	InstanceID int64 `json:"instance_id"`
	State      State `json:"state"`
	// Output is the parent's output (any JSON value); empty when it had none.
	Output json.RawMessage `json:"output,omitempty"`
}

// RunIDPrefix prefixes the root instance's id to make the run id of a
// firing that names none.
const RunIDPrefix = "run-"

// ChainEventID is the event id of the chain firing of task in run runID,
// such as "chain:report:run-4711". One firing per task and run: every
// parent that sees the others ended sends the same id, so JetStream's
// duplicate window keeps one message and PostgreSQL one instance. The task
// is part of it because the duplicate window spans all subjects.
func ChainEventID(task, runID string) string { return ChainEventIDPrefix + task + ":" + runID }

// IdempotencyEventIDPrefix prefixes an idempotency key to make the event id
// of its firing.
const IdempotencyEventIDPrefix = "idem-"

// The event ids AX makes itself live in a namespace that no user's event id
// may take (see [ReservedEventID]): a user's "retry-92-2" must not stand in
// for the dispatcher's retry of instance 92, nor "x/shard-0" for a shard.
const (
	CronEventIDPrefix   = "cron:"   // a cron tick: see CronEventID
	ChainEventIDPrefix  = "chain:"  // a chain firing: see ChainEventID
	RetryEventIDPrefix  = "retry-"  // the dispatcher's next attempt: retry-<instance>-<attempt>
	RouteEventIDPrefix  = "route-"  // the dispatcher's routing again: route-<instance>-<attempt>
	CancelEventIDPrefix = "cancel-" // the API's cancel order: cancel-<instance>
	RerunEventIDPrefix  = "rerun-"  // the API's rerun: rerun-<instance>-<nuid>
	SeqEventIDPrefix    = "seq-"    // a firing without an id: seq-<stream sequence>
	// ShardEventIDMark joins a firing's event id and a shard's index in
	// the event id of the shard's instance: <event id>/shard-<index>.
	ShardEventIDMark = "/shard-"
)

var reservedEventIDPrefixes = []string{
	CronEventIDPrefix, ChainEventIDPrefix, RetryEventIDPrefix, RouteEventIDPrefix,
	CancelEventIDPrefix, RerunEventIDPrefix, SeqEventIDPrefix, IdempotencyEventIDPrefix,
}

// ReservedEventID returns the part of AX's own namespace that id falls in
// ("retry-", "/shard-", …), or "" when id is free for a user's firing. AX's
// namespace is every id that begins with cron:, chain:, retry-, route-,
// cancel-, rerun-, seq- or idem-, or that holds /shard-.
func ReservedEventID(id string) string {
	for _, p := range reservedEventIDPrefixes {
		if strings.HasPrefix(id, p) {
			return p
		}
	}
	if strings.Contains(id, ShardEventIDMark) {
		return ShardEventIDMark
	}
	return ""
}

// OwnsEventID reports whether ev, a firing of task as it was published, is
// the firing AX makes with its EventID: a retry or routing with its retry
// field, a cancel order with its cancel field, a cron tick or a chain firing
// of task from its source, a rerun from the API. An event id outside AX's
// namespace is anyone's, so OwnsEventID is true for it too.
func (ev TriggerEvent) OwnsEventID(task string) bool {
	switch ReservedEventID(ev.EventID) {
	case "":
		return true
	case RetryEventIDPrefix, RouteEventIDPrefix:
		return ev.Retry != nil && ev.Source == SourceRetry
	case CancelEventIDPrefix:
		return ev.Cancel != nil
	case CronEventIDPrefix:
		return ev.Source == SourceCron && strings.HasPrefix(ev.EventID, CronEventIDPrefix+task+":")
	case ChainEventIDPrefix:
		return ev.Source == SourceChain && ev.EventID == ChainEventID(task, ev.RunID)
	case RerunEventIDPrefix:
		return ev.Source == SourceManual
	}
	// seq-, idem- and shards: the dispatcher derives them, no firing carries one.
	return false
}

// reservedMessage says what AX's namespace is and what to do.
const reservedMessage = "AX makes ids that begin with cron:, chain:, retry-, route-, cancel-, rerun-, seq- or idem-, " +
	"or that hold /shard-, for firings of its own; choose an id outside that namespace"

// UserIDProblems checks the ids of a firing that a user, not AX, sends:
// its event_id must lie outside AX's namespace ([ReservedEventID]), and its
// idempotency_key must hold no /shard- (its event id idem-<key> is AX's
// making, but the shards of another key's firing would share it).
func (ev TriggerEvent) UserIDProblems() []Problem {
	var out []Problem
	if p := ReservedEventID(ev.EventID); p != "" {
		out = append(out, Problem{"event_id", fmt.Sprintf("%q is in AX's own namespace (%s): %s", ev.EventID, p, reservedMessage)})
	}
	if strings.Contains(ev.IdempotencyKey, ShardEventIDMark) {
		out = append(out, Problem{"idempotency_key", fmt.Sprintf("%q holds %s, which AX's own namespace keeps for shards: %s",
			ev.IdempotencyKey, ShardEventIDMark, reservedMessage)})
	}
	return out
}

// TaskEntry is the value of key <task> in the ax-tasks bucket, put by the API
// after every change of a task (apply, enable, disable) and deleted with the
// task. Services that plan ahead (the trigger service) watch the bucket and
// reload the task from the store when its entry changes: the entry is a
// signal, PostgreSQL stays the authority.
type TaskEntry struct {
	// Version is the task's definition version.
	Version int `json:"version"`
	// Enabled says whether the task's firings make instances that run.
	Enabled bool `json:"enabled"`
}

// RetryOf names the attempt a retry trigger starts, or routes again: the
// dispatcher fires the attempt an instance is DISPATCHED at when no live
// worker could take it, to route it once more.
type RetryOf struct {
	InstanceID int64 `json:"instance_id"`
	// Attempt is the number of the attempt to start (the failed one + 1),
	// or of the DISPATCHED attempt to route again.
	Attempt int `json:"attempt"`
}

// CancelOf names an instance to cancel and says why.
type CancelOf struct {
	InstanceID int64  `json:"instance_id"`
	Reason     string `json:"reason,omitempty"`
}

// Dispatch is the message on ax.dispatch.<pool>.<priority>: one attempt of an
// instance for an executor to run.
type Dispatch struct {
	InstanceID  int64    `json:"instance_id"`
	Task        string   `json:"task"`
	TaskVersion int      `json:"task_version"`
	Handler     string   `json:"handler"`
	Attempt     int      `json:"attempt"`
	MaxAttempts int      `json:"max_attempts"`
	EventID     string   `json:"event_id"`
	Priority    Priority `json:"priority"`
	// Pool is the instance's pool: the executor reports on the attempt on
	// that pool's report subject (streams.Topology.Report), which its NATS
	// user must be allowed to publish on.
	Pool    string          `json:"pool"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// TimeoutMS is how long the attempt may run, in milliseconds.
	TimeoutMS int64 `json:"timeout_ms"`
	// MutexTemplate is the task's concurrency.mutex_key, unrendered: the
	// executor renders it over the payload (see [ParseMutexKey]).
	MutexTemplate string `json:"mutex_template,omitempty"`
	// FiredAt is when the trigger fired; DispatchedAt when this attempt was routed.
	FiredAt      time.Time `json:"fired_at"`
	DispatchedAt time.Time `json:"dispatched_at"`
	// RunID names the instance's run (see [TriggerEvent.RunID]).
	RunID string `json:"run_id,omitempty"`
	// Parents tells how the parents of a chained task ended, by task name.
	Parents map[string]ParentResult `json:"parents,omitempty"`
	// ShardIndex and ShardCount place a child instance of a sharded or
	// broadcast firing: shard ShardIndex of ShardCount. Both are 0 for an
	// instance that is not a shard.
	ShardIndex int `json:"shard_index,omitempty"`
	ShardCount int `json:"shard_count,omitempty"`
	// Protocol is the version of the executor protocol the message is
	// written in (see [ExecutorProtocol]); 0, a message of a dispatcher
	// older than the field, means 1. An executor runs only a message of a
	// version it speaks.
	Protocol int `json:"protocol,omitempty"`
	// ReportBatches says that the dispatcher that wrote the message takes
	// report batches ([ReportBatch], version 2): a worker that speaks
	// version 2 may send the attempt's final report in one. A worker that
	// does not, or that is told nothing (false, left out), reports on the
	// attempt's own subject, which is valid in every version.
	ReportBatches bool `json:"report_batches,omitempty"`
	// Republished says the attempt was dispatched before this message was
	// written (a redelivered firing or retry found its instance
	// DISPATCHED): an earlier message of it may have run, and been
	// acknowledged and removed, and a server restart forgets the message
	// ids it removed, so this one may not be a duplicate the stream drops.
	// Its lease fences it only while the leases bucket keeps the earlier
	// run's key. A worker asks the dispatcher's fence before it runs such a
	// message, as it does a redelivered one (any version; false, left out,
	// for a first dispatch).
	Republished bool `json:"republished,omitempty"`
	// Slots is how many of the worker's slots the attempt takes (the
	// task's execution.slots; 0, left out, means 1). A worker with fewer
	// slots in all runs it alone.
	Slots int `json:"slots,omitempty"`
}

// ExecutorProtocol is the version of the executor protocol
// (docs/executor-protocol.md) that this AX speaks: the dispatcher writes
// its dispatch messages in it and the Go executor declares it in its
// worker record. A later version adds to the one before, so a worker
// that speaks version n speaks every version from 1 to n. Version 2 adds
// the report batch ([ReportBatch]), which a worker may send only when a
// dispatch message's ReportBatches says the dispatchers take it.
const ExecutorProtocol = 2

// ProtocolOrOne returns a protocol field as read off the wire: 0 (left
// out, by a dispatcher or worker older than the field) means 1.
func ProtocolOrOne(v int) int { return max(v, 1) }

// Speaks reports whether the worker speaks version v of the executor
// protocol: its record's protocol (1 when left out) is v or later.
func (w Worker) Speaks(v int) bool { return ProtocolOrOne(w.Protocol) >= ProtocolOrOne(v) }

// Timeout returns the attempt's time limit.
func (d *Dispatch) Timeout() time.Duration { return time.Duration(d.TimeoutMS) * time.Millisecond }

// ReportKind says what a report tells.
type ReportKind string

// The report kinds.
const (
	ReportStarted   ReportKind = "started"
	ReportSucceeded ReportKind = "succeeded"
	ReportFailed    ReportKind = "failed"
	// ReportReleased hands an attempt back: the worker stopped (SIGTERM,
	// scale-in) and its shutdown timeout passed before the handler
	// returned, so it cancelled the handler and released the attempt's
	// lease. The dispatcher starts the next attempt at once, elsewhere,
	// and raises the instance's max_attempts by one in the same write: a
	// hand-back does not spend an attempt. The handler did start, and is
	// run again from the beginning by the next attempt (see
	// docs/execution.md, "Scale-in").
	ReportReleased ReportKind = "released"
	// ReportProgress tells how far a running attempt has got: it changes
	// no state (see docs/execution.md, "Progress").
	ReportProgress ReportKind = "progress"
)

// IsFinal reports whether a report of kind k ends its attempt.
func (k ReportKind) IsFinal() bool {
	return k == ReportSucceeded || k == ReportFailed || k == ReportReleased
}

// MaxProgressMessage is the longest [Progress.Message], in bytes.
const MaxProgressMessage = 256

// Progress is how far an attempt has got, as its handler last said:
// Done of Total units (Total 0: unknown), with a short message.
type Progress struct {
	Done    int64  `json:"done"`
	Total   int64  `json:"total"`
	Message string `json:"message,omitempty"`
}

// Check returns what is wrong with p, or nil.
func (p Progress) Check() error {
	switch {
	case p.Done < 0 || p.Total < 0:
		return fmt.Errorf("progress %d of %d: done and total must not be negative", p.Done, p.Total)
	case p.Total > 0 && p.Done > p.Total:
		return fmt.Errorf("progress %d of %d: done must not exceed total (pass total 0 when it is unknown)", p.Done, p.Total)
	case len(p.Message) > MaxProgressMessage:
		return fmt.Errorf("progress message of %d bytes: at most %d bytes are allowed", len(p.Message), MaxProgressMessage)
	case !utf8.ValidString(p.Message):
		return fmt.Errorf("progress message %q is not valid UTF-8", p.Message)
	}
	return nil
}

// InstanceProgress is the latest progress of an instance's attempt, as the
// dispatcher recorded it.
type InstanceProgress struct {
	// Attempt is the attempt that reported it.
	Attempt int    `json:"attempt"`
	Done    int64  `json:"done"`
	Total   int64  `json:"total"`
	Message string `json:"message,omitempty"`
	// At is when the handler reported it (the worker's clock).
	At time.Time `json:"at"`
}

// Report is the message on ax.report.<pool>.<worker_id>.<instance_id>: an
// executor's word on one attempt. Only a report whose Attempt is the
// instance's current attempt, whose subject names the instance's pool and
// WorkerID, and whose WorkerID holds the attempt (once a worker does)
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
	// Error is the handler's error on failure, or why the attempt was
	// handed back.
	Error string `json:"error,omitempty"`
	// Permanent marks a failure that must not be retried.
	Permanent bool `json:"permanent,omitempty"`
	// RetryAfterMS, on a failure that is not permanent, asks for the next
	// attempt that many milliseconds after the dispatcher applies the
	// report, in place of the task's backoff; the dispatcher caps it at the
	// retry policy's max interval. 0 (absent) means the backoff.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Traceparent is the W3C traceparent of the executor's span of the
	// attempt (optional): the dispatcher's span of the recorded report is
	// its child. A report alone on its subject may carry it in the
	// traceparent header instead; a report batch can carry it only here.
	Traceparent string `json:"traceparent,omitempty"`
	// Progress is how far the attempt has got: set on a progress report
	// only, and required there.
	Progress *Progress `json:"progress,omitempty"`
	// Pool is the pool the report's subject names (ax.report.<pool>.…),
	// set by the dispatcher from the subject, never read from the body: the
	// store applies a report only to an instance of that pool.
	Pool string `json:"-"`
	// Handlers are the handlers the reporting worker's credential grants
	// it in Pool, as its grant keys in ax-workers show them, set by the
	// dispatcher, never read from the body: the store applies a report on
	// an attempt that no worker holds yet only when the attempt's handler
	// is among them.
	Handlers []string `json:"-"`
}

// ReportBatch is the message on ax.report.<pool>.<worker_id>.batch
// (version 2 of the executor protocol): the final reports of several
// attempts of that worker, every one of the subject's pool, sent as one
// message. The dispatcher applies each report as if it had come alone on
// its attempt's subject: one that does not name the subject's worker, or
// whose attempt is not the subject's pool's or is held by another worker,
// is refused on its own, and the others are applied.
type ReportBatch struct {
	// Reports are final reports (succeeded, failed or released), at most
	// one per attempt.
	Reports []Report `json:"reports"`
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
	// Protocol is the latest version of the executor protocol the worker
	// speaks (it speaks every version from 1 to it); 0, a worker older
	// than the field, means 1.
	Protocol int `json:"protocol,omitempty"`
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

// LogLine is the message on ax.log.<instance_id>.<worker_id>: one line a handler logged
// through its context's logger (executor.Logger), shipped by the executor to
// AX_LOGS. The lines of one instance are stored in the order the worker
// received them; one message holds one line.
type LogLine struct {
	InstanceID int64  `json:"instance_id"`
	Task       string `json:"task"`
	Attempt    int    `json:"attempt"`
	WorkerID   string `json:"worker_id"`
	// Level is zerolog's name of the line's level: "trace", "debug", "info",
	// "warn", "error", "fatal", "panic", or "" for a line logged without one.
	Level   string `json:"level"`
	Message string `json:"message"`
	// Time is when the handler wrote the line.
	Time time.Time `json:"time"`
	// Fields holds the line's other fields as a JSON object, in the order
	// the handler added them; left out when there are none.
	Fields json.RawMessage `json:"fields,omitempty"`
}

// ControlAction is what a control message asks of an executor.
type ControlAction string

// The control actions.
const (
	ControlCancel ControlAction = "cancel"
	// ControlRefuse tells a worker that the dispatchers cannot serve it
	// (its record declares a version of the executor protocol older than
	// the one they write): Reason names the versions; InstanceID and
	// Attempt are 0. They route it nothing until its record changes.
	ControlRefuse ControlAction = "refuse"
)

// Control is the core NATS message on ax.control.<worker_id>.
type Control struct {
	Action     ControlAction `json:"action"`
	InstanceID int64         `json:"instance_id"`
	Attempt    int           `json:"attempt"`
	Reason     string        `json:"reason"`
}

// FenceQuestion is the core NATS request on
// ax.fence.<pool>.<worker_id>.<instance_id>: an executor that was given a
// dispatch message again (JetStream delivered it more than once) asks the
// dispatchers whether attempt Attempt of instance InstanceID may start,
// before it takes the attempt's lease. A first delivery asks nothing.
type FenceQuestion struct {
	InstanceID int64  `json:"instance_id"`
	Attempt    int    `json:"attempt"`
	WorkerID   string `json:"worker_id"`
}

// FenceAnswer is a dispatcher's reply to a [FenceQuestion]. Start is true
// only when the attempt is provably one that never ran; otherwise the
// executor terminates the dispatch message, and Reason says why (the
// attempt ran, another delivery runs it, or it cannot be known and the
// attempt was failed as lost so that the instance goes on with the next).
type FenceAnswer struct {
	Start  bool   `json:"start"`
	Reason string `json:"reason"`
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
	// RunID names the instance's run; empty for instances older than runs.
	RunID string `json:"run_id,omitempty"`
	// Parents tells how the parents of a chained task ended, by task name.
	Parents     map[string]ParentResult `json:"parents,omitempty"`
	Transitions []Transition            `json:"transitions,omitempty"`
	// Events are what befell the instance without changing its state (a
	// report refused as stale), oldest first.
	Events []InstanceEvent `json:"events,omitempty"`
	// Progress is the latest progress its handler reported while running,
	// kept after the attempt ends; nil when none did.
	Progress *InstanceProgress `json:"progress,omitempty"`
	// Archived is true for an instance read from the history or the
	// archive: it ended long enough ago to leave the hot tables (see
	// docs/operations.md, "Instance history and retention").
	Archived bool `json:"archived,omitempty"`
	// Wait says why the instance waits, while it does (see [Wait]); nil
	// when it runs, ended, or nothing is known to hold it.
	Wait *Wait `json:"wait,omitempty"`
	// Attempts are the instance's attempts as its transitions tell them
	// (see [Attempts]); set by GET /v1/instances/{id}, not by the list.
	Attempts []AttemptRun `json:"attempts,omitempty"`
}

// InstanceEvent is something that befell an instance without changing its
// state, shown in its timeline beside the transitions.
type InstanceEvent struct {
	// Kind is stale_started, stale_succeeded or stale_failed: a report of
	// that kind refused because its attempt was fenced out; or
	// refused_started, refused_succeeded, refused_failed or
	// refused_progress: one refused because it came from another pool or
	// another worker than the attempt's (a forged report).
	Kind     string    `json:"kind"`
	Attempt  int       `json:"attempt"`
	Operator string    `json:"operator,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// AuditKind says what an [AuditRecord] records.
type AuditKind string

// The audit record kinds.
const (
	AuditTransition AuditKind = "transition" // an instance changed state
	AuditAction     AuditKind = "action"     // an operator acted on a task or an instance
)

// OperatorAction names what an operator did.
type OperatorAction string

// The operator actions the audit trail records.
const (
	ActionApply   OperatorAction = "apply"   // stored a new version of a task's definition
	ActionEnable  OperatorAction = "enable"  // enabled a task
	ActionDisable OperatorAction = "disable" // disabled a task
	ActionPause   OperatorAction = "pause"   // paused a task's triggers
	ActionResume  OperatorAction = "resume"  // resumed a task's triggers
	ActionFire    OperatorAction = "fire"    // fired a task by hand
	ActionRerun   OperatorAction = "rerun"   // fired an instance's firing again
	ActionCancel  OperatorAction = "cancel"  // cancelled an instance
	ActionDelete  OperatorAction = "delete"  // deleted a task
	// ActionCancelFiring cancelled a pending delayed firing; ActionFireNow
	// fired one before its due time.
	ActionCancelFiring OperatorAction = "cancel_firing"
	ActionFireNow      OperatorAction = "fire_now"
	// ActionShadowStart put a task in shadow mode: its firings are
	// recorded SHADOW, never run. ActionShadowStop ended it (a cut-over
	// leaves the task enabled, else disabled).
	ActionShadowStart OperatorAction = "shadow_start"
	ActionShadowStop  OperatorAction = "shadow_stop"

	ActionTokenCreate        OperatorAction = "token_create"         // made an API token
	ActionTokenRevoke        OperatorAction = "token_revoke"         // revoked an API token
	ActionAlertRulePut       OperatorAction = "alert_rule_put"       // created or replaced an alert rule
	ActionAlertChannelAdd    OperatorAction = "alert_channel_add"    // added an alert channel
	ActionAlertChannelDelete OperatorAction = "alert_channel_delete" // deleted an alert channel

	ActionBackfill       OperatorAction = "backfill"        // started a backfill of a task's schedule
	ActionBackfillPause  OperatorAction = "backfill_pause"  // paused a backfill
	ActionBackfillResume OperatorAction = "backfill_resume" // resumed a backfill
	ActionBackfillCancel OperatorAction = "backfill_cancel" // cancelled a backfill
	ActionBulkRerun      OperatorAction = "bulk_rerun"      // reran the instances a query matched
	ActionBulkCancel     OperatorAction = "bulk_cancel"     // cancelled the instances a query matched
)

// The task names of the actions on no task, in their audit records (and
// subjects, ax.audit.<task>): no task is called so, since a task's name
// starts with a letter or a digit.
const (
	AuditTaskTokens = "_tokens" // token creation and revocation
	AuditTaskAlerts = "_alerts" // alert rule and channel changes
)

// AuditRecord is the message on ax.audit.<task>: one entry of the audit
// trail, an instance transition or an operator action, with its ID as the
// message's Nats-Msg-Id. The auditor relays each row of the outbox tables
// exactly once; the records of one instance arrive in the order of its
// transitions.
type AuditRecord struct {
	// ID is "t-<transition id>" for a transition, "o-<action id>" for an
	// operator action (see [TransitionAuditID], [ActionAuditID]).
	ID   string    `json:"id"`
	Kind AuditKind `json:"kind"`
	Task string    `json:"task"`
	// InstanceID is the instance the record is about; 0 (left out) for an
	// action on a task.
	InstanceID int64 `json:"instance_id,omitempty"`
	// From, To and Attempt describe a transition; From is empty for the creation.
	From    State `json:"from,omitempty"`
	To      State `json:"to,omitempty"`
	Attempt int   `json:"attempt,omitempty"`
	// Action is what an operator did, for an action.
	Action OperatorAction `json:"action,omitempty"`
	// Operator is who or what made the change: a person or program named by
	// the X-Ax-Operator header, "dispatcher", "reaper", "worker:<id>", …
	Operator string `json:"operator"`
	// Reason says why, when that is known.
	Reason string `json:"reason,omitempty"`
	// Details holds what else an action changed (e.g. {"version": 3} for
	// an apply): any JSON value.
	Details json.RawMessage `json:"details,omitempty"`
	// At is when the change was written.
	At time.Time `json:"at"`
	// Traceparent is the W3C traceparent of the instance's trace (its
	// instances.traceparent: the dispatcher's span that created it), on a
	// transition of an instance that has one; optional, left out
	// otherwise. The monitor links its latency histograms' exemplars to it.
	Traceparent string `json:"traceparent,omitempty"`
	// FiredAt is when the instance's firing was due (its fired_at), on the
	// transitions the auditor's latency metrics time from it: the creation
	// (→CREATED) and the first attempt's →RUNNING. StartedAt is when the
	// attempt's handler began as its worker reported it, on a transition
	// into or out of RUNNING while the instance is at that attempt and
	// knows it. Both are optional (left out where unknown, as on a record
	// of an instance moved to the history before the relay read it) and
	// read by the relay with the transition, so that the monitor reads
	// no instance back from PostgreSQL for them.
	FiredAt   time.Time `json:"fired_at,omitzero"`
	StartedAt time.Time `json:"started_at,omitzero"`
}

// TransitionAuditID is the audit record id of transition id.
func TransitionAuditID(id int64) string { return "t-" + strconv.FormatInt(id, 10) }

// ActionAuditID is the audit record id of operator action id.
func ActionAuditID(id int64) string { return "o-" + strconv.FormatInt(id, 10) }

// ParseAuditID is the inverse of [TransitionAuditID] and [ActionAuditID]:
// it returns the record's kind and the id of its row. ok is false when s is
// not such an id, exactly as they write it.
func ParseAuditID(s string) (kind AuditKind, id int64, ok bool) {
	prefix, num, _ := strings.Cut(s, "-")
	id, err := strconv.ParseInt(num, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != num {
		return "", 0, false
	}
	switch prefix {
	case "t":
		return AuditTransition, id, true
	case "o":
		return AuditAction, id, true
	}
	return "", 0, false
}
