package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// SetTaskShadow puts the task called name in shadow mode (shadow) or takes
// it out, as operator, and returns it. In shadow mode the task is enabled
// and fires on its schedules, and the dispatcher records each firing as a
// SHADOW instance that nothing runs: a migration's rehearsal beside the old
// scheduler (docs/migrate.md). Out of it the task is enabled (the
// cut-over) or disabled as enabled says; entering ignores enabled. Each
// change is audited in the same statement, as shadow_start or shadow_stop
// and, when the enabled flag changes with it, as enable or disable (the
// ledger reads those for the spans a task took no firings). Setting what
// the task has changes nothing and records nothing. An unknown task is an
// error wrapping [ErrNotFound].
func (s *Store) SetTaskShadow(ctx context.Context, name string, shadow, enabled bool, operator string) (TaskRecord, error) {
	if shadow {
		enabled = true
	}
	rows, err := s.pool.Query(ctx, `
		WITH old AS (
			SELECT name AS old_name, shadow AS was_shadow, enabled AS was_enabled
			FROM tasks WHERE name = $1 AND deleted_at IS NULL FOR UPDATE
		), upd AS (
			UPDATE tasks SET shadow = $2, enabled = $3,
				shadow_since = CASE WHEN NOT $2 THEN NULL WHEN was_shadow THEN shadow_since ELSE now() END,
				updated_at = CASE WHEN was_shadow = $2 AND was_enabled = $3 THEN updated_at ELSE now() END
			FROM old WHERE name = old_name
			RETURNING `+taskColumns+`, was_shadow, was_enabled
		), act AS (
			-- The enable before a shadow start, the disable after a
			-- stop: the ledger's spans end and begin where shadow mode does.
			INSERT INTO operator_actions (action, task, operator)
			SELECT a.action, upd.name, $4 FROM upd, LATERAL (VALUES
				(1, CASE WHEN was_enabled <> $3 AND $3 THEN $5 END),
				(2, CASE WHEN was_shadow <> $2 THEN CASE WHEN $2 THEN $6 ELSE $7 END END),
				(3, CASE WHEN was_enabled <> $3 AND NOT $3 THEN $8 END)) AS a(ord, action)
			WHERE a.action IS NOT NULL ORDER BY a.ord
		)
		SELECT `+taskColumns+` FROM upd`,
		name, shadow, enabled, operator, string(schemas.ActionEnable), string(schemas.ActionShadowStart),
		string(schemas.ActionShadowStop), string(schemas.ActionDisable))
	if err != nil {
		return TaskRecord{}, fmt.Errorf("set task %s shadow=%t: %w", name, shadow, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return TaskRecord{}, fmt.Errorf("set task %s shadow=%t: %w", name, shadow, err)
	}
	return rec, nil
}
