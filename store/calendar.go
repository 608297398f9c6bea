package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// CalendarWait is a WAITING instance of a task with calendar-aligned
// dependencies (after entries with a window), with its task's definition.
type CalendarWait struct {
	InstanceID int64
	Task       string
	FiredAt    time.Time
	// CreatedAt is when the instance was made: later than FiredAt for a
	// backfilled or late firing.
	CreatedAt  time.Time
	Definition *schemas.Task
	// Reason is the wait reason last recorded ("" before the first).
	Reason string
}

// CalendarWaiting returns the WAITING instances of the tasks whose
// definitions have calendar-aligned dependencies, oldest first, at most
// limit.
func (s *Store) CalendarWaiting(ctx context.Context, limit int) ([]CalendarWait, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.id, i.task, i.fired_at, i.created_at, t.definition, COALESCE(c.reason, '')
		FROM instances i JOIN tasks t ON t.name = i.task
		LEFT JOIN calendar_waits c ON c.instance_id = i.id
		WHERE i.state = 'WAITING' AND jsonb_path_exists(t.definition, '$.after[*].window')
		ORDER BY i.id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("calendar waits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CalendarWait, error) {
		var w CalendarWait
		err := row.Scan(&w.InstanceID, &w.Task, &w.FiredAt, &w.CreatedAt, &w.Definition, &w.Reason)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("calendar waits: %w", err)
	}
	return out, nil
}

// TickStates returns the states of the instances of task whose event ids
// are among ids (a tick's instance, by its identity).
func (s *Store) TickStates(ctx context.Context, task string, ids []string) (map[string]schemas.State, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_id, state FROM instances WHERE task = $1 AND event_id = ANY($2)`, task, ids)
	if err != nil {
		return nil, fmt.Errorf("tick states of %s: %w", task, err)
	}
	out := map[string]schemas.State{}
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		out[id] = schemas.State(st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tick states of %s: %w", task, err)
	}
	return out, nil
}

// SetCalendarReason records why instance id still waits, and how many
// parent ticks it misses.
func (s *Store) SetCalendarReason(ctx context.Context, id int64, task, reason string, missing int) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO calendar_waits (instance_id, task, reason, missing) VALUES ($1, $2, $3, $4)
		ON CONFLICT (instance_id) DO UPDATE SET reason = $3, missing = $4, updated_at = now()
		WHERE calendar_waits.reason <> $3`, id, task, reason, missing)
	if err != nil {
		return fmt.Errorf("record the wait of instance %d: %w", id, err)
	}
	return nil
}

// WaitReasons returns the calendar wait reasons of the instances ids that
// have one.
func (s *Store) WaitReasons(ctx context.Context, ids []int64) (map[int64]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT instance_id, reason FROM calendar_waits WHERE instance_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("wait reasons: %w", err)
	}
	out := map[int64]string{}
	var id int64
	var reason string
	_, err = pgx.ForEachRow(rows, []any{&id, &reason}, func() error {
		out[id] = reason
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait reasons: %w", err)
	}
	return out, nil
}

// ReleaseCalendar moves the WAITING instance id on, its parents in or its
// wait over: to DISPATCHED (returning its attempt to route), or to FAILED
// or SKIPPED, recording reason on the transition.
func (s *Store) ReleaseCalendar(ctx context.Context, id int64, to schemas.State, reason string) ([]Attempt, error) {
	var out []Attempt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
WITH upd AS (
	UPDATE instances SET state = $2, updated_at = now(),
		dispatched_at = CASE WHEN $2 = 'DISPATCHED' THEN clock_timestamp() END,
		finished_at = CASE WHEN $2 <> 'DISPATCHED' THEN now() END,
		error = CASE WHEN $2 = 'FAILED' THEN $3 ELSE error END
	WHERE id = $1 AND state = 'WAITING'
	RETURNING *
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'WAITING', $2, attempt, 'dispatcher', $3 FROM upd
), gone AS (
	DELETE FROM calendar_waits WHERE instance_id = $1
)
SELECT `+attemptColumns("upd")+` FROM upd`, id, string(to), reason)
		if err != nil {
			return err
		}
		out, err = collectAttempts(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release instance %d: %w", id, err)
	}
	return out, nil
}
