package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// DeadlineRun is a run of a task with a deadline that is not done: not
// SUCCEEDED, SKIPPED or CANCELLED.
type DeadlineRun struct {
	InstanceID int64
	Task       string
	State      schemas.State
	FiredAt    time.Time
	Error      string
	// WaitReason is why it waits for calendar-aligned parents, if it does.
	WaitReason string
	Definition *schemas.Task
}

// UndoneDeadlineRuns returns the runs fired since then of the tasks that
// have a deadline, and that are not done: WAITING, in flight or FAILED.
func (s *Store) UndoneDeadlineRuns(ctx context.Context, since time.Time) ([]DeadlineRun, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.id, i.task, i.state, i.fired_at, i.error, COALESCE(c.reason, ''), t.definition
		FROM tasks t JOIN instances i ON i.task = t.name
		LEFT JOIN calendar_waits c ON c.instance_id = i.id
		WHERE t.definition ? 'deadline' AND i.fired_at >= $1
		AND i.state NOT IN ('SUCCEEDED', 'SKIPPED', 'CANCELLED') AND i.parent_id IS NULL
		ORDER BY i.id`, since)
	if err != nil {
		return nil, fmt.Errorf("undone deadline runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadlineRun, error) {
		var r DeadlineRun
		err := row.Scan(&r.InstanceID, &r.Task, &r.State, &r.FiredAt, &r.Error, &r.WaitReason, &r.Definition)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("undone deadline runs: %w", err)
	}
	return out, nil
}
