package schemas

import (
	"fmt"
	"time"
)

// A task's ledger (GET /v1/tasks/{name}/ledger, ax ledger): every instant
// its cron triggers say it should have fired in a range, each beside what
// AX recorded of it. The store computes it (store.Store.Ledger).

// Tick statuses of a [LedgerTick].
const (
	TickFired  = "fired"  // its firing made an instance on time
	TickLate   = "late"   // fired late, by the trigger's misfire policy
	TickMissed = "missed" // no instance: see the tick's reason
	TickDue    = "due"    // not yet due, or due too recently to judge
	// TickDoubled marks a cron instance of the range on no tick of the
	// schedule (Ledger.Doubled).
	TickDoubled = "doubled"
)

// LedgerTick is one scheduled instant and what became of it.
type LedgerTick struct {
	// Tick is the scheduled instant; Wall the same on the trigger's
	// zone's wall clock ("2025-03-30 03:00:00 CEST").
	Tick    time.Time `json:"tick"`
	Wall    string    `json:"wall"`
	Trigger int       `json:"trigger"`
	EventID string    `json:"event_id"`
	// DST is "gap" or "repeat" (see taskdef.CronSchedule.WallNote) when daylight saving time
	// shaped the tick, with DSTNote saying how.
	DST     string `json:"dst,omitempty"`
	DSTNote string `json:"dst_note,omitempty"`
	// Status is TickFired, TickLate, TickMissed or TickDue; Reason says
	// why a tick is late or missed, with the misfire policy.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// The instance, when the tick made one.
	InstanceID int64      `json:"instance_id,omitempty"`
	State      State      `json:"state,omitempty"`
	Attempts   int        `json:"attempts,omitempty"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	// DurationMS is the run time, first start to finish, of an ended instance that ran.
	DurationMS *int64 `json:"duration_ms,omitempty"`
	// Moved says the instance is in the history tables.
	Moved bool `json:"moved,omitempty"`
}

// LedgerTrigger is one cron trigger of the ledger's task.
type LedgerTrigger struct {
	Index      int     `json:"index"`
	Schedule   string  `json:"schedule"`
	Timezone   string  `json:"timezone"`
	Misfire    Misfire `json:"misfire"`
	MaxCatchUp int     `json:"max_catch_up,omitempty"`
}

// LedgerSummary sums up a ledger.
type LedgerSummary struct {
	Ticks     int `json:"ticks"`
	Instances int `json:"instances"`
	Missed    int `json:"missed"`
	Late      int `json:"late"`
	Doubled   int `json:"doubled"`
	Retried   int `json:"retried"`
	Due       int `json:"due"`
	DSTGaps   int `json:"dst_gaps"`
	DSTRepeat int `json:"dst_repeats"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
	// Shadow counts the ticks recorded in shadow mode (state SHADOW):
	// fired, never run.
	Shadow int `json:"shadow"`
}

// String is the summary line: "744 ticks, 744 instances, 0 missed, 0
// doubled, 3 retried", and the late, due and failed ticks when there are.
func (s LedgerSummary) String() string {
	line := fmt.Sprintf("%d ticks, %d instances, %d missed, %d doubled, %d retried", s.Ticks, s.Instances, s.Missed, s.Doubled, s.Retried)
	for _, x := range []struct {
		n    int
		what string
	}{{s.Late, "fired late"}, {s.Failed, "failed"}, {s.Skipped, "skipped"}, {s.Shadow, "in shadow (recorded, not run)"}, {s.Due, "not yet due"}} {
		if x.n > 0 {
			line += fmt.Sprintf(", %d %s", x.n, x.what)
		}
	}
	return line
}

// Ledger is a task's ledger over [From, To).
type Ledger struct {
	Task     string          `json:"task"`
	From     time.Time       `json:"from"`
	To       time.Time       `json:"to"`
	Triggers []LedgerTrigger `json:"triggers"`
	Ticks    []LedgerTick    `json:"ticks"`
	// Doubled lists the cron instances of the range on no tick.
	Doubled []LedgerTick  `json:"doubled,omitempty"`
	Summary LedgerSummary `json:"summary"`
	// Line is Summary as a sentence.
	Line string `json:"summary_line"`
}
