package schemas

import "time"

// BackfillState is where a backfill stands.
type BackfillState string

// The states of a backfill. Running and paused ones may be cancelled; a
// running one pauses, a paused one resumes; cancelled and done are final.
const (
	BackfillRunning   BackfillState = "running"
	BackfillPaused    BackfillState = "paused"
	BackfillCancelled BackfillState = "cancelled"
	BackfillDone      BackfillState = "done"
)

// Backfill is a schedule's ticks of a past range fired again, as the
// backfills table holds it and the API answers it (POST
// /v1/tasks/{name}/backfills, GET /v1/backfills): the api makes one and
// moves its state, the trigger service fires its ticks and moves its
// cursor.
type Backfill struct {
	ID           int64         `json:"id"`
	Task         string        `json:"task"`
	TriggerIndex int           `json:"trigger_index"`
	From         time.Time     `json:"from"`
	To           time.Time     `json:"to"`
	Priority     string        `json:"priority"`
	MaxRunning   int           `json:"max_running"`
	Overlap      string        `json:"overlap"`
	Rate         float64       `json:"rate"`
	State        BackfillState `json:"state"`
	// Cursor is the latest tick handled; zero before the first.
	Cursor time.Time `json:"cursor,omitzero"`
	// Fired counts the ticks the backfill fired, Existing those it found
	// run already (no firing), Skipped those it left out; Total is how many
	// ticks the range holds.
	Fired     int       `json:"fired"`
	Existing  int       `json:"existing"`
	Skipped   int       `json:"skipped"`
	Total     int       `json:"total"`
	Operator  string    `json:"operator"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Instances counts the instances of the range's ticks by state (filled
	// by store's BackfillProgress).
	Instances map[State]int `json:"instances,omitempty"`
}

// InstanceQuery selects instances of the hot table for a bulk operation
// (POST /v1/instances/bulk/rerun, .../cancel) or a dead-letter replay:
// every field set must match. The API requires Task.
type InstanceQuery struct {
	Task  string  `json:"task,omitempty"`
	State []State `json:"state,omitempty"`
	// Since and Until bound the instances' fired_at (Since included, Until
	// excluded).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Error keeps the instances whose error contains it (case-insensitive).
	Error string `json:"error,omitempty"`
	// Worker keeps the instances last run by this worker.
	Worker string `json:"worker,omitempty"`
	// ErrorClass keeps the instances whose error falls in this class (see
	// GET /v1/dead-letters and store.ErrorClassSQL).
	ErrorClass string `json:"error_class,omitempty"`
}

// DeadLetterGroup is the instances of one task that failed for good with
// one class of error (see store.ErrorClassSQL), as GET /v1/dead-letters
// lists them.
type DeadLetterGroup struct {
	Task       string `json:"task"`
	ErrorClass string `json:"error_class"`
	Count      int    `json:"count"`
	// FirstSeen and LastSeen are the earliest and latest finished_at.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Example is the error of the group's latest instance, LatestID its id.
	Example  string `json:"example"`
	LatestID int64  `json:"latest_id"`
}
