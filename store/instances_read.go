package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Limits of [InstanceFilter.Limit].
const (
	DefaultInstanceLimit = 50
	MaxInstanceLimit     = 500
)

// InstanceFilter selects instances for [Store.ListInstances]. Zero fields
// select everything.
type InstanceFilter struct {
	// Task keeps the instances of one task.
	Task string
	// State keeps the instances in one state.
	State schemas.State
	// Limit is the most instances returned: 0 means [DefaultInstanceLimit],
	// and more than [MaxInstanceLimit] is cut down to it.
	Limit int
	// BeforeID keeps the instances whose id is lower: pass the last id of a
	// page to read the next one.
	BeforeID int64
	// AfterID keeps the instances whose id is higher: pass the first id of
	// a page to read the page before it. With AfterID the limit keeps the
	// lowest ids above it, so that the page ends where the one after it
	// starts; they are still returned newest first.
	AfterID int64
	// Since and Until keep the instances fired in [Since, Until); zero
	// times do not filter.
	Since, Until time.Time
	// Archived reads the instances that left the hot tables — in the
	// history or the archive — instead of the others.
	Archived bool
}

const instanceColumns = `id, task, task_version, event_id, source, state, attempt, max_attempts,
	priority, pool, worker_id, payload, output, error, fired_at, created_at, started_at, finished_at,
	run_id, parents, progress`

func scanInstance(row pgx.CollectableRow) (schemas.Instance, error) {
	var in schemas.Instance
	var parents, progress []byte
	err := row.Scan(&in.ID, &in.Task, &in.TaskVersion, &in.EventID, &in.Source, &in.State, &in.Attempt,
		&in.MaxAttempts, &in.Priority, &in.Pool, &in.WorkerID, &in.Payload, &in.Output, &in.Error,
		&in.FiredAt, &in.CreatedAt, &in.StartedAt, &in.FinishedAt, &in.RunID, &parents, &progress)
	if err == nil && len(parents) > 0 {
		if err = json.Unmarshal(parents, &in.Parents); err != nil {
			err = fmt.Errorf("decode parents of instance %d: %w", in.ID, err)
		}
	}
	if err == nil && len(progress) > 0 {
		in.Progress = new(schemas.InstanceProgress)
		if err = json.Unmarshal(progress, in.Progress); err != nil {
			err = fmt.Errorf("decode progress of instance %d: %w", in.ID, err)
		}
	}
	return in, err
}

// GetInstance returns the instance id with its transitions, oldest first, or
// an error wrapping [ErrNotFound]. Both are read in one snapshot, so the
// transitions end with the instance's current state. An instance no longer
// in the hot tables is read from the history or the archive, with Archived
// set.
func (s *Store) GetInstance(ctx context.Context, id int64) (schemas.Instance, error) {
	var in schemas.Instance
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		in, err = readInstance(ctx, tx, id, hotInstances)
		if errors.Is(err, ErrNotFound) {
			in, err = readInstance(ctx, tx, id, archivedInstances)
		}
		return err
	})
	if err != nil {
		return schemas.Instance{}, fmt.Errorf("get instance %d: %w", id, err)
	}
	return in, nil
}

// instanceSource names the tables an instance is read from.
type instanceSource struct {
	instances, transitions string
	// events reads the kind, attempt, operator, reason and at of instance $1's events.
	events   string
	archived bool
}

var (
	hotInstances = instanceSource{instances: "instances", transitions: "instance_transition_log",
		events: `SELECT kind, attempt, operator, reason, at FROM instance_events WHERE instance_id = $1 ORDER BY id`}
	archivedInstances = instanceSource{instances: "archived_instances", transitions: "archived_transitions",
		events: `SELECT e.kind, e.attempt, e.operator, e.reason, e.at FROM (SELECT events FROM archived_instances
			WHERE id = $1 LIMIT 1) a, jsonb_to_recordset(a.events) AS e(kind text, attempt int, operator text, reason text, at timestamptz)`,
		archived: true}
)

func readInstance(ctx context.Context, tx pgx.Tx, id int64, src instanceSource) (schemas.Instance, error) {
	rows, err := tx.Query(ctx, `SELECT `+instanceColumns+` FROM `+src.instances+` WHERE id = $1 LIMIT 1`, id)
	if err != nil {
		return schemas.Instance{}, err
	}
	in, err := pgx.CollectExactlyOneRow(rows, scanInstance)
	if errors.Is(err, pgx.ErrNoRows) {
		return in, fmt.Errorf("instance %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return in, err
	}
	in.Archived = src.archived
	rows, err = tx.Query(ctx, `
		SELECT id, instance_id, task, COALESCE(from_state, ''), to_state, attempt, operator, reason, at
		FROM `+src.transitions+` WHERE instance_id = $1 ORDER BY id`, id)
	if err != nil {
		return in, err
	}
	in.Transitions, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (schemas.Transition, error) {
		var t schemas.Transition
		err := row.Scan(&t.ID, &t.InstanceID, &t.Task, &t.From, &t.To, &t.Attempt, &t.Operator, &t.Reason, &t.At)
		return t, err
	})
	if err != nil {
		return in, err
	}
	rows, err = tx.Query(ctx, src.events, id)
	if err != nil {
		return in, err
	}
	in.Events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (schemas.InstanceEvent, error) {
		var e schemas.InstanceEvent
		err := row.Scan(&e.Kind, &e.Attempt, &e.Operator, &e.Reason, &e.At)
		return e, err
	})
	return in, err
}

// InstanceByEvent returns the instance that the firing eventID of task made,
// without its transitions, or an error wrapping [ErrNotFound] when the
// dispatcher has not created it (yet).
func (s *Store) InstanceByEvent(ctx context.Context, task, eventID string) (schemas.Instance, error) {
	// The hot tables first; then the history, where the instance's key
	// says it went.
	for i, sql := range []string{
		`SELECT ` + instanceColumns + ` FROM instances WHERE task = $1 AND event_id = $2`,
		`SELECT ` + instanceColumns + ` FROM archived_instances
			WHERE id = (SELECT id FROM instance_history_keys WHERE task = $1 AND event_id = $2) LIMIT 1`,
	} {
		rows, err := s.pool.Query(ctx, sql, task, eventID)
		if err != nil {
			return schemas.Instance{}, fmt.Errorf("get instance of task %s event %s: %w", task, eventID, err)
		}
		in, err := pgx.CollectExactlyOneRow(rows, scanInstance)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return schemas.Instance{}, fmt.Errorf("get instance of task %s event %s: %w", task, eventID, err)
		}
		in.Archived = i > 0
		return in, nil
	}
	return schemas.Instance{}, fmt.Errorf("get instance of task %s event %s: instance of task %q event %q: %w",
		task, eventID, task, eventID, ErrNotFound)
}

// ListInstances returns the instances that f selects, newest (highest id)
// first, without their transitions. Page back with [InstanceFilter.BeforeID]
// and forward with [InstanceFilter.AfterID].
func (s *Store) ListInstances(ctx context.Context, f InstanceFilter) ([]schemas.Instance, error) {
	sql, args, order := listInstancesSQL(f)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanInstance)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	for i := range out {
		out[i].Archived = f.Archived
	}
	if order == "ASC" {
		slices.Reverse(out)
	}
	return out, nil
}

// listInstancesSQL is the statement ListInstances runs for f, its
// arguments, and the order it reads ids in.
func listInstancesSQL(f InstanceFilter) (sql string, args []any, order string) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultInstanceLimit
	case limit > MaxInstanceLimit:
		limit = MaxInstanceLimit
	}
	// The WHERE holds only the conditions in use, so that each shape of
	// query gets a plan that uses the indexes.
	var where []string
	cond := func(expr string, arg any) {
		args = append(args, arg)
		where = append(where, fmt.Sprintf(expr, len(args)))
	}
	if f.Task != "" {
		cond("task = $%d", f.Task)
	}
	if f.State != "" {
		cond("state = $%d", string(f.State))
	}
	if !f.Since.IsZero() {
		cond("fired_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		cond("fired_at < $%d", f.Until)
	}
	if f.BeforeID > 0 {
		cond("id < $%d", f.BeforeID)
	}
	order = "DESC"
	if f.AfterID > 0 {
		cond("id > $%d", f.AfterID)
		order = "ASC"
	}
	table := "instances"
	if f.Archived {
		table = "archived_instances"
	}
	sql = `SELECT ` + instanceColumns + ` FROM ` + table
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	sql += fmt.Sprintf(` ORDER BY id %s LIMIT $%d`, order, len(args))
	return sql, args, order
}

// Firing is what fired an instance, as a rerun repeats it.
type Firing struct {
	InstanceID int64
	Task       string
	Payload    json.RawMessage
	// PayloadVersion is the schema_version of the task version the instance
	// ran under: the version its payload was accepted at.
	PayloadVersion int
	// Priority is the instance's priority, with the firing's override.
	Priority schemas.Priority
}

// InstanceFiring returns the firing that made instance id, or an error
// wrapping [ErrNotFound]. An instance in the history or the archive has
// its firing too: a rerun of it is a new instance like any other.
func (s *Store) InstanceFiring(ctx context.Context, id int64) (Firing, error) {
	f := Firing{InstanceID: id}
	err := s.pool.QueryRow(ctx, `
		SELECT i.task, i.payload, i.priority, COALESCE((v.definition->>'schema_version')::int, $2)
		FROM (SELECT task, payload, priority, task_version FROM instances WHERE id = $1
			UNION ALL (SELECT task, payload, priority, task_version FROM archived_instances WHERE id = $1 LIMIT 1)
			LIMIT 1) i
		LEFT JOIN task_versions v ON v.name = i.task AND v.version = i.task_version`, id, schemas.DefaultSchemaVersion).Scan(&f.Task, &f.Payload, &f.Priority, &f.PayloadVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("instance %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Firing{}, fmt.Errorf("get the firing of instance %d: %w", id, err)
	}
	return f, nil
}
