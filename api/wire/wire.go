// Package wire holds the bodies the AX API and its client exchange: what
// each request sends and each answer holds, as JSON. It imports only the
// contracts (schemas), so a program that calls the API (package
// api/apiclient) links neither the server nor the store.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// HeaderOperator is the header that named who makes a change before the API
// took tokens. The API records the name of the request's token as the
// operator of every change and ignores it; a client still sends it for an
// older server.
const HeaderOperator = "X-Ax-Operator"

// TaskInfo is a task as the API shows it.
type TaskInfo struct {
	// Task is the definition of the current version, defaults filled in.
	Task    *schemas.Task `json:"task"`
	Version int           `json:"version"`
	Enabled bool          `json:"enabled"`
	Paused  bool          `json:"paused"`
	// Shadow says the task is in shadow mode (ax shadow start): it fires,
	// and its instances are recorded SHADOW, never run; ShadowSince is
	// when it entered it.
	Shadow      bool       `json:"shadow,omitempty"`
	ShadowSince *time.Time `json:"shadow_since,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	// NextFireTimes lists the next 5 firings of each cron trigger (GET
	// /v1/tasks/{name} only).
	NextFireTimes []TriggerTimes `json:"next_fire_times,omitempty"`
}

// ApplyResult is the answer to POST /v1/tasks.
type ApplyResult struct {
	TaskInfo
	// Changed is false when the definition equals the current version's,
	// which then stays current.
	Changed bool `json:"changed"`
	// Warnings lists what may keep the task from running although its
	// definition is valid, e.g. a handler no live worker serves. Workers
	// come and go, so these never refuse a definition.
	Warnings []string `json:"warnings,omitempty"`
	// Workers lists the live workers that may take the task's instances
	// now, as their heartbeats claim: each serves one of the task's pools
	// with its handler, at min_worker_version or newer.
	Workers []WorkerFit `json:"workers,omitempty"`
}

// WorkerFit is a live worker that may take a task's instances, and the
// pool it takes them in.
type WorkerFit struct {
	ID   string `json:"id"`
	Pool string `json:"pool"`
}

// TaskList is the answer to GET /v1/tasks.
type TaskList struct {
	Tasks []TaskInfo `json:"tasks"`
}

// TriggerTimes is when one cron trigger of a task fires next.
type TriggerTimes struct {
	// Trigger is the trigger's index in the task's triggers.
	Trigger  int    `json:"trigger"`
	Schedule string `json:"schedule"`
	Timezone string `json:"timezone"`
	// Local are the instants in the trigger's zone; UTC the same instants in UTC.
	Local []time.Time `json:"local"`
	UTC   []time.Time `json:"utc"`
}

// FireRequest is the body of POST /v1/tasks/{name}/runs. Every field may be
// left out, and so may the body.
type FireRequest struct {
	// Payload is handed to the handler as it is (any JSON value).
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadVersion must equal the task's schema_version; 0 means 1.
	PayloadVersion int `json:"payload_version,omitempty"`
	// EventID identifies the firing: firing again with the same id makes no
	// second instance. Empty means a new random id.
	EventID string `json:"event_id,omitempty"`
	// IdempotencyKey makes the firing's event id "idem-<key>": firing again
	// with the same key and payload (compared as JSON values) returns the
	// original instance, and with another payload is refused with 409. It
	// excludes EventID.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Priority overrides the task's priority for this firing.
	Priority schemas.Priority `json:"priority,omitempty"`
	// Operator, when set, makes the firing a manual one (source "manual")
	// rather than an event. Its value is not recorded: the operator of
	// every firing through the API is the name of the request's token.
	Operator string `json:"operator,omitempty"`
	// RunAt delays the firing until then: its instance is created no
	// earlier, with RunAt as its fired_at. It excludes Delay.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay delays the firing by a Go duration ("90s", "2h") from when the
	// API receives it. It excludes RunAt.
	Delay string `json:"delay,omitempty"`
	// RunID makes the firing part of that run, so that the tasks chained
	// after it (their after) fire in it: e.g. the second root of a join
	// fired into the run of the first. Empty starts a new run.
	RunID string `json:"run_id,omitempty"`
}

// FireResult is the answer to POST /v1/tasks/{name}/runs and POST
// /v1/instances/{id}/rerun: 201 with the instance when the dispatcher
// created it within the API's RunWait; 200 with the instance an earlier
// firing with the same idempotency key made (Existing); 202 with the event
// id (InstanceID 0) when the instance is not there yet — a delayed firing,
// which also tells its RunAt, or a dispatcher that did not keep up.
type FireResult struct {
	InstanceID int64 `json:"instance_id,omitempty"`
	// Task is the task fired (for a rerun, the instance's task).
	Task    string        `json:"task"`
	EventID string        `json:"event_id"`
	State   schemas.State `json:"state,omitempty"`
	// RunAt is when a delayed firing is due.
	RunAt time.Time `json:"run_at,omitzero"`
	// Existing is true when an earlier firing with the same idempotency key
	// made the instance (or is the delayed firing still waiting).
	Existing bool `json:"existing,omitempty"`
}

// FireBatchResult is the answer (202) to POST /v1/tasks/{name}/runs with a
// JSON array of firings: one result a firing, in the order of the array.
type FireBatchResult struct {
	Results []FireBatchItem `json:"results"`
}

// FireBatchItem is the result of one firing of a batch: the status and
// body a single firing so made would have had, but that the API does not
// wait for the instances of a batch (202 with the event id; 200 for an
// idempotency key used before), or the error (4xx, 503) that refused it
// alone.
type FireBatchItem struct {
	Status int `json:"status"`
	*FireResult
	Error *Error `json:"error,omitempty"`
}

// SameJSON reports whether two JSON documents are the same value: key order,
// spacing and the spelling of numbers (1.0, 1e0) do not matter. An empty
// document is null.
func SameJSON(a, b json.RawMessage) bool {
	va, okA := decodeValue(a)
	vb, okB := decodeValue(b)
	return okA && okB && equalValues(va, vb)
}

func decodeValue(data json.RawMessage) (any, bool) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func equalValues(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !equalValues(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalValues(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		// Exact: numbers beyond float64's precision count digit by digit.
		ra, okA := new(big.Rat).SetString(a.String())
		rb, okB := new(big.Rat).SetString(b.String())
		return okA && okB && ra.Cmp(rb) == 0
	default:
		return a == b
	}
}

// InstanceList is the answer to GET /v1/instances.
type InstanceList struct {
	Instances []schemas.Instance `json:"instances"`
}

// RerunRequest is the optional body of POST /v1/instances/{id}/rerun.
type RerunRequest struct {
	// Operator is accepted for older clients and not recorded: the
	// operator of a rerun is the name of the request's token.
	Operator string `json:"operator,omitempty"`
	// Payload, when set, replaces the instance's payload (any JSON value);
	// it must satisfy the task's payload_schema like any firing's.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// CancelRequest is the optional body of POST /v1/instances/{id}/cancel.
type CancelRequest struct {
	// Reason is recorded on the CANCELLED transition (default "cancelled by <operator>").
	Reason string `json:"reason,omitempty"`
}

// StreamInfo is one of AX's JetStream streams as GET /v1/streams shows it.
type StreamInfo struct {
	Name string `json:"name"`
	// Bucket names the key-value bucket the stream holds; empty for a stream
	// that is not a bucket.
	Bucket   string   `json:"bucket,omitempty"`
	Subjects []string `json:"subjects"`
	// Retention is limits, interest or workqueue.
	Retention string `json:"retention"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	// Consumers lists the stream's consumers, by name.
	Consumers []ConsumerInfo `json:"consumers"`
}

// ConsumerInfo is one consumer of a stream as GET /v1/streams shows it.
type ConsumerInfo struct {
	Name string `json:"name"`
	// Durable is false for an ephemeral consumer (a watcher, a log reader).
	Durable bool `json:"durable"`
	// Pending counts the messages not yet delivered.
	Pending uint64 `json:"pending"`
	// AckPending counts the messages delivered and not yet acknowledged.
	AckPending int `json:"ack_pending"`
	// Redelivered counts the messages delivered more than once and not yet
	// acknowledged.
	Redelivered int `json:"redelivered"`
	// Waiting counts the pull requests waiting for messages.
	Waiting int `json:"waiting"`
	// LastActive is when a message was last delivered, if ever.
	LastActive *time.Time `json:"last_active,omitempty"`
	// Pool is the executor pool a dispatch consumer serves (a pool's queue,
	// or a worker's own queue by its worker's pool-less name "worker:<id>"),
	// from the consumer's metadata; "" for other consumers. The console
	// groups the lag by it.
	Pool string `json:"pool,omitempty"`
}

// StreamList is the answer to GET /v1/streams.
type StreamList struct {
	Streams []StreamInfo `json:"streams"`
	// Missing names the streams of the topology that do not exist.
	Missing []string `json:"missing,omitempty"`
}

// LogPage is the answer to GET /v1/instances/{id}/logs: task log lines of
// an instance, oldest first.
type LogPage struct {
	Lines []schemas.LogLine `json:"lines"`
	// Next is the AX_LOGS stream sequence of the last line read (0 when
	// none was): pass it as after to read the lines that come later.
	Next uint64 `json:"next"`
	// More says that the limit cut the answer: more lines follow Next.
	More bool `json:"more,omitempty"`
}

// Error is a refusal or failure of the API: the body {"error": …} of every
// 4xx and 5xx answer, and what [Client] methods return for one. Its Error
// method reads well on its own, for a CLI user.
type Error struct {
	// Status is the HTTP status of the answer.
	Status int `json:"-"`
	// Code names the kind of error for programs, e.g. "task_disabled".
	Code string `json:"code"`
	// Message says what was wrong and how to fix it.
	Message string `json:"message"`
	// Field names the offending request field or parameter, when there is one.
	Field string `json:"field,omitempty"`
	// Problems lists every rule a task definition or a firing broke.
	Problems []schemas.Problem `json:"problems,omitempty"`
}

// Error returns the message. When there are several problems, it returns
// the message's lead ("invalid task definition") followed by one line per
// problem instead, which reads better in a terminal than the one-line
// message that joins them.
func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the AX API answered %d %s", e.Status, http.StatusText(e.Status))
	}
	if len(e.Problems) < 2 {
		return e.Message
	}
	lead, _, _ := strings.Cut(e.Message, ": ")
	var b strings.Builder
	b.WriteString(lead)
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

// ErrorBody is the JSON body of an error answer.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	// Name is recorded as the operator of every change made with the token;
	// no other live token may have it.
	Name string `json:"name"`
	// Role is viewer, operator or admin.
	Role schemas.Role `json:"role"`
}

// CreatedToken is the answer to POST /v1/tokens: the token and its secret,
// which is shown this once and never again.
type CreatedToken struct {
	Token  schemas.Token `json:"token"`
	Secret string        `json:"secret"`
}

// TokenList is the answer to GET /v1/tokens.
type TokenList struct {
	Tokens []schemas.Token `json:"tokens"`
}

// WorkerList is the answer to GET /v1/workers.
type WorkerList struct {
	Workers []schemas.Worker `json:"workers"`
}

// AuditList is the answer to GET /v1/audit.
type AuditList struct {
	Records []schemas.AuditRecord `json:"records"`
}

// AlertList is the answer to GET /v1/alerts.
type AlertList struct {
	Alerts []schemas.Alert `json:"alerts"`
}

// LimitList is the answer to GET /v1/limits.
type LimitList struct {
	Limits []schemas.LimitUsage `json:"limits"`
}

// AlertRuleList is the answer to GET /v1/alert-rules.
type AlertRuleList struct {
	Rules []schemas.AlertRule `json:"rules"`
}

// AlertRuleRequest is the body of PUT /v1/alert-rules/{name}: the whole rule.
type AlertRuleRequest struct {
	// Kind is the check the rule makes (see schemas.AlertKind); a rule's
	// kind never changes.
	Kind  schemas.AlertKind  `json:"kind"`
	Level schemas.AlertLevel `json:"level"`
	// Params are the kind's parameters (see schemas.AlertParams); left out,
	// every parameter takes its default.
	Params json.RawMessage `json:"params,omitempty"`
	// Enabled says whether the auditor checks the rule (default true).
	Enabled *bool `json:"enabled,omitempty"`
}

// AlertChannelList is the answer to GET /v1/alert-channels.
type AlertChannelList struct {
	Channels []schemas.AlertChannel `json:"channels"`
}

// AlertChannelRequest is the body of POST /v1/alert-channels.
type AlertChannelRequest struct {
	// Kind is the payload shape: "webhook" (JSON), "wecom" (a WeCom group
	// robot) or "slack" (a Slack incoming webhook, or one that takes its payload).
	Kind schemas.AlertChannelKind `json:"kind"`
	// URL is where the notifications are posted.
	URL string `json:"url"`
}

// HealthBody is the answer to GET /healthz.
type HealthBody struct {
	Status string `json:"status"`
	Error  *Error `json:"error,omitempty"`
}

// PendingFiring is a delayed firing (run_at or delay) that waits for its
// due time as a message schedule: no instance exists for it yet. GET
// /v1/firings lists them; GET /v1/tasks/{name}/runs/{event_id} answers 202
// with one.
type PendingFiring struct {
	// Pending is always true: it tells this answer from an instance.
	Pending bool   `json:"pending"`
	Task    string `json:"task"`
	EventID string `json:"event_id"`
	// RunAt is when the firing is due.
	RunAt time.Time `json:"run_at"`
	// FiredAt is when it was fired.
	FiredAt  time.Time       `json:"fired_at"`
	Source   schemas.Source  `json:"source"`
	Operator string          `json:"operator,omitempty"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// FiringList is the answer to GET /v1/firings: the pending delayed
// firings, soonest due first.
type FiringList struct {
	Firings []PendingFiring `json:"firings"`
	// Truncated is true when more schedules were pending than were read.
	Truncated bool `json:"truncated,omitempty"`
}
