package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// activeStates are the states that hold one of a task's
// max_running_instances: an attempt routed, running, or about to retry.
const activeStates = `('DISPATCHED', 'RUNNING', 'RETRYING')`

// Victim is an instance that a cancel_other firing cancelled: if it was
// running, its worker must be told to stop.
type Victim struct {
	InstanceID int64
	Task       string
	RunID      string
	Attempt    int
	WorkerID   string
	// WasRunning is true when the instance was DISPATCHED or RUNNING.
	WasRunning bool
}

// CreateLimitedInstances creates the instances of a batch of firings of one
// task whose concurrency.max_running_instances is limit (> 0), deciding each
// firing's state by strategy under a lock on the task's row, so that the
// count and the inserts are one atomic step whatever other dispatchers do:
//
//   - serial: DISPATCHED while fewer than limit are active, else WAITING
//     (started in order by [Store.PromoteWaiting] as slots free);
//   - buffer_one: as serial, but at most one WAITING; later ones are SKIPPED;
//   - discard: DISPATCHED while a slot is free, else SKIPPED;
//   - cancel_other: always DISPATCHED; the oldest active instances are
//     CANCELLED so that no more than limit are active (of firings that
//     arrive together, the last ones win and the earlier are created
//     CANCELLED).
//
// Firings given with a state other than DISPATCHED (disabled, malformed…)
// keep it. It returns the attempts to route (as [Store.CreateInstances]) and
// the instances cancel_other cancelled.
func (s *Store) CreateLimitedInstances(ctx context.Context, task string, limit int,
	strategy schemas.BlockingStrategy, in []NewInstance) ([]Attempt, []Victim, error) {
	var (
		attempts []Attempt
		victims  []Victim
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM tasks WHERE name = $1 FOR UPDATE`, task); err != nil {
			return err
		}
		// Counted after the lock, in a statement of its own: its snapshot
		// sees every change the lock's previous holders committed.
		active, waiting, existing, err := countLimited(ctx, tx, task, in)
		if err != nil {
			return err
		}
		decided, cancels := decideLimited(in, existing, limit, strategy, active, waiting)
		if cancels > 0 {
			if victims, err = cancelOldest(ctx, tx, task, cancels); err != nil {
				return err
			}
		}
		attempts, err = createInstances(ctx, tx, decided, false)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create %d instances of %s (max_running_instances %d): %w", len(in), task, limit, err)
	}
	return attempts, victims, nil
}

// countLimited counts task's active and WAITING instances, and names
// those of the event ids of in that already have an instance.
func countLimited(ctx context.Context, tx pgx.Tx, task string, in []NewInstance) (active, waiting int, existing []string, err error) {
	eventIDs := make([]string, len(in))
	for i, x := range in {
		eventIDs[i] = x.EventID
	}
	err = tx.QueryRow(ctx, countLimitedSQL, task, eventIDs).Scan(&active, &waiting, &existing)
	return active, waiting, existing, err
}

// countLimitedSQL is the statement of countLimited.
const countLimitedSQL = `
SELECT count(*) FILTER (WHERE state IN ` + activeStates + `), count(*) FILTER (WHERE state = 'WAITING'),
	COALESCE(array_agg(event_id) FILTER (WHERE event_id = ANY($2)), '{}')
FROM instances WHERE task = $1 AND (state IN ` + activeStates + ` OR state = 'WAITING' OR event_id = ANY($2))`

// decideLimited decides the state of each firing of in by strategy, given
// the active and waiting instances counted and the event ids existing;
// cancels is how many of the oldest active instances cancel_other must
// cancel.
func decideLimited(in []NewInstance, existing []string, limit int, strategy schemas.BlockingStrategy,
	active, waiting int) (decided []NewInstance, cancels int) {
	decided = make([]NewInstance, 0, len(in))
	// cancel_other: of the new firings, the last ones up to the limit
	// run; an earlier one is replaced by a later one at once.
	fresh := 0
	for _, x := range in {
		if !slices.Contains(existing, x.EventID) && x.State == schemas.StateDispatched {
			fresh++
		}
	}
	replaced := max(fresh-limit, 0)
	for _, x := range in {
		if slices.Contains(existing, x.EventID) {
			decided = append(decided, x) // returned as it is, nothing created
			continue
		}
		if x.State == schemas.StateDispatched {
			switch {
			case strategy == schemas.BlockCancelOther && replaced > 0:
				replaced--
				x.State, x.Reason = schemas.StateCancelled, "a newer firing took its place (blocking_strategy cancel_other)"
			case active < limit:
				active++
			case strategy == schemas.BlockCancelOther:
				cancels++
			case strategy == schemas.BlockDiscard:
				x.State, x.Reason = schemas.StateSkipped, fmt.Sprintf(
					"discarded: the task already runs its max_running_instances (%d)", limit)
			case strategy == schemas.BlockBufferOne && waiting >= 1:
				x.State, x.Reason = schemas.StateSkipped, fmt.Sprintf(
					"discarded: the task runs its max_running_instances (%d) and one firing already waits (buffer_one)", limit)
			default:
				x.State = schemas.StateWaiting
				x.Reason = fmt.Sprintf("waiting: the task runs its max_running_instances (%d)", limit)
				waiting++
			}
		}
		decided = append(decided, x)
	}
	return decided, cancels
}

// cancelOldest cancels the n oldest active instances of task, for cancel_other.
func cancelOldest(ctx context.Context, tx pgx.Tx, task string, n int) ([]Victim, error) {
	rows, err := tx.Query(ctx, `
WITH pick AS (
	SELECT id, state AS old_state FROM instances WHERE task = $1 AND state IN `+activeStates+`
	ORDER BY id LIMIT $2 FOR UPDATE
), upd AS (
	UPDATE instances i SET state = 'CANCELLED', finished_at = now(), updated_at = now(),
		error = 'cancelled: a newer firing took its place (blocking_strategy cancel_other)'
	FROM pick WHERE i.id = pick.id
	RETURNING i.id, i.task, i.run_id, i.attempt, i.worker_id, pick.old_state
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, old_state, 'CANCELLED', attempt, 'dispatcher',
		'a newer firing took its place (blocking_strategy cancel_other)'
	FROM upd
)
SELECT id, task, run_id, attempt, worker_id, old_state IN ('DISPATCHED', 'RUNNING') FROM upd`, task, n)
	if err != nil {
		return nil, fmt.Errorf("cancel the oldest runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Victim, error) {
		var v Victim
		err := row.Scan(&v.InstanceID, &v.Task, &v.RunID, &v.Attempt, &v.WorkerID, &v.WasRunning)
		return v, err
	})
}

// withWaiting names those of the tasks $1 that have WAITING instances, in
// name order: a look at the index of the WAITING instances
// (instances_waiting_idx), whatever the task's other instances.
// A task with calendar-aligned dependencies holds its WAITING instances
// for its parents; the dispatcher's calendar loop releases them
// ([Store.ReleaseCalendar]). It runs with the generic plan (genericPlan).
const withWaiting = `SELECT name FROM tasks WHERE name = ANY($1)
	AND NOT jsonb_path_exists(definition, '$.after[*].window')
	AND EXISTS (SELECT 1 FROM instances WHERE task = tasks.name AND state = 'WAITING')
	ORDER BY name`

// PromoteWaiting starts the WAITING instances of tasks for which a slot of
// max_running_instances is free, oldest first (WAITING → DISPATCHED), under
// the lock on each task's row, and returns the attempts to route. Tasks
// without waiting instances cost one look at the index of the WAITING
// instances each, and when none has any, that look is the only statement.
func (s *Store) PromoteWaiting(ctx context.Context, tasks []string) ([]Attempt, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	// Most batches of ends free no slot anyone waits for: one look, outside
	// a transaction, tells, and then counting the tasks' active instances
	// would be all waste.
	var waiting []string
	if err := queriesWith(ctx, s.pool, genericPlan, waitingQuery(tasks, &waiting)); err != nil {
		return nil, fmt.Errorf("start waiting instances of %d tasks: %w", len(tasks), err)
	}
	return s.StartWaiting(ctx, waiting)
}

// waitingQuery returns the look of [Store.PromoteWaiting] at tasks, which
// reads the tasks with WAITING instances into out.
func waitingQuery(tasks []string, out *[]string) statement {
	tasks = slices.Compact(slices.Sorted(slices.Values(tasks)))
	return statement{sql: withWaiting, args: []any{tasks}, read: func(rows pgx.Rows) (err error) {
		*out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}}
}

// StartWaiting is [Store.PromoteWaiting] of tasks a look found WAITING
// instances of ([Store.DueAfterEnds]); none costs nothing.
func (s *Store) StartWaiting(ctx context.Context, tasks []string) ([]Attempt, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	var out []Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = promoteWaiting(ctx, tx, tasks)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start waiting instances of %d tasks: %w", len(tasks), err)
	}
	return out, nil
}

// promoteWaiting is [Store.PromoteWaiting] in tx, once a look outside it
// found WAITING instances.
func promoteWaiting(ctx context.Context, tx pgx.Tx, tasks []string) ([]Attempt, error) {
	// Lock in name order, as every locker does, so two never deadlock;
	// only the tasks that still have WAITING instances are looked at.
	rows, err := tx.Query(ctx, withWaiting+` FOR UPDATE`, tasks)
	if err != nil {
		return nil, err
	}
	waiting, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(waiting) == 0 {
		return nil, err
	}
	var out []Attempt
	err = queryWith(ctx, tx, byKey, func(rows pgx.Rows) (err error) {
		out, err = collectAttempts(rows)
		return err
	}, promoteWaitingSQL, waiting)
	return out, err
}

// promoteWaitingSQL is the statement of promoteWaiting: it starts the
// oldest WAITING instances of the tasks $1 up to each task's free slots.
var promoteWaitingSQL = `
WITH lim AS (
	SELECT name, COALESCE((definition->'concurrency'->>'max_running_instances')::int, 0) AS n
	FROM tasks WHERE name = ANY($1)
), act AS (
	SELECT task, count(*) AS c FROM instances WHERE task = ANY($1) AND state IN ` + activeStates + ` GROUP BY task
), pick AS (
	SELECT w.id FROM lim LEFT JOIN act ON act.task = lim.name
	CROSS JOIN LATERAL (
		SELECT id FROM instances WHERE task = lim.name AND state = 'WAITING'
			-- what waits for named limits is theirs (PromoteLimited)
			AND NOT EXISTS (SELECT 1 FROM instance_limits il WHERE il.instance_id = instances.id)
		ORDER BY id
		LIMIT CASE WHEN lim.n > 0 THEN GREATEST(lim.n - COALESCE(act.c, 0), 0) ELSE NULL END
	) w
), lk AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM ` + lockedInstances("pick") + ` WHERE i.state = 'WAITING'
), upd AS (
	UPDATE instances i SET state = 'DISPATCHED', dispatched_at = clock_timestamp(), updated_at = now()
	FROM lk WHERE i.id = lk.id AND i.state = 'WAITING'
	RETURNING i.*
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'WAITING', 'DISPATCHED', attempt, 'dispatcher', 'a slot of max_running_instances freed'
	FROM upd
)
SELECT ` + attemptColumns("upd") + ` FROM upd ORDER BY id`

// WaitingTasks lists the tasks that have WAITING instances: at start the
// dispatcher promotes what it can of them, in case a slot freed while no
// dispatcher ran.
func (s *Store) WaitingTasks(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT task FROM instances WHERE state = 'WAITING'`)
	if err != nil {
		return nil, fmt.Errorf("list tasks with waiting instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tasks with waiting instances: %w", err)
	}
	return out, nil
}
