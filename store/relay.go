package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// The outbox relay reads instance_transitions and operator_actions and
// publishes every row once, in batches that follow commit order. Rows do not
// become visible in id order: a transaction that took id 10 may commit after
// one that took id 11, so a cursor on ids would skip id 10. Each row carries
// the id of the transaction that wrote it (xid), and the relay's cursor is a
// pair of snapshots: every row visible in Done is published; the batch is
// the rows visible in Current but not in Done, the operator actions and the
// transitions each in id order, merged by the time they were written. A row
// visible in Current
// belongs to a transaction that committed before Current was taken, and so
// did every transaction whose change it follows (an instance's transitions
// are written under its row lock): the records of an instance are published
// in the order of its transitions.

// relayName names the audit relay's row of relay_cursor.
const relayName = "audit"

// relayLockKey is the pg_advisory_lock key the leading audit relay holds
// ("ax_audit" in ASCII).
const relayLockKey int64 = 0x61785f6175646974

// noneVisible is a snapshot in which no transaction is visible: the
// cursor of a relay that has published nothing.
const noneVisible = "1:1:"

// ErrRelayHeld is returned by [Store.AcquireRelay] when another session
// holds the relay's lock: another auditor is leading.
var ErrRelayHeld = errors.New("the audit relay is held by another session")

// RelayCursor is how far the audit relay has published. The zero value
// means nothing; [Relay.Cursor] returns the stored one.
type RelayCursor struct {
	// Done is a snapshot (pg_snapshot text): every outbox row of a
	// transaction visible in it is published.
	Done string
	// Current is the snapshot of the batch in progress, or empty: the
	// batch is the rows visible in Current but not in Done.
	Current string
	// LastActionID and LastTransitionID are the last rows of the batch in
	// progress that are published.
	LastActionID     int64
	LastTransitionID int64
}

func (c RelayCursor) done() string {
	if c.Done == "" {
		return noneVisible
	}
	return c.Done
}

// Relay is the session of the leading audit relay: a connection of its own
// that holds the relay's session-level advisory lock. While the connection
// lives, no other session can hold the lock; when it dies, PostgreSQL
// releases the lock and another auditor may take over. The cursor is written
// on that connection only, so a relay that lost its lock can no longer move
// it. A Relay is not safe for concurrent use.
type Relay struct {
	conn *pgx.Conn
	// read holds a page's transitions as read, before the merge copies
	// them: kept from page to page, so that a burst's full pages do not
	// grow a list of a few hundred bytes a record each time.
	read []schemas.AuditRecord
}

// AcquireRelay opens a connection with the settings of the store's pool and
// takes the relay's lock on it without waiting. It returns an error wrapping
// [ErrRelayHeld] when another session holds the lock. Close the relay to
// release the lock.
func (s *Store) AcquireRelay(ctx context.Context) (*Relay, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	// The relay's pages are read in id order from a cursor, through the
	// primary keys, and stop at the page's last row (see page). A planner
	// that counts the filter on visibility as selective, or the table as
	// small, sorts the whole batch instead for every page: a burst's audit
	// quadratic in its batch. The relay's statements are the only ones on
	// this session, and none needs a sort or a sequential scan. The cost
	// the planner gives a plan it must sort anyway (the page's records in
	// order) is then above jit_above_cost, and compiling it took 70-140 ms
	// a page: the session runs without JIT, which none of its small
	// statements needs.
	cfg.RuntimeParams["enable_sort"] = "off"
	cfg.RuntimeParams["enable_seqscan"] = "off"
	cfg.RuntimeParams["jit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("acquire audit relay: connect: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, relayLockKey).Scan(&ok); err != nil || !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		if err == nil {
			err = ErrRelayHeld
		}
		return nil, fmt.Errorf("acquire audit relay: %w", err)
	}
	return &Relay{conn: conn}, nil
}

// Close releases the relay's lock and closes its connection. The lock is
// released explicitly first: a closed connection's lock is released only when
// the server notices, which a new leader could race.
func (r *Relay) Close(ctx context.Context) error {
	_, unlockErr := r.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, relayLockKey)
	if err := r.conn.Close(ctx); err != nil || unlockErr != nil {
		if err == nil {
			err = unlockErr
		}
		return fmt.Errorf("close audit relay: %w", err)
	}
	return nil
}

// PID returns the process id of the relay's PostgreSQL session.
func (r *Relay) PID() uint32 { return r.conn.PgConn().PID() }

// Cursor returns the stored cursor; the zero cursor when none is stored.
func (r *Relay) Cursor(ctx context.Context) (RelayCursor, error) {
	var c RelayCursor
	err := r.conn.QueryRow(ctx, `
		SELECT done::text, COALESCE(current::text, ''), last_action_id, last_transition_id
		FROM relay_cursor WHERE name = $1`, relayName).Scan(&c.Done, &c.Current, &c.LastActionID, &c.LastTransitionID)
	if errors.Is(err, pgx.ErrNoRows) {
		return RelayCursor{}, nil
	}
	if err != nil {
		return RelayCursor{}, fmt.Errorf("read audit relay cursor: %w", err)
	}
	return c, nil
}

// SaveCursor stores c. Call it once the records before c are on AX_AUDIT.
func (r *Relay) SaveCursor(ctx context.Context, c RelayCursor) error {
	_, err := r.conn.Exec(ctx, `
		INSERT INTO relay_cursor (name, done, current, last_action_id, last_transition_id)
		VALUES ($1, $2::pg_snapshot, NULLIF($3, '')::pg_snapshot, $4, $5)
		ON CONFLICT (name) DO UPDATE SET done = EXCLUDED.done, current = EXCLUDED.current,
			last_action_id = EXCLUDED.last_action_id, last_transition_id = EXCLUDED.last_transition_id,
			updated_at = now()`,
		relayName, c.done(), c.Current, c.LastActionID, c.LastTransitionID)
	if err != nil {
		return fmt.Errorf("save audit relay cursor: %w", err)
	}
	return nil
}

// Next returns up to limit records that come after c, in the order they
// must be published, and the cursor that follows them; no records when
// nothing new has committed. Save the cursor with [Relay.SaveCursor] only
// after the records before it are published, and as often as a new
// leader's skip may be long: a cursor that ends its batch (Current empty:
// the page held fewer than limit records, so none of the batch is left)
// need not be saved at all, for when c's batch is exhausted, Next begins
// the next one, taking a snapshot and storing it as the new batch's
// Current, with c's batch as Done, before it returns the batch's first
// records, so that the batch stays the same rows whoever publishes it.
// Until a write, a new leader finds the records published since on
// AX_AUDIT after the stored cursor and skips them ([Relay.Skip]); a leader
// that goes idle saves the end, so that the stored cursor does not lag
// behind what is published. At a steady trickle of commits every batch is
// one short page: one write a batch instead of three (its begin, its page,
// its end).
func (r *Relay) Next(ctx context.Context, c RelayCursor, limit int) ([]schemas.AuditRecord, RelayCursor, error) {
	c.Done = c.done()
	for {
		if c.Current == "" {
			var snap string
			if err := r.conn.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
				return nil, c, fmt.Errorf("next audit records: take snapshot: %w", err)
			}
			if snap == c.Done {
				return nil, c, nil
			}
			begun := RelayCursor{Done: c.Done, Current: snap}
			if err := r.conn.QueryRow(ctx, batchStarts, begun.Done, begun.Current).Scan(&begun.LastActionID,
				&begun.LastTransitionID); err != nil {
				return nil, c, fmt.Errorf("next audit records: find the batch's first records: %w", err)
			}
			recs, next, err := r.page(ctx, begun, limit)
			if err != nil || len(recs) == 0 {
				return nil, c, err
			}
			if err := r.SaveCursor(ctx, begun); err != nil {
				return nil, c, fmt.Errorf("next audit records: begin batch: %w", err)
			}
			return recs, ended(next, len(recs), limit), nil
		}
		recs, next, err := r.page(ctx, c, limit)
		if err != nil || len(recs) > 0 {
			return recs, ended(next, len(recs), limit), err
		}
		c = RelayCursor{Done: c.Current}
	}
}

// ended returns next, the cursor after a page of n records read with
// limit, as the end of its batch when the page was the batch's last: one
// of fewer than limit records read every record of the batch left (see
// page).
func ended(next RelayCursor, n, limit int) RelayCursor {
	if n < limit {
		return RelayCursor{Done: next.Current}
	}
	return next
}

// inBatch is the condition that a row of an outbox table belongs to the batch
// of snapshots $1 (done) and $2 (current). The xid range lets the index on
// xid find the candidates.
const inBatch = `xid >= pg_snapshot_xmin($1::pg_snapshot) AND xid < pg_snapshot_xmax($2::pg_snapshot)
	AND ` + visibleInBatch

// visibleInBatch is inBatch without the xid range: a condition no index
// answers, so that a scan in id order from a cursor (the primary key's)
// stops at the page's last row instead of reading and sorting the whole
// batch for every page.
const visibleInBatch = `NOT pg_visible_in_snapshot(xid, $1::pg_snapshot) AND pg_visible_in_snapshot(xid, $2::pg_snapshot)`

// relayTransitions reads a page of a batch's transitions (see page): those
// of batch $1 (done), $2 (current) after $3, at most $4.
var relayTransitions = `SELECT ` + transitionRecordColumns + ` FROM ` + transitionsOf(`SELECT * FROM instance_transitions
		WHERE id >= $3 AND `+visibleInBatch+` ORDER BY id LIMIT $4 + 1`) + ` WHERE id > $3 ORDER BY id LIMIT $4`

// batchStarts returns where the pages of batch $1 (done), $2 (current)
// start: just before its first operator action and its first transition,
// found once through the indexes on xid (each subquery keeps min from
// walking the primary key from the table's start), so that the pages read
// on in id order (see page) and every row before the start is in an earlier
// batch. A batch without rows of a table starts after that table's last row,
// so that its pages read none. Every row of the batch committed before its
// current snapshot was taken, so a statement run after sees every one.
const batchStarts = `SELECT
	COALESCE((SELECT min(id) - 1 FROM (SELECT id FROM operator_actions WHERE ` + inBatch + ` OFFSET 0) b),
		(SELECT max(id) FROM operator_actions), 0),
	COALESCE((SELECT min(id) - 1 FROM (SELECT id FROM instance_transitions WHERE ` + inBatch + ` OFFSET 0) b),
		(SELECT max(id) FROM instance_transitions), 0)`

// relayActions reads a page of a batch's operator actions (see page): those
// of batch $1 (done), $2 (current) after $3, at most $4.
const relayActions = `SELECT ` + actionRecordColumns + ` FROM operator_actions
	WHERE id > $3 AND ` + visibleInBatch + ` ORDER BY id LIMIT $4`

// page reads up to limit records of c's batch after c: the operator actions
// after LastActionID and the transitions after LastTransitionID, each in id
// order, merged by the time they were written (an action first on a tie).
// The merge looks only at the heads of the two lists, so pages read one
// after another make the same sequence as one long page. Each list is read
// in id order from the cursor, which Next puts just before the batch's first
// row when the batch begins, through the primary key (the relay's session
// plans without sorts: see AcquireRelay): the rows read are the page's and
// those of other batches between them (and, on the batch's last page, after
// them), instead of every row of the batch for every page, sorted.
func (r *Relay) page(ctx context.Context, c RelayCursor, limit int) ([]schemas.AuditRecord, RelayCursor, error) {
	rows, err := r.conn.Query(ctx, relayActions, c.Done, c.Current, c.LastActionID, limit)
	if err != nil {
		return nil, c, fmt.Errorf("next audit records: read operator actions: %w", err)
	}
	acts, err := pgx.CollectRows(rows, newAuditScanner().scan)
	if err != nil {
		return nil, c, fmt.Errorf("next audit records: read operator actions: %w", err)
	}
	// From the row whose first transition is LastTransitionID, which may
	// hold one more; one row more than limit, so that the list holds limit
	// transitions unless the batch has fewer (the merge below takes a short
	// list for the batch's last).
	rows, err = r.conn.Query(ctx, relayTransitions, c.Done, c.Current, c.LastTransitionID, limit)
	if err != nil {
		return nil, c, fmt.Errorf("next audit records: read transitions: %w", err)
	}
	trs, err := pgx.AppendRows(r.read[:0], rows, newAuditScanner().scan)
	if err != nil {
		return nil, c, fmt.Errorf("next audit records: read transitions: %w", err)
	}
	r.read = trs[:0]
	out := make([]schemas.AuditRecord, 0, min(limit, len(acts)+len(trs)))
	for len(out) < limit && (len(acts) > 0 || len(trs) > 0) {
		if len(trs) == 0 || (len(acts) > 0 && !trs[0].At.Before(acts[0].At)) {
			out, acts = append(out, acts[0]), acts[1:]
		} else {
			out, trs = append(out, trs[0]), trs[1:]
		}
	}
	if err := r.describeInstances(ctx, out); err != nil {
		return nil, c, err
	}
	return out, advance(c, out), nil
}

// relayInstances reads what the transitions of a page carry of their
// instances $1 (see describeInstances), each by the primary key (OFFSET 0
// keeps the LATERAL from being flattened into a join that scans
// instances).
const relayInstances = `SELECT i.id, i.traceparent, i.fired_at, i.attempt, i.started_at FROM unnest($1::bigint[]) AS q(id)
	CROSS JOIN LATERAL (SELECT id, traceparent, fired_at, attempt, started_at FROM instances WHERE id = q.id OFFSET 0) i`

// describeInstances sets on the transitions in recs what they carry of
// their instance (schemas.AuditRecord), in one query per page: its
// Traceparent, so that the auditor's latency histograms can link an
// exemplar to the firing's trace, and the FiredAt and StartedAt the
// monitor times them from, so that it reads no instance back. An instance
// moved to the history tables meanwhile gives none of them.
func (r *Relay) describeInstances(ctx context.Context, recs []schemas.AuditRecord) error {
	var ids []int64
	for _, rec := range recs {
		if rec.Kind == schemas.AuditTransition && rec.InstanceID != 0 {
			ids = append(ids, rec.InstanceID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	rows, err := r.conn.Query(ctx, relayInstances, slices.Compact(ids))
	if err != nil {
		return fmt.Errorf("next audit records: read their instances: %w", err)
	}
	type instance struct {
		traceparent string
		firedAt     time.Time
		attempt     int
		startedAt   *time.Time
	}
	found := map[int64]instance{}
	var (
		id int64
		in instance
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &in.traceparent, &in.firedAt, &in.attempt, &in.startedAt}, func() error {
		found[id] = in
		return nil
	}); err != nil {
		return fmt.Errorf("next audit records: read their instances: %w", err)
	}
	for i := range recs {
		rec := &recs[i]
		in, ok := found[rec.InstanceID]
		if rec.Kind != schemas.AuditTransition || !ok {
			continue
		}
		rec.Traceparent = in.traceparent
		if (rec.From == "" && rec.To == schemas.StateCreated) || (rec.To == schemas.StateRunning && rec.Attempt == 1) {
			rec.FiredAt = in.firedAt
		}
		if (rec.To == schemas.StateRunning || rec.From == schemas.StateRunning) && in.attempt == rec.Attempt && in.startedAt != nil {
			rec.StartedAt = *in.startedAt
		}
	}
	return nil
}

// advance returns c moved past recs, records of its batch read after it.
func advance(c RelayCursor, recs []schemas.AuditRecord) RelayCursor {
	for _, rec := range recs {
		kind, id, _ := schemas.ParseAuditID(rec.ID)
		if kind == schemas.AuditAction {
			c.LastActionID = id
		} else {
			c.LastTransitionID = id
		}
	}
	return c
}

// Skip returns the cursor past the record id when that record comes after c
// in c's batch, and c unchanged otherwise (skipped false). A new leader
// calls it with the id of the last record on AX_AUDIT: a relay that stopped
// after publishing and before saving its cursor left those records there.
// The batch fixes the order, so every record of it up to id is published.
func (r *Relay) Skip(ctx context.Context, c RelayCursor, id string) (next RelayCursor, skipped bool, err error) {
	_, next, found, err := r.through(ctx, c, id, false)
	if err != nil || !found {
		return c, false, err
	}
	return next, true, nil
}

// Through returns the records of c's batch after c up to and including the
// record id, in the order they are published, and the cursor past them,
// when that record comes after c in c's batch; else found is false. The
// batch fixes the order, so they are the records a relay read in pages
// from c up to id.
func (r *Relay) Through(ctx context.Context, c RelayCursor, id string) (recs []schemas.AuditRecord, next RelayCursor, found bool, err error) {
	return r.through(ctx, c, id, true)
}

// through is Through, which returns the records only when keep is set.
func (r *Relay) through(ctx context.Context, c RelayCursor, id string, keep bool) (recs []schemas.AuditRecord, next RelayCursor,
	found bool, err error) {
	kind, rowID, ok := schemas.ParseAuditID(id)
	if !ok || c.Current == "" {
		return nil, c, false, nil
	}
	c.Done = c.done()
	table, after, holds := "instance_transitions", c.LastTransitionID, holdsTransition(3)
	if kind == schemas.AuditAction {
		table, after, holds = "operator_actions", c.LastActionID, "id = $3"
	}
	if rowID <= after {
		return nil, c, false, nil
	}
	var in bool
	if err := r.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE `+inBatch+` AND `+holds+`)`,
		c.Done, c.Current, rowID).Scan(&in); err != nil {
		return nil, c, false, fmt.Errorf("audit records through %s: %w", id, err)
	}
	if !in {
		return nil, c, false, nil
	}
	// The record is ahead in the batch: follow the batch's order up to it,
	// a page or many (a leader stores its cursor within a batch only once
	// a while: the relay's SaveInterval).
	for cur := c; ; {
		page, nextCur, err := r.page(ctx, cur, 500)
		if err != nil {
			return nil, c, false, fmt.Errorf("audit records through %s: %w", id, err)
		}
		if len(page) == 0 {
			return nil, c, false, fmt.Errorf("audit records through %s: it is in the batch but not after the cursor", id)
		}
		for k, rec := range page {
			if rec.ID != id {
				continue
			}
			if keep {
				recs = append(recs, page[:k+1]...)
			}
			return recs, advance(cur, page[:k+1]), true, nil
		}
		if keep {
			recs = append(recs, page...)
		}
		cur = nextCur
	}
}
