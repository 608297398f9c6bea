package wire

import (
	"encoding/json"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// BackfillRequest is the body of POST /v1/tasks/{name}/backfills: fire the
// ticks of one of the task's cron triggers from From to To (both
// included), as the trigger service fired them or would have.
type BackfillRequest struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Trigger is the index of the cron trigger among the task's triggers
	// (default: the first cron trigger).
	Trigger *int `json:"trigger,omitempty"`
	// Priority of the ticks' instances (default "low": below live work).
	Priority string `json:"priority,omitempty"`
	// MaxRunning bounds the backfill's ticks in flight at once (default 1).
	MaxRunning int `json:"max_running,omitempty"`
	// Overlap is "allow" (default) or "skip": wait while any instance of
	// the task is in flight, so that the backfill never overlaps a run.
	Overlap string `json:"overlap,omitempty"`
	// Rate bounds the ticks fired a second (default 10).
	Rate float64 `json:"rate,omitempty"`
}

// BulkRequest is the body of POST /v1/instances/bulk/rerun and
// POST /v1/instances/bulk/cancel.
type BulkRequest struct {
	Where schemas.InstanceQuery `json:"where"`
	// DryRun lists what matches and acts on nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Limit is the most instances acted on (default 100, at most 10000);
	// a query that matches more is refused unless Confirm is set, and then
	// acts on the first Limit (oldest first).
	Limit int `json:"limit,omitempty"`
	// Confirm acts although more than Limit instances match.
	Confirm bool `json:"confirm,omitempty"`
	// PayloadPatch (rerun only) is a JSON merge patch (RFC 7396) applied
	// to each instance's payload.
	PayloadPatch json.RawMessage `json:"payload_patch,omitempty"`
	// Reason (cancel only) is recorded on each cancellation.
	Reason string `json:"reason,omitempty"`
}

// BulkMatch is one instance a bulk query matched.
type BulkMatch struct {
	ID      int64     `json:"id"`
	Task    string    `json:"task"`
	State   string    `json:"state"`
	FiredAt time.Time `json:"fired_at"`
	Error   string    `json:"error,omitempty"`
	Worker  string    `json:"worker_id,omitempty"`
}

// BulkResult answers a bulk operation: what matched (Matched counts them
// all, Instances lists those acted on, or that would be), and for a rerun
// the event ids of the new firings.
type BulkResult struct {
	Action    string      `json:"action"`
	DryRun    bool        `json:"dry_run"`
	Matched   int         `json:"matched"`
	Instances []BulkMatch `json:"instances"`
	// Acted counts the instances acted on (0 on a dry run).
	Acted int `json:"acted"`
	// AuditID is the id of the one audit record of the action.
	AuditID int64 `json:"audit_id,omitempty"`
}

// DeadLetterList answers GET /v1/dead-letters.
type DeadLetterList struct {
	Groups []schemas.DeadLetterGroup `json:"groups"`
}

// ReplayRequest is the body of POST /v1/dead-letters/replay: rerun every
// dead letter of one group, optionally with a payload patch.
type ReplayRequest struct {
	Task         string          `json:"task"`
	ErrorClass   string          `json:"error_class"`
	PayloadPatch json.RawMessage `json:"payload_patch,omitempty"`
	DryRun       bool            `json:"dry_run,omitempty"`
	Limit        int             `json:"limit,omitempty"`
	Confirm      bool            `json:"confirm,omitempty"`
}

// BackfillList answers GET /v1/backfills.
type BackfillList struct {
	Backfills []schemas.Backfill `json:"backfills"`
}
