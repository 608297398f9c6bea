package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// MaxSummaryBuckets is the most buckets [SummaryFilter] may cut its window into.
const MaxSummaryBuckets = 1440

// SummaryFilter selects the instances [Store.InstanceSummary] sums up: those
// fired in [Since, Until), as GET /v1/instances?since=&until= lists them.
type SummaryFilter struct {
	// Task keeps the instances of one task; empty keeps every task's.
	Task string
	// Since and Until bound the window; both must be set, Since first.
	Since, Until time.Time
	// Step cuts the window into buckets of this width, from Since, for
	// [schemas.Summary.Series]; 0 makes no series. At most [MaxSummaryBuckets]
	// buckets.
	Step time.Duration
}

// summaryStates are the states a Summary counts, in the order of the state machine.
var summaryStates = []schemas.State{
	schemas.StateCreated, schemas.StateWaiting, schemas.StateDispatched, schemas.StateRunning, schemas.StateRetrying,
	schemas.StateSucceeded, schemas.StateFailed, schemas.StateSkipped, schemas.StateCancelled, schemas.StateShadow,
}

// InstanceSummary sums up the instances f selects, those the history
// mover moved out of the hot table included. It reads the window by the
// indexes on fired_at (the history's partitions by their range), in two
// aggregate queries over one snapshot, so that the counts and the run
// times agree.
func (s *Store) InstanceSummary(ctx context.Context, f SummaryFilter) (schemas.Summary, error) {
	sum, err := newSumming(f)
	if err != nil {
		return schemas.Summary{}, err
	}
	out := &sum.out
	args := []any{f.Since, f.Until, sum.step.Microseconds(), f.Task}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := sum.countStates(ctx, tx, args); err != nil {
			return err
		}
		return sum.runTimes(ctx, tx, args)
	})
	if err != nil {
		return schemas.Summary{}, fmt.Errorf("sum up instances fired in [%s, %s): %w", out.Since.Format(time.RFC3339), out.Until.Format(time.RFC3339), err)
	}
	if ended := out.States[schemas.StateSucceeded] + out.States[schemas.StateFailed]; ended > 0 {
		rate := float64(out.States[schemas.StateSucceeded]) / float64(ended)
		out.SuccessRate = &rate
	}
	if f.Step > 0 {
		out.StepSeconds = sum.step.Seconds()
		out.Series = sum.buckets
	}
	return *out, nil
}

// summing is one [Store.InstanceSummary] under way: the summary, its
// buckets of width step from since, and the window's start.
type summing struct {
	out     schemas.Summary
	buckets []schemas.SummaryBucket
	since   time.Time
	step    time.Duration
}

// newSumming checks f's window and step and readies its summary, every
// state counted 0, and its buckets.
func newSumming(f SummaryFilter) (*summing, error) {
	if f.Since.IsZero() || f.Until.IsZero() || !f.Since.Before(f.Until) {
		return nil, fmt.Errorf("sum up instances: the window [%v, %v) is empty or unbounded", f.Since, f.Until)
	}
	step := f.Step
	if step <= 0 {
		step = f.Until.Sub(f.Since)
	}
	n := int((f.Until.Sub(f.Since) + step - 1) / step)
	if n > MaxSummaryBuckets {
		return nil, fmt.Errorf("sum up instances: a step of %v cuts the window into %d buckets, more than %d", step, n, MaxSummaryBuckets)
	}
	out := schemas.Summary{Task: f.Task, Since: f.Since.UTC(), Until: f.Until.UTC(), States: make(map[schemas.State]int64, len(summaryStates))}
	for _, st := range summaryStates {
		out.States[st] = 0
	}
	buckets := make([]schemas.SummaryBucket, n)
	for i := range buckets {
		buckets[i].Start = out.Since.Add(time.Duration(i) * step)
	}
	return &summing{out: out, buckets: buckets, since: f.Since, step: step}, nil
}

// bucketOf is the bucket that starts at start.
func (m *summing) bucketOf(start time.Time) (*schemas.SummaryBucket, error) {
	i := int(start.Sub(m.since) / m.step)
	if i < 0 || i >= len(m.buckets) {
		return nil, fmt.Errorf("bucket %v is outside the window", start)
	}
	return &m.buckets[i], nil
}

// countStates counts the instances of the window by bucket and state.
func (m *summing) countStates(ctx context.Context, tx pgx.Tx, args []any) error {
	rows, err := tx.Query(ctx, `SELECT `+summaryBucket+`, state, count(*) FROM `+summaryEvery+` GROUP BY 1, 2`, args...)
	if err != nil {
		return err
	}
	var (
		start time.Time
		state schemas.State
		count int64
	)
	_, err = pgx.ForEachRow(rows, []any{&start, &state, &count}, func() error {
		b, err := m.bucketOf(start)
		if err != nil {
			return err
		}
		m.out.Total += count
		m.out.States[state] += count
		b.Total += count
		switch state {
		case schemas.StateSucceeded:
			b.Succeeded += count
		case schemas.StateFailed:
			b.Failed += count
		}
		return nil
	})
	return err
}

// runTimes reads the run times of the window's instances that ran, by
// bucket and in all.
func (m *summing) runTimes(ctx context.Context, tx pgx.Tx, args []any) error {
	// ROLLUP adds the row of the whole window, whose bucket is NULL.
	rows, err := tx.Query(ctx, `
			SELECT b, count(*),
				percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.95) WITHIN GROUP (ORDER BY ms),
				percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms)
			FROM (
				SELECT `+summaryBucket+` AS b, extract(epoch FROM finished_at - started_at)::float8 * 1000 AS ms
				FROM `+summaryEvery+` WHERE started_at IS NOT NULL AND finished_at IS NOT NULL
			) t
			GROUP BY ROLLUP (b)`, args...)
	if err != nil {
		return err
	}
	var (
		at *time.Time
		rt schemas.RunTimes
	)
	_, err = pgx.ForEachRow(rows, []any{&at, &rt.Count, &rt.P50, &rt.P95, &rt.P99, &rt.Max}, func() error {
		rt := schemas.RunTimes{Count: rt.Count, P50: copyOf(rt.P50), P95: copyOf(rt.P95), P99: copyOf(rt.P99), Max: copyOf(rt.Max)}
		if at == nil {
			m.out.RunTime = rt
			return nil
		}
		b, err := m.bucketOf(*at)
		if err != nil {
			return err
		}
		b.RunTime = rt
		return nil
	})
	return err
}

// summaryWindow selects the instances [Store.InstanceSummary] sums up:
// $1 since, $2 until, $3 step in microseconds, $4 a task or empty. Every
// task's is the fleet's: the rehearsals' tasks are left out.
const summaryWindow = `fired_at >= $1 AND fired_at < $2 AND (($4 = '' AND task NOT IN ` + rehearsalTasks + `) OR task = $4)`

// summaryEvery is the instances in the hot table and those moved out of it
// (the history and the archive), each once: a moved instance stays in
// the hot table until the mover's second step deletes it there.
const summaryEvery = `(SELECT task, state, fired_at, started_at, finished_at FROM instances WHERE ` + summaryWindow + `
		UNION ALL
		SELECT task, state, fired_at, started_at, finished_at FROM archived_instances h WHERE ` + summaryWindow + `
			AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = h.id)) i`

// summaryBucket is the start of an instance's bucket.
const summaryBucket = `date_bin($3::bigint * interval '1 microsecond', fired_at, $1)`

// copyOf returns a pointer to a copy of *p, or nil: the scan of the next
// row may write where p points.
func copyOf(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
