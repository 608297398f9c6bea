package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ax-scheduler/ax/schemas"
)

// ErrNotFound is returned, wrapped with what was looked for, when a task or
// an instance does not exist. Test for it with errors.Is.
var ErrNotFound = errors.New("not found")

// IsTaskChanged reports whether err is the refusal of a statement that
// creates instances (CreateInstances, CreateLimitedInstances,
// CreateAdmittedInstances) to create one made from a task's record whose
// row has changed since [Store.GetTasks] read it (a NewInstance's TaskStamp
// that is no longer the row's): the statement created nothing, and the
// instances are to be made anew from the task as it is.
func IsTaskChanged(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == taskChangedCode
}

// taskChangedCode is the SQLSTATE of ax_task_changed (migration 00033).
const taskChangedCode = "AXT01"

// TaskRecord is a task definition as the store keeps it.
type TaskRecord struct {
	Name string
	// Version starts at 1 and grows by one with every apply that changes
	// the definition.
	Version int
	// Enabled says whether firings of the task make instances that run.
	Enabled bool
	// Paused says whether the task is paused: like a disabled task its
	// firings make no runs, until it is resumed.
	Paused bool
	// Shadow says whether the task is in shadow mode: its firings are
	// recorded SHADOW and never run (see [Store.SetTaskShadow]);
	// ShadowSince is when it entered it, nil outside it.
	Shadow      bool
	ShadowSince *time.Time
	// Definition is the definition of Version, with its defaults filled in.
	Definition *schemas.Task
	CreatedAt  time.Time
	// UpdatedAt is when the definition or the enabled flag last changed.
	UpdatedAt time.Time
	// Stamp names the version of the task's row that was read (its xmin),
	// set by [Store.GetTasks] only: every change of the row (a definition,
	// a flag, a delete) makes a new one. A NewInstance made from the
	// record carries it as TaskStamp, and CreateInstances refuses to
	// create it once the row has changed (see [IsTaskChanged]).
	Stamp string
}

const taskColumns = `name, version, enabled, paused, definition, created_at, updated_at, shadow, shadow_since`

// ApplyTask stores def (with its defaults filled in) as the definition of the
// task def.TaskName and reports whether that changed anything. A new task
// starts at version 1, enabled; a definition that differs from the stored one
// (compared as JSON values, so key order and spacing do not count) becomes the
// next version; an identical one keeps the stored version and changes nothing.
// Every new version is also kept in task_versions with the operator who
// applied it, and recorded in the audit trail as an apply action with
// details {"version": N}. def must already be valid (see [taskdef.ParseTask]).
// A definition whose after would close a cycle with the stored tasks is
// refused with a *[ChainCycleError], and nothing is stored; applies with
// after are serialised for that check, so two applies cannot close a cycle
// together.
//
// ApplyTask is safe to call concurrently for the same task: the upsert locks
// the row, so two different definitions applied at once become two versions.
func (s *Store) ApplyTask(ctx context.Context, def *schemas.Task, operator string) (TaskRecord, bool, error) {
	if def == nil || def.TaskName == "" {
		return TaskRecord{}, false, errors.New("apply task: the definition has no task_name")
	}
	def = def.WithDefaults()
	data, err := json.Marshal(def)
	if err != nil {
		return TaskRecord{}, false, fmt.Errorf("apply task %s: encode definition: %w", def.TaskName, err)
	}
	var (
		rec     TaskRecord
		changed bool
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := checkChainCycle(ctx, tx, def); err != nil {
			return err
		}
		// The WHERE of DO UPDATE leaves an identical definition alone, and
		// then RETURNING yields no row.
		rows, err := tx.Query(ctx, `
			INSERT INTO tasks (name, version, definition)
			VALUES ($1, 1, $2)
			ON CONFLICT (name) DO UPDATE
			SET version = tasks.version + 1, definition = EXCLUDED.definition, updated_at = now(), deleted_at = NULL
			WHERE tasks.definition IS DISTINCT FROM EXCLUDED.definition OR tasks.deleted_at IS NOT NULL
			RETURNING `+taskColumns, def.TaskName, data)
		if err != nil {
			return err
		}
		recs, err := pgx.CollectRows(rows, scanTask)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			rec, err = getTask(ctx, tx, def.TaskName)
			return err
		}
		rec, changed = recs[0], true
		if err := setTaskParents(ctx, tx, def); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO task_versions (name, version, definition, operator)
			VALUES ($1, $2, $3, $4)`, rec.Name, rec.Version, data, operator); err != nil {
			return err
		}
		_, err = recordAction(ctx, tx, Action{Action: schemas.ActionApply, Task: rec.Name, Operator: operator,
			Details: versionDetails(rec.Version)})
		return err
	})
	if err != nil {
		return TaskRecord{}, false, fmt.Errorf("apply task %s: %w", def.TaskName, err)
	}
	return rec, changed, nil
}

// GetTask returns the task called name, or an error wrapping [ErrNotFound].
func (s *Store) GetTask(ctx context.Context, name string) (TaskRecord, error) {
	rec, err := getTask(ctx, s.pool, name)
	if err != nil {
		return TaskRecord{}, fmt.Errorf("get task %s: %w", name, err)
	}
	return rec, nil
}

// getTask reads one task through q, a pool or a transaction.
func getTask(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, name string) (TaskRecord, error) {
	rows, err := q.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE name = $1 AND deleted_at IS NULL`, name)
	if err != nil {
		return TaskRecord{}, err
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if errors.Is(err, pgx.ErrNoRows) {
		return TaskRecord{}, fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	return rec, err
}

// ListTasks returns every task, ordered by name.
func (s *Store) ListTasks(ctx context.Context) ([]TaskRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE deleted_at IS NULL ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	recs, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return recs, nil
}

// tasksNamed is the statement of [Store.GetTasks], run with the generic
// plan (genericPlan): a lookup by name whatever the names.
const tasksNamed = `SELECT ` + taskColumns + `, xmin::text FROM tasks WHERE name = ANY($1) AND deleted_at IS NULL`

// GetTasks returns the tasks named in names, keyed by name, in one query,
// each with its Stamp. Names that match no task are missing from the map;
// repeated names are fine.
func (s *Store) GetTasks(ctx context.Context, names []string) (map[string]TaskRecord, error) {
	out := make(map[string]TaskRecord, len(names))
	if len(names) == 0 {
		return out, nil
	}
	var recs []TaskRecord
	err := queryWith(ctx, s.pool, genericPlan, func(rows pgx.Rows) (err error) {
		recs, err = pgx.CollectRows(rows, scanStampedTask)
		return err
	}, tasksNamed, names)
	if err != nil {
		return nil, fmt.Errorf("get tasks: %w", err)
	}
	for _, r := range recs {
		out[r.Name] = r
	}
	return out, nil
}

// SetTaskEnabled enables or disables the task called name, as operator, and
// returns it. A change is recorded in the audit trail as an enable or disable
// action, in the same statement. Setting the flag it already has changes
// nothing, not even UpdatedAt, and records nothing. An unknown task is an
// error wrapping [ErrNotFound].
func (s *Store) SetTaskEnabled(ctx context.Context, name string, enabled bool, operator string) (TaskRecord, error) {
	return s.setFlag(ctx, name, "enabled", enabled, schemas.ActionEnable, schemas.ActionDisable, operator)
}

// SetTaskPaused pauses or resumes the task called name, as operator, and
// returns it, as [Store.SetTaskEnabled] does: a change is audited as a pause
// or resume action in the same statement; setting the flag it has is a no-op.
func (s *Store) SetTaskPaused(ctx context.Context, name string, paused bool, operator string) (TaskRecord, error) {
	return s.setFlag(ctx, name, "paused", paused, schemas.ActionPause, schemas.ActionResume, operator)
}

// setFlag sets a boolean column of a task (a constant of this file, never
// input) and records onAction or offAction when it changes.
func (s *Store) setFlag(ctx context.Context, name, column string, value bool, onAction, offAction schemas.OperatorAction,
	operator string) (TaskRecord, error) {
	action := offAction
	if value {
		action = onAction
	}
	rows, err := s.pool.Query(ctx, `
		WITH old AS (
			SELECT name AS old_name, `+column+` AS was FROM tasks WHERE name = $1 AND deleted_at IS NULL FOR UPDATE
		), upd AS (
			UPDATE tasks SET `+column+` = $2, updated_at = CASE WHEN was = $2 THEN updated_at ELSE now() END
			FROM old WHERE name = old_name
			RETURNING `+taskColumns+`, was
		), act AS (
			INSERT INTO operator_actions (action, task, operator) SELECT $3, name, $4 FROM upd WHERE was <> $2
		)
		SELECT `+taskColumns+` FROM upd`,
		name, value, string(action), operator)
	if err != nil {
		return TaskRecord{}, fmt.Errorf("set task %s %s=%t: %w", name, column, value, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return TaskRecord{}, fmt.Errorf("set task %s %s=%t: %w", name, column, value, err)
	}
	return rec, nil
}

// DeleteTask deletes the task called name, as operator, and returns it as it
// was. The row, its versions and its instances stay for the record; the task
// leaves every list, takes no firings, and its running instances finish.
// Applying the name again revives it as a new version. The deletion is
// audited in the same statement. An unknown or already deleted task is an
// error wrapping [ErrNotFound].
func (s *Store) DeleteTask(ctx context.Context, name, operator string) (TaskRecord, error) {
	rows, err := s.pool.Query(ctx, `
		WITH del AS (
			UPDATE tasks SET deleted_at = now(), updated_at = now()
			WHERE name = $1 AND deleted_at IS NULL
			RETURNING `+taskColumns+`
		), act AS (
			INSERT INTO operator_actions (action, task, operator) SELECT $2, name, $3 FROM del
		)
		SELECT * FROM del`, name, string(schemas.ActionDelete), operator)
	if err != nil {
		return TaskRecord{}, fmt.Errorf("delete task %s: %w", name, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanTask)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return TaskRecord{}, fmt.Errorf("delete task %s: %w", name, err)
	}
	return rec, nil
}

func scanTask(row pgx.CollectableRow) (TaskRecord, error) {
	var rec TaskRecord
	err := scanTaskInto(row, &rec)
	return rec, err
}

// scanStampedTask reads the columns of taskColumns and the row's stamp.
func scanStampedTask(row pgx.CollectableRow) (TaskRecord, error) {
	var rec TaskRecord
	err := scanTaskInto(row, &rec, &rec.Stamp)
	return rec, err
}

// scanTaskInto reads the columns of taskColumns into rec, and those after
// them into more.
func scanTaskInto(row pgx.CollectableRow, rec *TaskRecord, more ...any) error {
	var data []byte
	dest := append([]any{&rec.Name, &rec.Version, &rec.Enabled, &rec.Paused, &data, &rec.CreatedAt, &rec.UpdatedAt,
		&rec.Shadow, &rec.ShadowSince}, more...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	rec.Definition = new(schemas.Task)
	if err := json.Unmarshal(data, rec.Definition); err != nil {
		return fmt.Errorf("decode definition of task %s version %d: %w", rec.Name, rec.Version, err)
	}
	return nil
}
