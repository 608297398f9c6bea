package schemas

import (
	"time"
)

// Summary sums up the instances of a window: their number by state, the
// success rate and the run times, over the whole window and bucket by
// bucket. It is counted by PostgreSQL, so it covers every instance of the
// window however many there are.
type Summary struct {
	Task  string    `json:"task,omitempty"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Total counts the instances fired in the window.
	Total int64 `json:"total"`
	// States counts them by their current state; every state is present.
	States map[State]int64 `json:"states"`
	// SuccessRate is SUCCEEDED / (SUCCEEDED + FAILED); null when no
	// instance of the window ended either way.
	SuccessRate *float64 `json:"success_rate"`
	// RunTime holds the percentiles of the run times (first start to
	// finish) of the instances that ran and ended.
	RunTime RunTimes `json:"run_time"`
	// StepSeconds is the width of each bucket of Series; 0 without a series.
	StepSeconds float64 `json:"step_seconds,omitempty"`
	// Series holds every bucket of the window, oldest first, empty ones too.
	Series []SummaryBucket `json:"series,omitempty"`
}

// RunTimes are percentiles of run times in milliseconds; each is null when
// Count is 0.
type RunTimes struct {
	// Count is how many run times the percentiles are taken over.
	Count int64    `json:"count"`
	P50   *float64 `json:"p50_ms"`
	P95   *float64 `json:"p95_ms"`
	P99   *float64 `json:"p99_ms"`
	Max   *float64 `json:"max_ms"`
}

// SummaryBucket is one bucket of a [Summary]: the instances fired in
// [Start, Start + step).
type SummaryBucket struct {
	Start     time.Time `json:"start"`
	Total     int64     `json:"total"`
	Succeeded int64     `json:"succeeded"`
	Failed    int64     `json:"failed"`
	RunTime   RunTimes  `json:"run_time"`
}
