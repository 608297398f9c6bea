package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Backfill overlap policies: what a backfill tick does when its turn comes
// while another instance of its task is in flight.
const (
	// OverlapAllow fires the tick anyway (up to MaxRunning backfill ticks
	// in flight).
	OverlapAllow = "allow"
	// OverlapSkip waits: the backfill fires its next tick only once no
	// instance of the task is in flight, so it never overlaps a live run.
	OverlapSkip = "skip"
)

const backfillColumns = `id, task, trigger_index, from_at, to_at, priority, max_running, overlap, rate, state,
	cursor_at, fired, existing, skipped, total, operator, created_at, updated_at`

func scanBackfill(row pgx.CollectableRow) (schemas.Backfill, error) {
	var b schemas.Backfill
	var cursor *time.Time
	err := row.Scan(&b.ID, &b.Task, &b.TriggerIndex, &b.From, &b.To, &b.Priority, &b.MaxRunning, &b.Overlap, &b.Rate,
		&b.State, &cursor, &b.Fired, &b.Existing, &b.Skipped, &b.Total, &b.Operator, &b.CreatedAt, &b.UpdatedAt)
	if cursor != nil {
		b.Cursor = cursor.UTC()
	}
	b.From, b.To = b.From.UTC(), b.To.UTC()
	return b, err
}

// CreateBackfill stores b as a running backfill and audits it (action
// backfill, the range in its details) in the same statement. It returns b
// as stored.
func (s *Store) CreateBackfill(ctx context.Context, b schemas.Backfill) (schemas.Backfill, error) {
	details, _ := json.Marshal(map[string]any{"from": b.From, "to": b.To, "trigger": b.TriggerIndex,
		"priority": b.Priority, "max_running": b.MaxRunning, "overlap": b.Overlap, "total": b.Total})
	rows, err := s.pool.Query(ctx, `
		WITH b AS (
			INSERT INTO backfills (task, trigger_index, from_at, to_at, priority, max_running, overlap, rate, total, operator)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING `+backfillColumns+`
		), act AS (
			INSERT INTO operator_actions (action, task, operator, reason, details)
			SELECT $11, task, operator, 'backfill ' || id, $12 FROM b
		)
		SELECT `+backfillColumns+` FROM b`,
		b.Task, b.TriggerIndex, b.From, b.To, b.Priority, b.MaxRunning, b.Overlap, b.Rate, b.Total, b.Operator,
		string(schemas.ActionBackfill), details)
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("create backfill of %s: %w", b.Task, err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanBackfill)
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("create backfill of %s: %w", b.Task, err)
	}
	return out, nil
}

// GetBackfill returns the backfill id, or ErrNotFound.
func (s *Store) GetBackfill(ctx context.Context, id int64) (schemas.Backfill, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+backfillColumns+` FROM backfills WHERE id = $1`, id)
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("get backfill %d: %w", id, err)
	}
	b, err := pgx.CollectExactlyOneRow(rows, scanBackfill)
	if errors.Is(err, pgx.ErrNoRows) {
		return schemas.Backfill{}, fmt.Errorf("backfill %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("get backfill %d: %w", id, err)
	}
	return b, nil
}

// ListBackfills returns the backfills of task (every task's when empty),
// newest first, at most limit (100 when limit <= 0).
func (s *Store) ListBackfills(ctx context.Context, task string, limit int) ([]schemas.Backfill, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+backfillColumns+` FROM backfills
		WHERE $1 = '' OR task = $1 ORDER BY id DESC LIMIT $2`, task, limit)
	if err != nil {
		return nil, fmt.Errorf("list backfills: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanBackfill)
	if err != nil {
		return nil, fmt.Errorf("list backfills: %w", err)
	}
	return list, nil
}

// ErrBackfillState is returned by [Store.SetBackfillState] for a change
// the backfill's state does not allow (resuming a running one, pausing a
// cancelled one).
var ErrBackfillState = errors.New("backfill state does not allow it")

// SetBackfillState moves backfill id to state as operator: paused from
// running, running from paused, cancelled from running or paused. The
// change is audited in the same statement. It returns the backfill, or
// ErrNotFound, or ErrBackfillState (wrapped, with the backfill's state).
func (s *Store) SetBackfillState(ctx context.Context, id int64, to schemas.BackfillState, operator string) (schemas.Backfill, error) {
	var from []string
	var action schemas.OperatorAction
	switch to {
	case schemas.BackfillPaused:
		from, action = []string{string(schemas.BackfillRunning)}, schemas.ActionBackfillPause
	case schemas.BackfillRunning:
		from, action = []string{string(schemas.BackfillPaused)}, schemas.ActionBackfillResume
	case schemas.BackfillCancelled:
		from, action = []string{string(schemas.BackfillRunning), string(schemas.BackfillPaused)}, schemas.ActionBackfillCancel
	default:
		return schemas.Backfill{}, fmt.Errorf("set backfill %d %s: %w", id, to, ErrBackfillState)
	}
	rows, err := s.pool.Query(ctx, `
		WITH upd AS (
			UPDATE backfills SET state = $2, updated_at = now() WHERE id = $1 AND state = ANY($3)
			RETURNING `+backfillColumns+`
		), act AS (
			INSERT INTO operator_actions (action, task, operator, reason)
			SELECT $4, task, $5, 'backfill ' || id FROM upd
		)
		SELECT `+backfillColumns+` FROM upd`, id, string(to), from, string(action), operator)
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("set backfill %d %s: %w", id, to, err)
	}
	b, err := pgx.CollectExactlyOneRow(rows, scanBackfill)
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := s.GetBackfill(ctx, id)
		if gerr != nil {
			return schemas.Backfill{}, gerr
		}
		return cur, fmt.Errorf("backfill %d is %s: %w", id, cur.State, ErrBackfillState)
	}
	if err != nil {
		return schemas.Backfill{}, fmt.Errorf("set backfill %d %s: %w", id, to, err)
	}
	return b, nil
}

// BackfillProgress fills b.Instances: the instances of the ticks of b's
// range handled so far, by state. The ticks' event ids sort as their
// times (schemas.CronEventID writes RFC 3339 in UTC), so the range is a
// range of event ids in the (task, event_id) index.
func (s *Store) BackfillProgress(ctx context.Context, b *schemas.Backfill, lo, hi string) error {
	rows, err := s.pool.Query(ctx, `SELECT state, count(*) FROM instances
		WHERE task = $1 AND event_id >= $2 AND event_id <= $3 GROUP BY state`, b.Task, lo, hi)
	if err != nil {
		return fmt.Errorf("progress of backfill %d: %w", b.ID, err)
	}
	b.Instances = map[schemas.State]int{}
	var st string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		b.Instances[schemas.State(st)] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("progress of backfill %d: %w", b.ID, err)
	}
	return nil
}

// BackfillTx is a running backfill held for one pass of the trigger
// service: its row is locked until [BackfillTx.Save] or [BackfillTx.Close].
type BackfillTx struct {
	tx pgx.Tx
	// Backfill is the backfill as locked.
	Backfill schemas.Backfill
}

// RunningBackfills returns the ids of the running backfills, oldest first.
func (s *Store) RunningBackfills(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM backfills WHERE state = 'running' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list running backfills: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list running backfills: %w", err)
	}
	return ids, nil
}

// HoldBackfill locks backfill id for a pass if it is running and no one
// else holds it; nil (and no error) otherwise. Trigger service replicas
// hold a backfill in turn, so its limits hold across them.
func (s *Store) HoldBackfill(ctx context.Context, id int64) (*BackfillTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold backfill %d: %w", id, err)
	}
	rows, err := tx.Query(ctx, `SELECT `+backfillColumns+` FROM backfills
		WHERE id = $1 AND state = 'running' FOR UPDATE SKIP LOCKED`, id)
	if err == nil {
		var b schemas.Backfill
		b, err = pgx.CollectExactlyOneRow(rows, scanBackfill)
		if err == nil {
			return &BackfillTx{tx: tx, Backfill: b}, nil
		}
	}
	_ = tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return nil, fmt.Errorf("hold backfill %d: %w", id, err)
}

// InFlight counts the instances of task that have not ended: those whose
// event ids lie in [lo, hi] when lo is set, all of them otherwise.
func (b *BackfillTx) InFlight(ctx context.Context, task, lo, hi string) (int, error) {
	var n int
	err := b.tx.QueryRow(ctx, `SELECT count(*) FROM instances
		WHERE task = $1 AND ($2 = '' OR (event_id >= $2 AND event_id <= $3))
		AND state IN ('CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING')`, task, lo, hi).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("in-flight instances of %s: %w", task, err)
	}
	return n, nil
}

// Existing returns which of ids are event ids of instances of task, in
// the hot table or moved to history.
func (b *BackfillTx) Existing(ctx context.Context, task string, ids []string) (map[string]bool, error) {
	rows, err := b.tx.Query(ctx, `
		SELECT event_id FROM instances WHERE task = $1 AND event_id = ANY($2)
		UNION SELECT event_id FROM instance_history_keys WHERE task = $1 AND event_id = ANY($2)`, task, ids)
	if err != nil {
		return nil, fmt.Errorf("existing firings of %s: %w", task, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("existing firings of %s: %w", task, err)
	}
	out := make(map[string]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// Save writes the backfill's cursor, counts and state and releases it.
func (b *BackfillTx) Save(ctx context.Context) error {
	f := b.Backfill
	var cursor *time.Time
	if !f.Cursor.IsZero() {
		cursor = &f.Cursor
	}
	_, err := b.tx.Exec(ctx, `UPDATE backfills SET cursor_at = $2, fired = $3, existing = $4, skipped = $5,
		state = $6, updated_at = now() WHERE id = $1`, f.ID, cursor, f.Fired, f.Existing, f.Skipped, string(f.State))
	if err != nil {
		_ = b.tx.Rollback(ctx)
		return fmt.Errorf("save backfill %d: %w", f.ID, err)
	}
	if err := b.tx.Commit(ctx); err != nil {
		return fmt.Errorf("save backfill %d: %w", f.ID, err)
	}
	return nil
}

// Close releases the backfill without saving (a no-op after Save).
func (b *BackfillTx) Close(ctx context.Context) { _ = b.tx.Rollback(ctx) }
