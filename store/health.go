package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// failureStreaks reads, for each task of $1 that is not a rehearsal's,
// its latest $2 ended instances that are not a firing's children, newest
// first.
const failureStreaks = `
	SELECT t.task, r.id, r.state, r.error, r.finished_at
	FROM unnest($1::text[]) AS t(task)
	CROSS JOIN LATERAL (
		SELECT id, state, error, finished_at FROM instances
		WHERE task >= t.task AND task <= t.task AND state IN ('SUCCEEDED', 'FAILED') AND parent_id IS NULL
		ORDER BY task, id DESC LIMIT $2
	) r
	WHERE ` + notRehearsal + `
	ORDER BY t.task, r.id DESC`

// recentRuns reads, for each task of $1 that is not a rehearsal's, its
// latest $2 SUCCEEDED runs that are not a firing's children, newest first.
const recentRuns = `
	SELECT t.task, r.id, (extract(epoch FROM r.finished_at - r.started_at) * 1000000)::bigint, r.finished_at
	FROM unnest($1::text[]) AS t(task)
	CROSS JOIN LATERAL (
		SELECT id, started_at, finished_at FROM instances
		WHERE task >= t.task AND task <= t.task AND state = 'SUCCEEDED' AND started_at IS NOT NULL
			AND finished_at IS NOT NULL AND parent_id IS NULL
		ORDER BY task, id DESC LIMIT $2
	) r
	WHERE ` + notRehearsal + `
	ORDER BY t.task, r.id DESC`

// latestPlan are the settings failureStreaks and recentRuns run with (see
// readLatest): no bitmap scans, and the generic plan.
var latestPlan = []string{"enable_bitmapscan = off", genericPlan[0]}

// readLatest runs q, failureStreaks or recentRuns, with args and calls each
// for its rows. Its plan is to be, for each task, a scan of
// instances_task_id_idx from the task's newest entry that stops after the
// last row it returns, whatever the table's statistics; a burst leaves
// tens of thousands of instances of one task. Hence the task is bounded by
// a range (task >= t.task AND task <= t.task) and the rows ordered by
// (task, id DESC): with task = t.task the planner drops task from the order,
// task being constant, and on an analysed table it scans the primary key
// backwards, passing every newer instance of every task (all the others'
// for a task with few). And bitmap scans are off for the statement: on a
// table not analysed since a burst began, the planner expects a couple of
// dozen instances of the task and reads all of them (5,000-20,000 in a
// burst) by a bitmap scan, to sort them for a LIMIT of 100. See
// TestHealthReadsReadTheirRowsOnly. The plan is the generic one
// (genericPlan): the auditor reads a few tasks a batch of audit records.
func (s *Store) readLatest(ctx context.Context, q string, args []any, each func(pgx.Rows) error) error {
	return queryWith(ctx, s.pool, latestPlan, func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			if err := each(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}, q, args...)
}

// FailureStreaks returns, for each of tasks whose latest ended instance
// FAILED, its streak of failures, counting at most limit of them. The
// instances are taken in the order they were created, newest first, from the
// index on (task, id): a retry that ends late does not reorder them. A
// sharded or broadcast firing counts once, as its parent instance: its
// children (parent_id set) are not counted, so eight failed shards are one
// failure, not eight.
func (s *Store) FailureStreaks(ctx context.Context, tasks []string, limit int) (map[string]schemas.FailureStreak, error) {
	out := make(map[string]schemas.FailureStreak)
	if len(tasks) == 0 || limit <= 0 {
		return out, nil
	}
	broken := make(map[string]bool)
	err := s.readLatest(ctx, failureStreaks, []any{tasks, limit}, func(rows pgx.Rows) error {
		var (
			task, errText string
			id            int64
			state         schemas.State
			finished      *time.Time
		)
		if err := rows.Scan(&task, &id, &state, &errText, &finished); err != nil {
			return err
		}
		if broken[task] {
			return nil
		}
		if state != schemas.StateFailed {
			broken[task] = true
			return nil
		}
		st, ok := out[task]
		if !ok {
			st = schemas.FailureStreak{Task: task, LastInstanceID: id, LastError: errText}
		}
		st.Failures++
		if finished != nil {
			st.Since = *finished
		}
		out[task] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read failure streaks: %w", err)
	}
	return out, nil
}

// Run is one SUCCEEDED run of a task: how long its last attempt took.
type Run struct {
	InstanceID int64
	Duration   time.Duration
	FinishedAt time.Time
}

// RecentRuns returns, for each of tasks, its latest n SUCCEEDED runs, newest
// first; tasks without any are missing. A sharded or broadcast firing is one
// run, its parent's, not one per child.
func (s *Store) RecentRuns(ctx context.Context, tasks []string, n int) (map[string][]Run, error) {
	out := make(map[string][]Run)
	if len(tasks) == 0 || n <= 0 {
		return out, nil
	}
	err := s.readLatest(ctx, recentRuns, []any{tasks, n}, func(rows pgx.Rows) error {
		var (
			task   string
			r      Run
			micros int64
		)
		if err := rows.Scan(&task, &r.InstanceID, &micros, &r.FinishedAt); err != nil {
			return err
		}
		r.Duration = time.Duration(max(micros, 0)) * time.Microsecond
		out[task] = append(out[task], r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read recent runs: %w", err)
	}
	return out, nil
}

// DurationStats describes the runs a latest run is compared with.
type DurationStats struct {
	// Runs is how many runs the statistics are over.
	Runs int
	// Median and P95 are the 50th and 95th percentiles by nearest rank.
	Median time.Duration
	P95    time.Duration
}

// DurationOutlier compares a task's latest run with the runs before it
// (history, any order): it is an outlier when history holds at least
// minRuns runs and the latest took more than factor times their p95. The
// statistics are returned either way (zero without history).
func DurationOutlier(latest time.Duration, history []time.Duration, factor float64, minRuns int) (DurationStats, bool) {
	if len(history) == 0 {
		return DurationStats{}, false
	}
	sorted := slices.Clone(history)
	slices.Sort(sorted)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	st := DurationStats{Runs: len(sorted), Median: rank(0.5), P95: rank(0.95)}
	return st, len(sorted) >= minRuns && float64(latest) > factor*float64(st.P95)
}

// HealthOptions sets the thresholds of [Store.HealthReport]; zero fields
// take the stated defaults.
type HealthOptions struct {
	// Now is the report's time (default time.Now()).
	Now time.Time
	// MinFailures is the shortest streak of failures reported (default 2).
	MinFailures int
	// Grace is how long after its time a cron tick may still be unfired
	// before it counts as missed (default 1m).
	Grace time.Duration
	// Runs is how many earlier SUCCEEDED runs a task's latest run is
	// compared with (default 20); MinRuns how many it needs (default 5);
	// Factor how many times their p95 the latest must exceed (default 2).
	Runs    int
	MinRuns int
	Factor  float64
}

func (o HealthOptions) withDefaults() HealthOptions {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.MinFailures <= 0 {
		o.MinFailures = 2
	}
	if o.Grace <= 0 {
		o.Grace = time.Minute
	}
	if o.Runs <= 0 {
		o.Runs = 20
	}
	if o.MinRuns <= 0 {
		o.MinRuns = 5
	}
	if o.Factor <= 0 {
		o.Factor = 2
	}
	return o
}

// maxStreak is the longest failure streak the health report counts.
const maxStreak = 100

// HealthReport reads the fleet's health (see [schemas.HealthReport] and its
// sections' rules) with the thresholds of o. The tasks of ax drill (task
// types schemas.DrillTaskType and DrillJitterTaskType) are left out.
func (s *Store) HealthReport(ctx context.Context, o HealthOptions) (schemas.HealthReport, error) {
	o = o.withDefaults()
	rep := newHealthReport(o)
	all, err := s.ListTasks(ctx)
	if err != nil {
		return schemas.HealthReport{}, fmt.Errorf("health report: %w", err)
	}
	// A rehearsal's tasks fail and crash on purpose: they are not the fleet.
	tasks := slices.DeleteFunc(all, func(t TaskRecord) bool { return schemas.IsRehearsalTaskType(t.Definition.TaskType) })
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
		if t.Definition.Owner == "" {
			rep.WithoutOwner = append(rep.WithoutOwner, t.Name)
		}
	}

	streaks, err := s.FailureStreaks(ctx, names, maxStreak)
	if err != nil {
		return schemas.HealthReport{}, fmt.Errorf("health report: %w", err)
	}
	for _, name := range names {
		if st, ok := streaks[name]; ok && st.Failures >= o.MinFailures {
			rep.ConsecutiveFailures = append(rep.ConsecutiveFailures, st)
		}
	}
	slices.SortStableFunc(rep.ConsecutiveFailures, func(a, b schemas.FailureStreak) int { return b.Failures - a.Failures })

	if rep.MissedSchedules, err = s.missedSchedules(ctx, tasks, o); err != nil {
		return schemas.HealthReport{}, fmt.Errorf("health report: %w", err)
	}

	runs, err := s.RecentRuns(ctx, names, o.Runs+1)
	if err != nil {
		return schemas.HealthReport{}, fmt.Errorf("health report: %w", err)
	}
	rep.DurationOutliers = slowRuns(rep.DurationOutliers, names, runs, o)
	return rep, nil
}

// newHealthReport is an empty report under the rules of o.
func newHealthReport(o HealthOptions) schemas.HealthReport {
	return schemas.HealthReport{
		GeneratedAt: o.Now,
		Rules: schemas.HealthRules{
			ConsecutiveFailures: fmt.Sprintf("the task's latest %d or more ended instances FAILED, with no SUCCEEDED one between them "+
				"(SKIPPED and CANCELLED instances do not count; streaks are counted up to %d)", o.MinFailures, maxStreak),
			MissedSchedules: fmt.Sprintf("an enabled, unpaused task's cron trigger has a tick more than %v in the past that no trigger "+
				"service has fired or settled: the first tick after the last one settled, or after the task last changed", o.Grace),
			DurationOutliers: fmt.Sprintf("the task's latest SUCCEEDED run took more than %g × the p95 of the %d SUCCEEDED runs before it "+
				"(judged with at least %d such runs)", o.Factor, o.Runs, o.MinRuns),
			WithoutOwner: "the task's definition has no owner",
		},
		ConsecutiveFailures: []schemas.FailureStreak{},
		MissedSchedules:     []schemas.MissedSchedule{},
		DurationOutliers:    []schemas.SlowRun{},
		WithoutOwner:        []string{},
	}
}

// slowRuns appends to out the tasks of names whose latest run in runs,
// newest first, is an outlier among the runs before it.
func slowRuns(out []schemas.SlowRun, names []string, runs map[string][]Run, o HealthOptions) []schemas.SlowRun {
	for _, name := range names {
		rs := runs[name]
		if len(rs) < 2 {
			continue
		}
		history := make([]time.Duration, len(rs)-1)
		for i, r := range rs[1:] {
			history[i] = r.Duration
		}
		if st, slow := DurationOutlier(rs[0].Duration, history, o.Factor, o.MinRuns); slow {
			out = append(out, schemas.SlowRun{Task: name, InstanceID: rs[0].InstanceID,
				DurationSeconds: rs[0].Duration.Seconds(), MedianSeconds: st.Median.Seconds(), P95Seconds: st.P95.Seconds(), Runs: st.Runs})
		}
	}
	return out
}

// missedSchedules finds the cron triggers of tasks that have a tick more
// than o.Grace past that no trigger service settled.
func (s *Store) missedSchedules(ctx context.Context, tasks []TaskRecord, o HealthOptions) ([]schemas.MissedSchedule, error) {
	var names []string
	for _, t := range tasks {
		if t.Enabled && !t.Paused {
			names = append(names, t.Name)
		}
	}
	states, err := s.GetTriggerStates(ctx, names)
	if err != nil {
		return nil, err
	}
	out := []schemas.MissedSchedule{}
	for _, t := range tasks {
		if !t.Enabled || t.Paused {
			continue
		}
		for i, tr := range t.Definition.Triggers {
			if tr.Type != schemas.TriggerTypeCron {
				continue
			}
			tr = tr.WithDefaults()
			sched, err := taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone)
			if err != nil {
				// Stored definitions were validated; one that no longer
				// parses cannot fire, which the trigger service reports.
				continue
			}
			// Ticks before the task last changed (created, enabled,
			// resumed, given this schedule) were not due.
			ref := t.UpdatedAt
			var last *time.Time
			if st, ok := states[TriggerKey{Task: t.Name, TriggerIndex: i}]; ok && st.Schedule == tr.Schedule && st.Timezone == tr.Timezone {
				last = &st.LastTick
				if st.LastTick.After(ref) {
					ref = st.LastTick
				}
			}
			next := sched.Next(ref)
			if next.IsZero() || o.Now.Sub(next) <= o.Grace {
				continue
			}
			out = append(out, schemas.MissedSchedule{Task: t.Name, TriggerIndex: i, Schedule: tr.Schedule, Timezone: tr.Timezone,
				LastTick: last, ExpectedAt: next.UTC()})
		}
	}
	return out, nil
}
