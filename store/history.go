package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Instance history: the hot tables (instances, instance_transitions,
// instance_events) keep the live instances and the recently ended ones;
// [Store.MoveHistory] moves older ended instances into instance_history and
// instance_transition_history, partitioned by range of fired_at, and
// [Store.ExpireHistory] drops or archives what outlived its retention. See
// docs/architecture.md, "Instance history", for why the hot path never
// touches a partition and how a firing stays deduplicated across the move.

// HistoryPeriod is the span of one history partition.
type HistoryPeriod string

// The history partition periods. Month is the default.
const (
	HistoryMonth HistoryPeriod = "month"
	HistoryWeek  HistoryPeriod = "week"
	HistoryDay   HistoryPeriod = "day"
)

// ParseHistoryPeriod returns the period named s; empty is [HistoryMonth].
func ParseHistoryPeriod(s string) (HistoryPeriod, error) {
	switch p := HistoryPeriod(s); p {
	case "":
		return HistoryMonth, nil
	case HistoryMonth, HistoryWeek, HistoryDay:
		return p, nil
	}
	return "", fmt.Errorf("history partition period %q: want month, week or day", s)
}

// start returns the start, in UTC, of the period that holds t.
func (p HistoryPeriod) start(t time.Time) time.Time {
	t = t.UTC()
	switch p {
	case HistoryDay:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	case HistoryWeek:
		d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7)) // weeks start on Monday
	}
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// next returns the start of the period after the one that starts at start.
func (p HistoryPeriod) next(start time.Time) time.Time {
	switch p {
	case HistoryDay:
		return start.AddDate(0, 0, 1)
	case HistoryWeek:
		return start.AddDate(0, 0, 7)
	}
	return start.AddDate(0, 1, 0)
}

// Later returns the start of the n-th period after the one that holds t.
func (p HistoryPeriod) Later(t time.Time, n int) time.Time {
	at := p.start(t)
	for range n {
		at = p.next(at)
	}
	return at
}

// historyTables are the partitioned history tables; a partition of each
// covers the same range, so that retention drops an instance with its
// transitions.
var historyTables = []string{"instance_history", "instance_transition_history"}

// HistoryPartition is one range of instance history: [From, To) of fired_at.
type HistoryPartition struct {
	// Name is the partition's suffix: instance_history_<Name> and
	// instance_transition_history_<Name>.
	Name     string
	From, To time.Time
}

// execQuerier runs statements and queries: a pool or a transaction.
type execQuerier interface {
	querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var boundRE = regexp.MustCompile(`FROM \('([^']+)'\) TO \('([^']+)'\)`)

// HistoryPartitions returns the partitions of instance_history, oldest first.
func (s *Store) HistoryPartitions(ctx context.Context) ([]HistoryPartition, error) {
	return historyPartitions(ctx, s.pool)
}

func historyPartitions(ctx context.Context, q execQuerier) ([]HistoryPartition, error) {
	// The bounds are printed in the session's time zone; UTC makes them parse alike.
	rows, err := q.Query(ctx, `
		SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'instance_history'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("list history partitions: %w", err)
	}
	var out []HistoryPartition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list history partitions: %w", err)
		}
		m := boundRE.FindStringSubmatch(bound)
		if m == nil {
			rows.Close()
			return nil, fmt.Errorf("list history partitions: partition %s has bounds %q, not FROM … TO …", name, bound)
		}
		p := HistoryPartition{Name: strings.TrimPrefix(name, "instance_history_")}
		for i, dst := range []*time.Time{&p.From, &p.To} {
			t, err := time.Parse("2006-01-02 15:04:05-07", m[i+1])
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("list history partitions: bound of partition %s: %w", name, err)
			}
			*dst = t.UTC()
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list history partitions: %w", err)
	}
	slices.SortFunc(out, func(a, b HistoryPartition) int { return a.From.Compare(b.From) })
	return out, nil
}

// EnsureHistoryPartitions creates the history partitions, of period p,
// that [from, to] needs and lacks, and returns those it created. A range
// that an existing partition covers (one of another period, say) is left
// to it: a new partition only fills the gaps between the existing ones.
// Only one session should call it at a time (the leading dispatcher's
// maintenance loop); two racing ones may see an error, never a wrong
// partition.
func (s *Store) EnsureHistoryPartitions(ctx context.Context, p HistoryPeriod, from, to time.Time) ([]HistoryPartition, error) {
	return ensureHistoryPartitions(ctx, s.pool, p, from, to)
}

func ensureHistoryPartitions(ctx context.Context, q execQuerier, p HistoryPeriod, from, to time.Time) ([]HistoryPartition, error) {
	existing, err := historyPartitions(ctx, q)
	if err != nil {
		return nil, err
	}
	var made []HistoryPartition
	for at := p.start(from); !at.After(to); {
		// The partition that holds at, if any, takes it to its end.
		if i := slices.IndexFunc(existing, func(e HistoryPartition) bool { return !at.Before(e.From) && at.Before(e.To) }); i >= 0 {
			at = existing[i].To
			continue
		}
		end := p.next(p.start(at))
		for _, e := range existing {
			if e.From.After(at) && e.From.Before(end) {
				end = e.From
			}
		}
		part := HistoryPartition{Name: at.Format("20060102") + "_" + end.Format("20060102"), From: at, To: end}
		for _, table := range historyTables {
			_, err := q.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s_%[2]s PARTITION OF %[1]s
				FOR VALUES FROM ('%[3]s') TO ('%[4]s')`, table, part.Name,
				at.Format(time.RFC3339), end.Format(time.RFC3339)))
			if err != nil {
				return made, fmt.Errorf("create history partition %s: %w", part.Name, err)
			}
		}
		made = append(made, part)
		existing = append(existing, part)
		at = end
	}
	return made, nil
}

// tableColumns returns the columns of table, in their order.
func tableColumns(ctx context.Context, q querier, table string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	return cols, nil
}

// MoveResult is what one [Store.MoveHistory] did.
type MoveResult struct {
	// Copied is how many instances were copied into the history this time.
	Copied int
	// Moved is how many copied instances left the hot tables: this call's
	// when it copied a whole Limit (another call follows) and was not a
	// Sweep, else every copied one, of this call or an earlier one.
	Moved int
	// Waiting is how many of those copied instances are still in the hot
	// tables: a transaction older than the copy was still running.
	Waiting int
}

// MoveOptions bounds one [Store.MoveHistory].
type MoveOptions struct {
	// EndedBefore selects the instances to move: those that ended (and
	// last changed) before it, with every child of theirs, no live instance
	// in their run, and every transition relayed to AX_AUDIT.
	EndedBefore time.Time
	// Limit is the most families (an instance and its shards) copied; 0 means 1000.
	Limit int
	// Period is the span of the partitions made for them; empty means month.
	Period HistoryPeriod
	// Wait is how long to wait for the transactions older than the copy
	// to end before the copies leave the hot tables; 0 means 10 s. What
	// has to wait stays for a later call.
	Wait time.Duration
	// Sweep makes a call that copies a whole Limit delete every copy still
	// in the hot tables, not only its own, as a call that copies fewer
	// does. A pass's first call sets it, so that what an older snapshot
	// held up leaves by the next pass even if a pass ends on its time
	// budget, not on an empty backlog.
	Sweep bool
}

// ErrNotLeader is returned, wrapped, when a session lock such as the
// history's ([Store.AcquireHistory]) is held by another session.
var ErrNotLeader = errors.New("held by another session")

// MoveHistory moves ended instances out of the hot tables into the
// partitioned history, in two steps, so that a firing repeated at any
// moment still finds its instance's (task, event_id):
//
//  1. One transaction copies each chosen family — the instance, its
//     shards, their transitions and events — into the history and its key
//     into instance_history_keys, which the dispatcher's insert checks.
//  2. Once every transaction whose snapshot predates that commit has ended
//     (pg_stat_activity's backend_xmin), another transaction locks the
//     copied instances in id order, as a report does, and deletes them from
//     the hot tables. An insert that missed the key in its snapshot still
//     met the hot row: until step 2 there is one, and step 2 waits for it.
//
// A family is moved only when every transition of it is on AX_AUDIT (the
// relay's cursor): the audit stream stays the permanent record.
func (s *Store) MoveHistory(ctx context.Context, opts MoveOptions) (MoveResult, error) {
	var res MoveResult
	opts = opts.withDefaults()
	cols, err := tableColumns(ctx, s.pool, "instances")
	if err != nil {
		return res, fmt.Errorf("move history: %w", err)
	}
	tcols, err := tableColumns(ctx, s.pool, "instance_transitions")
	if err != nil {
		return res, fmt.Errorf("move history: %w", err)
	}
	done, err := s.relayDone(ctx)
	if err != nil {
		return res, fmt.Errorf("move history: %w", err)
	}
	ids, lo, hi, err := s.chooseFamilies(ctx, opts, done)
	if err != nil {
		return res, fmt.Errorf("move history: %w", err)
	}
	if len(ids) > 0 {
		if _, err := ensureHistoryPartitions(ctx, s.pool, opts.Period, *lo, *hi); err != nil {
			return res, fmt.Errorf("move history: %w", err)
		}
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			ids, err = copyFamilies(ctx, tx, cols, tcols, ids)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("move history: copy %d instances: %w", len(ids), err)
		}
		res.Copied = len(ids)
	}
	// A call that copied a whole Limit is followed by another: it deletes
	// its own copies. One that copied fewer, a pass's last, or a Sweep
	// looks for every copy still in the hot tables (those an older
	// transaction held up, or a crash left): a pass costs in proportion to
	// what it moves, not to the backlog once a call.
	only := ids
	if len(ids) < opts.Limit || opts.Sweep {
		only = nil
	}
	moved, waiting, err := s.finishMoves(ctx, opts, only)
	res.Moved, res.Waiting = moved, waiting
	if err != nil {
		return res, fmt.Errorf("move history: %w", err)
	}
	return res, nil
}

// withDefaults is o with its zero fields set to their defaults.
func (o MoveOptions) withDefaults() MoveOptions {
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	if o.Period == "" {
		o.Period = HistoryMonth
	}
	if o.Wait <= 0 {
		o.Wait = 10 * time.Second
	}
	return o
}

// relayDone is the relay's cursor: the snapshot whose transactions'
// transitions are on AX_AUDIT; noneVisible before the relay's first.
func (s *Store) relayDone(ctx context.Context) (string, error) {
	var done string
	err := s.pool.QueryRow(ctx, `SELECT done::text FROM relay_cursor WHERE name = $1`, relayName).Scan(&done)
	if errors.Is(err, pgx.ErrNoRows) {
		return noneVisible, nil
	} else if err != nil {
		return "", fmt.Errorf("read the relay cursor: %w", err)
	}
	return done, nil
}

// chooseFamilies returns the ids of the families to copy, in id order,
// and the span of their fired_at.
func (s *Store) chooseFamilies(ctx context.Context, opts MoveOptions, done string) (ids []int64, lo, hi *time.Time, err error) {
	// The fired_at index finds the old instances first: one ended before
	// the cutoff was fired before it.
	err = s.pool.QueryRow(ctx, chooseFamiliesSQL, opts.EndedBefore, opts.Limit, done).Scan(&ids, &lo, &hi)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("choose instances: %w", err)
	}
	return ids, lo, hi, nil
}

// chooseFamiliesSQL is the statement of chooseFamilies: at most $2 ended
// families, ended and unchanged before $1, with no live instance in their
// run, every transition visible in the relay's snapshot $3, and no key in
// the history yet. The candidates come oldest first from the fired_at
// index, and the scan stops at the $2nd that passes: the checks of each
// are one row of a LATERAL subquery (OFFSET 0 keeps it whole), the key's
// first (a copy a pass has not deleted yet fails it at one look-up). As
// anti-joins in the WHERE, the planner ran them over every old instance
// and sorted what was left (it misjudges how many keys the history holds):
// each call read the whole backlog, and a pass cost the backlog squared.
const chooseFamiliesSQL = `
WITH roots AS (
	SELECT r.id, r.fired_at FROM instances r
	CROSS JOIN LATERAL (SELECT
		NOT EXISTS (SELECT 1 FROM instance_history_keys k WHERE k.task = r.task AND k.event_id = r.event_id)
		AND NOT EXISTS (SELECT 1 FROM instances c WHERE c.parent_id = r.id
			AND (c.state NOT IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'SHADOW') OR c.updated_at >= $1))
		AND NOT EXISTS (SELECT 1 FROM instances j WHERE j.run_id = r.run_id
			AND j.state NOT IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'SHADOW'))
		AND NOT EXISTS (SELECT 1 FROM instance_transitions t WHERE t.instance_id = r.id
			AND NOT pg_visible_in_snapshot(t.xid, $3::pg_snapshot))
		AND NOT EXISTS (SELECT 1 FROM instances c JOIN instance_transitions t ON t.instance_id = c.id
			WHERE c.parent_id = r.id AND NOT pg_visible_in_snapshot(t.xid, $3::pg_snapshot))
		AS movable OFFSET 0) m
	WHERE r.fired_at < $1 AND r.updated_at < $1 AND r.parent_id IS NULL
		AND r.state IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED', 'SHADOW') AND m.movable
	ORDER BY r.fired_at LIMIT $2
), fam AS (
	SELECT id, fired_at FROM roots
	UNION ALL
	SELECT c.id, c.fired_at FROM instances c JOIN roots ON c.parent_id = roots.id
)
SELECT COALESCE(array_agg(id ORDER BY id), '{}'), min(fired_at), max(fired_at) FROM fam`

// copyFamilies copies the instances ids into the history in tx, and
// returns the ids copied: those whose key was not there yet.
func copyFamilies(ctx context.Context, tx pgx.Tx, cols, tcols []string, ids []int64) ([]int64, error) {
	// The keys first: a key already there (another mover) leaves its
	// instance out.
	rows, err := tx.Query(ctx, `
				INSERT INTO instance_history_keys (task, event_id, id, fired_at)
				SELECT task, event_id, id, fired_at FROM instances WHERE id = ANY($1) ORDER BY id
				ON CONFLICT (task, event_id) DO NOTHING RETURNING id`, ids)
	if err != nil {
		return ids, fmt.Errorf("keys: %w", err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return ids, fmt.Errorf("keys: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO instance_history (`+strings.Join(cols, ", ")+`, events)
				SELECT `+prefixed("i", strings.Join(cols, ","))+`, `+eventsJSON+` FROM instances i WHERE i.id = ANY($1)`, ids); err != nil {
		return ids, fmt.Errorf("instances: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO instance_transition_history (`+strings.Join(tcols, ", ")+`, fired_at)
				SELECT `+prefixed("t", strings.Join(tcols, ","))+`, i.fired_at FROM instance_transitions t JOIN instances i ON i.id = t.instance_id
				WHERE i.id = ANY($1)`, ids); err != nil {
		return ids, fmt.Errorf("transitions: %w", err)
	}
	return ids, nil
}

// eventsJSON is the instance_events of instance i as instance_history's
// events column holds them.
const eventsJSON = `COALESCE((SELECT jsonb_agg(jsonb_build_object('attempt', e.attempt, 'kind', e.kind,
	'operator', e.operator, 'reason', e.reason, 'at', e.at) ORDER BY e.id)
	FROM instance_events e WHERE e.instance_id = i.id), '[]')`

// finishMoves deletes from the hot tables the instances whose copy is in
// the history — of only, or every one when only is nil — once no
// transaction older than the copies runs. It returns how many left and how
// many still wait.
func (s *Store) finishMoves(ctx context.Context, opts MoveOptions, only []int64) (moved, waiting int, err error) {
	pending := len(only)
	if only == nil {
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+copiedHot, opts.EndedBefore).Scan(&pending); err != nil {
			return 0, 0, fmt.Errorf("count copied instances: %w", err)
		}
	}
	if pending == 0 {
		return 0, 0, nil
	}
	// Every copy committed before this snapshot; a transaction that may
	// not see one holds a snapshot whose xmin precedes its xmax.
	var horizon string
	if err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::xid::text`).Scan(&horizon); err != nil {
		return 0, pending, fmt.Errorf("read the snapshot horizon: %w", err)
	}
	ready, err := s.olderSnapshotsEnded(ctx, horizon, opts.Wait)
	if err != nil || !ready {
		return 0, pending, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		moved, waiting, err = deleteCopied(ctx, tx, opts.EndedBefore, only)
		return err
	})
	if err != nil {
		return 0, pending, fmt.Errorf("delete copied instances: %w", err)
	}
	return moved, waiting, nil
}

// olderSnapshotsEnded waits up to wait for the transactions of this
// database whose snapshot precedes horizon to end, and reports whether
// they did.
func (s *Store) olderSnapshotsEnded(ctx context.Context, horizon string, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		var older int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND datname = current_database()
				AND backend_xmin IS NOT NULL AND age(backend_xmin) > age($1::text::xid)`,
			horizon).Scan(&older); err != nil {
			return false, fmt.Errorf("look for older snapshots: %w", err)
		}
		if older == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// copiedHot is the FROM and WHERE of the instances fired before $1 whose
// copy is in the history: each is looked up in instance_history_keys by
// its primary key (OFFSET 0 keeps the LATERAL from becoming a join, which
// the planner hashes over every key of the history, seconds with 10 M,
// for a handful of hot rows).
const copiedHot = `instances i CROSS JOIN LATERAL (SELECT 1 FROM instance_history_keys k
	WHERE k.task = i.task AND k.event_id = i.event_id AND k.id = i.id OFFSET 0) k
	WHERE i.fired_at < $1`

// deleteCopied deletes in tx the copied instances of families wholly in
// the history, fired before endedBefore (and among only, unless it is
// nil), and returns how many left and how many stay.
func deleteCopied(ctx context.Context, tx pgx.Tx, endedBefore time.Time, only []int64) (moved, waiting int, err error) {
	// In id order, as every batch statement locks (see lockInstances).
	lock, args := `SELECT i.id FROM `+copiedHot+` ORDER BY i.id FOR UPDATE OF i`, []any{endedBefore}
	if only != nil {
		lock, args = `SELECT i.id FROM `+copiedHot+` AND i.id = ANY($2) ORDER BY i.id FOR UPDATE OF i`, append(args, only)
	}
	rows, err := tx.Query(ctx, lock, args...)
	if err != nil {
		return 0, 0, fmt.Errorf("lock: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, 0, fmt.Errorf("lock: %w", err)
	}
	// A family with a transition the copy lacks stays whole: ended
	// instances take none, but what is not in the history must not go.
	rows, err = tx.Query(ctx, `
			SELECT i.id FROM instances i WHERE i.id = ANY($1)
			AND NOT EXISTS (SELECT 1 FROM instances f JOIN instance_transitions t ON t.instance_id = f.id
				WHERE f.id = ANY($1) AND COALESCE(f.parent_id, f.id) = COALESCE(i.parent_id, i.id)
				AND NOT EXISTS (SELECT 1 FROM instance_transition_history h WHERE h.id = t.id AND h.fired_at = f.fired_at))`, ids)
	if err != nil {
		return 0, 0, fmt.Errorf("check transitions: %w", err)
	}
	ok, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, 0, fmt.Errorf("check transitions: %w", err)
	}
	// Events recorded since the copy (a stale report) go along.
	for _, stmt := range []string{
		`UPDATE instance_history h SET events = ` + eventsJSON + ` FROM instances i
				WHERE i.id = ANY($1) AND h.id = i.id AND h.fired_at = i.fired_at`,
		`DELETE FROM instance_events WHERE instance_id = ANY($1)`,
		`DELETE FROM instance_transitions WHERE instance_id = ANY($1)`,
		`DELETE FROM instances WHERE id = ANY($1)`,
	} {
		if _, err := tx.Exec(ctx, stmt, ok); err != nil {
			return 0, 0, fmt.Errorf("delete: %w", err)
		}
	}
	return len(ok), len(ids) - len(ok), nil
}
