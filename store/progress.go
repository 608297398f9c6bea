package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// ProgressOutcome is what became of one progress report handed to
// [Store.ApplyProgress].
type ProgressOutcome struct {
	// Applied is true when the report is now the instance's progress.
	Applied bool
	// Refused is true when the report's attempt is the instance's current
	// one and still DISPATCHED or RUNNING, but the report came from another
	// pool than the instance's or another worker than the attempt's holder
	// (see holderCheck): a forged report, counted and put on the timeline.
	Refused bool
	// Found is false when no instance has the report's id.
	Found bool
	// The instance as it was found.
	State          schemas.State
	CurrentAttempt int
	WorkerID       string
}

// ApplyProgress records a batch of progress reports in one statement: a
// report becomes its instance's progress when the instance is DISPATCHED or
// RUNNING at the report's attempt, in the report's pool and, once a started
// or final report named the attempt's holder, held by the report's worker
// (holderCheck, as for the started and final reports; an attempt the
// executor reports no started report for is DISPATCHED until its final
// report), and the report is newer than the progress stored — a later at, or the
// same at and more done — so that a report delivered late or twice changes
// nothing. It changes nothing else of the instance: no state, no
// updated_at, no transition, nothing audited; the column it writes has no
// index, so the update can stay HOT. Of the reports of one attempt in the
// batch, which must come from one worker (the dispatcher defers the
// others), only the newest is written: one row update per attempt at most.
// Outcomes come one per report, in order.
func (s *Store) ApplyProgress(ctx context.Context, reports []schemas.Report) ([]ProgressOutcome, error) {
	if len(reports) == 0 {
		return nil, nil
	}
	newest, err := newestProgress(reports)
	if err != nil {
		return nil, err
	}
	// The rows to write are locked in id order first, as every batch
	// statement on instances does (see reportRows.record).
	var found map[[2]int64]ProgressOutcome
	if err := queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) (err error) {
		found, err = scanProgressOutcomes(rows, len(newest))
		return err
	}, applyProgressSQL, progressArgs(reports, newest)...); err != nil {
		return nil, fmt.Errorf("apply %d progress reports: %w", len(reports), err)
	}
	out := make([]ProgressOutcome, len(reports))
	for i, r := range reports {
		k := [2]int64{r.InstanceID, int64(r.Attempt)}
		o, ok := found[k]
		if !ok {
			return nil, fmt.Errorf("apply progress: no outcome for instance %d attempt %d", r.InstanceID, r.Attempt)
		}
		// An older report of the attempt in the batch was not written: the
		// newest was, or was refused as it would have been.
		o.Applied = o.Applied && newest[k] == i
		out[i] = o
	}
	return out, nil
}

// newestProgress returns, for each attempt k of reports, the position of
// its newest report; it fails on a report without progress.
func newestProgress(reports []schemas.Report) (map[[2]int64]int, error) {
	newest := make(map[[2]int64]int, len(reports))
	for i, r := range reports {
		if r.Progress == nil {
			return nil, fmt.Errorf("apply progress: the progress report of instance %d attempt %d has no progress", r.InstanceID, r.Attempt)
		}
		k := [2]int64{r.InstanceID, int64(r.Attempt)}
		if j, ok := newest[k]; !ok || newerProgress(r, reports[j]) {
			newest[k] = i
		}
	}
	return newest, nil
}

// progressArgs are the newest reports of each attempt as the columns of
// applyProgressSQL, one array each.
func progressArgs(reports []schemas.Report, newest map[[2]int64]int) []any {
	n := len(newest)
	var (
		ids, dones, totals       = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		attempts                 = make([]int32, 0, n)
		pools, workers, messages = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		grants                   = make([]string, 0, n)
		ats                      = make([]time.Time, 0, n)
	)
	for i, r := range reports {
		if newest[[2]int64{r.InstanceID, int64(r.Attempt)}] != i {
			continue
		}
		ids, attempts, pools, workers = append(ids, r.InstanceID), append(attempts, int32(r.Attempt)), append(pools, r.Pool), append(workers, r.WorkerID)
		grants = append(grants, grantList(r.Handlers))
		dones, totals, messages, ats = append(dones, r.Progress.Done), append(totals, r.Progress.Total), append(messages, r.Progress.Message), append(ats, r.At)
	}
	return []any{ids, attempts, pools, workers, dones, totals, messages, ats, grants}
}

// scanProgressOutcomes reads the rows of applyProgressSQL, n expected,
// into outcomes keyed by instance and attempt, and closes rows.
func scanProgressOutcomes(rows pgx.Rows, n int) (map[[2]int64]ProgressOutcome, error) {
	defer rows.Close()
	found := make(map[[2]int64]ProgressOutcome, n)
	for rows.Next() {
		var id int64
		var attempt int32
		var o ProgressOutcome
		var holder bool
		if err := rows.Scan(&id, &attempt, &o.Applied, &o.Found, &o.State, &o.CurrentAttempt, &o.WorkerID, &holder); err != nil {
			return nil, err
		}
		live := o.State == schemas.StateDispatched || o.State == schemas.StateRunning
		o.Refused = o.Found && !holder && live && o.CurrentAttempt == int(attempt)
		found[[2]int64{id, int64(attempt)}] = o
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return found, nil
}

// applyProgressSQL is the statement of [Store.ApplyProgress]: it writes
// the reports newer than the progress stored whose holder may make them,
// and returns one row per report with the instance as found.
var applyProgressSQL = `
WITH r AS (
	SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::timestamptz[], $9::text[])
	AS t(id, attempt, pool, worker_id, done, total, message, at, handlers)
), live AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM ` + lockedInstances("r") + `
	JOIN r ON r.id = i.id AND r.attempt = i.attempt
	WHERE i.state IN ('DISPATCHED', 'RUNNING') AND ` + holderCheck + `
		AND (i.progress IS NULL OR (i.progress->>'attempt')::int < r.attempt
			OR ((i.progress->>'attempt')::int = r.attempt
				AND ((i.progress->>'at')::timestamptz, (i.progress->>'done')::bigint) < (r.at, r.done)))
), upd AS (
	UPDATE instances i SET progress = jsonb_strip_nulls(jsonb_build_object('attempt', r.attempt, 'done', r.done,
		'total', r.total, 'message', NULLIF(r.message, ''), 'at', r.at))
	FROM r, live WHERE i.id = r.id AND live.id = i.id
	RETURNING i.id
)
SELECT r.id, r.attempt, upd.id IS NOT NULL, i.id IS NOT NULL, COALESCE(i.state, ''), COALESCE(i.attempt, 0),
	COALESCE(i.worker_id, ''), COALESCE(` + holderCheck + `, false)
FROM r LEFT JOIN upd ON upd.id = r.id
LEFT JOIN LATERAL (SELECT * FROM instances WHERE id = r.id OFFSET 0) i ON true -- by the primary key (see lockedInstances)`

// newerProgress reports whether progress report a is newer than b: a later
// at, or the same at and more done.
func newerProgress(a, b schemas.Report) bool {
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Progress.Done > b.Progress.Done
}
