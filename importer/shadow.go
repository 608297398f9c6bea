package importer

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Shadow kinds: how AX's tick and the old scheduler's run of it differ.
const (
	// ShadowExtra is a tick AX fires that the old scheduler did not run.
	ShadowExtra = "extra"
	// ShadowMissing is a run of the old scheduler that AX has no tick for.
	ShadowMissing = "missing"
	// ShadowLate is a run the old scheduler started more than the
	// tolerance after AX's tick (before the next one).
	ShadowLate = "late"
)

// ShadowDiff is one difference between AX's ticks and the old runs.
type ShadowDiff struct {
	Kind string `json:"kind"`
	// Tick is AX's tick (zero for a missing one).
	Tick time.Time `json:"tick,omitzero"`
	// Ran is when the old scheduler ran it (zero for an extra one).
	Ran time.Time `json:"ran,omitzero"`
	// InstanceID is the instance AX recorded on the tick, when the
	// report compared recorded instances.
	InstanceID int64 `json:"instance_id,omitempty"`
}

// Bases of a [ShadowReport]: what AX's side of the comparison is.
const (
	// BasisRecorded compares the ticks AX's triggers fired: the
	// instances recorded on them (SHADOW in shadow mode).
	BasisRecorded = "recorded"
	// BasisComputed compares the ticks the task's cron triggers give,
	// for a window in which AX recorded no instance of it.
	BasisComputed = "computed"
)

// ShadowReport compares one task's ticks with its old runs over a window.
type ShadowReport struct {
	Task string `json:"task"`
	// Source names the old job ("xxl_job_info id=10").
	Source string `json:"source"`
	// Basis is BasisRecorded or BasisComputed.
	Basis string `json:"basis"`
	// From and To bound the window compared: the one asked for, with
	// recorded instances narrowed to the task's shadow start and to the
	// ticks already due.
	From  time.Time    `json:"from"`
	To    time.Time    `json:"to"`
	Ticks int          `json:"ticks"`
	Runs  int          `json:"runs"`
	Diffs []ShadowDiff `json:"diffs,omitempty"`
}

// CompareTicks pairs AX's ticks with the old scheduler's runs, both
// sorted: a run at or up to tolerance after a tick is that tick's; a run
// later than that but before the next tick is the tick's, late; every
// tick left is extra, every run left missing.
func CompareTicks(ticks, runs []time.Time, tolerance time.Duration) []ShadowDiff {
	var diffs []ShadowDiff
	used := make([]bool, len(runs))
	j := 0
	for i, t := range ticks {
		for j < len(runs) && runs[j].Before(t) {
			j++
		}
		next := time.Time{}
		if i+1 < len(ticks) {
			next = ticks[i+1]
		}
		switch {
		case j < len(runs) && !runs[j].After(t.Add(tolerance)):
			used[j] = true
			j++
		case j < len(runs) && (next.IsZero() || runs[j].Before(next)):
			used[j] = true
			diffs = append(diffs, ShadowDiff{Kind: ShadowLate, Tick: t, Ran: runs[j]})
			j++
		default:
			diffs = append(diffs, ShadowDiff{Kind: ShadowExtra, Tick: t})
		}
	}
	for k, r := range runs {
		if !used[k] {
			diffs = append(diffs, ShadowDiff{Kind: ShadowMissing, Ran: r})
		}
	}
	slices.SortStableFunc(diffs, func(a, b ShadowDiff) int { return at(a).Compare(at(b)) })
	return diffs
}

func at(d ShadowDiff) time.Time {
	if d.Tick.IsZero() {
		return d.Ran
	}
	return d.Tick
}

// XXLJobID returns the XXL-JOB job id an imported task's name carries
// ("xxl-10-settlehandler" is job 10).
func XXLJobID(task string) (int64, bool) {
	rest, ok := strings.CutPrefix(task, "xxl-")
	if !ok {
		return 0, false
	}
	id, _, _ := strings.Cut(rest, "-")
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil
}

// xxlNotCron are the trigger types of xxl_job_log rows that no schedule
// made (XXL-JOB's TriggerTypeEnum titles, in its Chinese and English
// messages): manual, retry, parent, API and misfire runs.
var xxlNotCron = []string{"手动触发", "失败重试触发", "父任务触发", "API触发", "调度过期补偿",
	"Manual trigger", "Fail retry trigger", "Parent job trigger", "Api trigger", "Misfire compensation trigger"}

// XXLJobRuns returns the trigger times of job's scheduled runs in
// xxl_job_log within [from, to), oldest first; XXL-JOB writes them as
// wall-clock times of its admin's zone, loc. Runs fired by hand, by a
// retry, by a parent, by the API or as misfire compensation are left out.
func XXLJobRuns(ctx context.Context, db *sql.DB, job int64, from, to time.Time, loc *time.Location) ([]time.Time, error) {
	wall := func(t time.Time) string { return t.In(loc).Format("2006-01-02 15:04:05") }
	rows, err := db.QueryContext(ctx, `SELECT DATE_FORMAT(trigger_time, '%Y-%m-%d %H:%i:%s'), COALESCE(trigger_msg, '')
		FROM xxl_job_log WHERE job_id = ? AND trigger_time >= ? AND trigger_time < ? ORDER BY trigger_time, id`,
		job, wall(from), wall(to))
	if err != nil {
		return nil, fmt.Errorf("read xxl_job_log: %w", err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var ts, msg string
		if err := rows.Scan(&ts, &msg); err != nil {
			return nil, fmt.Errorf("read xxl_job_log: %w", err)
		}
		if slices.ContainsFunc(xxlNotCron, func(s string) bool { return strings.Contains(msg, s) }) {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05", ts, loc)
		if err != nil {
			return nil, fmt.Errorf("read xxl_job_log: trigger_time %q: %w", ts, err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
