package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// acquire takes the relay and closes it when the test ends.
func acquire(t *testing.T, st *store.Store) *store.Relay {
	t.Helper()
	r, err := st.AcquireRelay(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// drain reads every record after c with pages of limit, saving the cursor
// as an auditor whose SaveInterval is shorter than a page does (after each
// page that leaves its batch unfinished, and the end of the last batch once
// nothing is left), and returns their ids in order.
func drain(t *testing.T, r *store.Relay, c store.RelayCursor, limit int) ([]string, store.RelayCursor) {
	t.Helper()
	var ids []string
	for {
		recs, next, err := r.Next(t.Context(), c, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > limit {
			t.Fatalf("Next returned %d records, limit %d", len(recs), limit)
		}
		if len(recs) == 0 {
			if err := r.SaveCursor(t.Context(), next); err != nil {
				t.Fatal(err)
			}
			return ids, next
		}
		if (len(recs) < limit) != (next.Current == "") {
			t.Fatalf("a page of %d records (limit %d) returned the cursor %+v: want the batch's end after a short page only", len(recs), limit, next)
		}
		ids = append(ids, auditIDs(recs)...)
		if next.Current != "" {
			if err := r.SaveCursor(t.Context(), next); err != nil {
				t.Fatal(err)
			}
		}
		c = next
	}
}

// outboxIDs lists every row of the outbox as audit record ids, in the
// order the relay publishes rows written one after another: by time, an
// action first on a tie.
func outboxIDs(t *testing.T, st *store.Store) []string {
	t.Helper()
	rows, err := st.Pool().Query(t.Context(), `
		SELECT rid FROM (
			SELECT at, 0 AS k, id, 'o-' || id AS rid FROM operator_actions
			UNION ALL SELECT at, 1, id, 't-' || id FROM instance_transition_log
		) o ORDER BY at, k, id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestAcquireRelayIsExclusive(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	first, err := st.AcquireRelay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireRelay(ctx); !errors.Is(err, store.ErrRelayHeld) {
		t.Fatalf("second AcquireRelay error = %v, want ErrRelayHeld", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := acquire(t, st)

	// A session that dies releases the lock: PostgreSQL ends it here, and
	// the call waits until it has ended (up to a minute), since the signal
	// alone leaves the session to end in its own time.
	if _, err := st.Pool().Exec(ctx, `SELECT pg_terminate_backend($1, 60000)`, int32(second.PID())); err != nil {
		t.Fatal(err)
	}
	third := acquire(t, st)
	// The dead session can no longer move the cursor.
	if err := second.SaveCursor(ctx, store.RelayCursor{}); err == nil {
		t.Error("a terminated relay saved its cursor")
	}
	if err := third.SaveCursor(ctx, store.RelayCursor{}); err != nil {
		t.Error(err)
	}
}

func TestRelayNextReadsEveryRecordOnceInOrder(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	r := acquire(t, st)
	c, err := r.Cursor(ctx)
	if err != nil || c != (store.RelayCursor{}) {
		t.Fatalf("Cursor of a fresh database = %+v, %v; want the zero cursor", c, err)
	}
	if recs, _, err := r.Next(ctx, c, 10); err != nil || len(recs) != 0 {
		t.Fatalf("Next on an empty outbox = %v, %v", recs, err)
	}

	applyTasks(t, st, "etl", "mail")
	insertInstance(t, st.Pool(), "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning)
	insertInstance(t, st.Pool(), "mail", "ev-2", schemas.StateSkipped)
	for range 3 {
		if _, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionFire, Task: "etl", Operator: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	want := outboxIDs(t, st) // 5 actions and 5 transitions
	got, c := drain(t, r, c, 3)
	if !slices.Equal(got, want) {
		t.Errorf("records = %q, want %q", got, want)
	}

	// The cursor is stored: a new leader goes on from it.
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r = acquire(t, st)
	stored, err := r.Cursor(ctx)
	if err != nil || stored != c {
		t.Fatalf("stored cursor = %+v, %v; want %+v", stored, err, c)
	}
	insertInstance(t, st.Pool(), "mail", "ev-3")
	if _, err := st.SetTaskEnabled(ctx, "etl", false, "bob"); err != nil {
		t.Fatal(err)
	}
	got, _ = drain(t, r, stored, 500)
	if want := outboxIDs(t, st)[len(want):]; len(got) != 2 || !slices.Equal(got, want) || got[1] != "o-6" {
		t.Errorf("records after the restart = %q, want the new transition then the disable (%q)", got, want)
	}
	var fields schemas.AuditRecord
	recs, err := st.ListAudit(ctx, store.AuditFilter{Limit: 1})
	if err == nil && len(recs) == 1 {
		fields = recs[0]
	}
	if fields.Action != schemas.ActionDisable || fields.Operator != "bob" {
		t.Errorf("newest record = %+v, want bob's disable", fields)
	}
}

// The relay gives each transition what it carries of its instance: the
// trace context where the instance has one, the instance's fired_at on the
// creation and the first attempt's →RUNNING, and the handler's reported
// start on a transition into or out of RUNNING of the instance's current
// attempt; nothing to an operator action.
func TestRelayNextCarriesWhatTheMonitorTimes(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	r := acquire(t, st)
	applyTasks(t, st, "etl")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fired := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	traced := insertInstance(t, st.Pool(), "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning, schemas.StateSucceeded)
	other := insertInstance(t, st.Pool(), "etl", "ev-2", schemas.StateDispatched, schemas.StateRunning, schemas.StateSucceeded)
	plain := insertInstance(t, st.Pool(), "etl", "ev-3", schemas.StateDispatched)
	// Its first attempt's records, read when the instance is at its second.
	retried := insertInstance(t, st.Pool(), "etl", "ev-4", schemas.StateDispatched, schemas.StateRunning, schemas.StateRetrying)
	// Each instance its own times, so that a page mixing them shows whose
	// a record carries.
	firedOf, startedOf := map[int64]time.Time{}, map[int64]time.Time{}
	for k, set := range []struct {
		id      int64
		parent  string
		attempt int
	}{{traced, parent, 1}, {plain, "", 1}, {retried, "", 2}, {other, "", 1}} {
		firedOf[set.id] = fired.Add(time.Duration(k) * time.Second)
		if set.id != plain {
			startedOf[set.id] = firedOf[set.id].Add(time.Duration(100+k) * time.Millisecond)
		}
		var started *time.Time
		if at, ok := startedOf[set.id]; ok {
			started = &at
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE instances SET traceparent = $2, attempt = $3, fired_at = $4, started_at = $5
			WHERE id = $1`, set.id, set.parent, set.attempt, firedOf[set.id], started); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionFire, Task: "etl", Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	var n, timed, startedSeen int
	for c := (store.RelayCursor{}); ; {
		recs, next, err := r.Next(ctx, c, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			var want schemas.AuditRecord
			if rec.Kind == schemas.AuditTransition {
				if rec.InstanceID == traced {
					want.Traceparent = parent
				}
				if (rec.From == "" && rec.To == schemas.StateCreated) || rec.To == schemas.StateRunning {
					want.FiredAt = firedOf[rec.InstanceID]
				}
				if (rec.To == schemas.StateRunning || rec.From == schemas.StateRunning) && rec.InstanceID != retried {
					want.StartedAt = startedOf[rec.InstanceID]
				}
			}
			if rec.Traceparent != want.Traceparent || !rec.FiredAt.Equal(want.FiredAt) || !rec.StartedAt.Equal(want.StartedAt) {
				t.Errorf("record %s (%s→%s) of instance %d (traced %d, plain %d, retried %d, other %d): traceparent %q, "+
					"fired_at %v, started_at %v; want %q, %v, %v", rec.ID, rec.From, rec.To, rec.InstanceID, traced, plain, retried, other,
					rec.Traceparent, rec.FiredAt, rec.StartedAt, want.Traceparent, want.FiredAt, want.StartedAt)
			}
			if !rec.FiredAt.IsZero() {
				timed++
			}
			if !rec.StartedAt.IsZero() {
				startedSeen++
			}
			n++
		}
		c = next
	}
	// 4 + 2 + 4 + 4 transitions; fired_at on the 4 creations and 3
	// →RUNNING; started_at on the →RUNNING and RUNNING→SUCCEEDED of the
	// traced and the other instance.
	if n != 16 || timed != 7 || startedSeen != 4 {
		t.Errorf("relayed %d records, %d with fired_at, %d with started_at; want 16 (14 transitions, the apply and the fire), 7, 4",
			n, timed, startedSeen)
	}
}

// TestRelayNextFollowsCommitOrder is why the cursor is a pair of snapshots
// and not a transition id: a transaction that took the lower id commits last.
func TestRelayNextFollowsCommitOrder(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "etl")
	r := acquire(t, st)
	_, c := drain(t, r, store.RelayCursor{}, 10) // the apply

	// The slow transaction takes transition id 1 and stays open.
	slow, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Rollback(context.Background()) }()
	var instance int64
	if err := slow.QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		VALUES ('etl', 1, 'slow', 'event', 'CREATED', 1, 'normal', 'default', 'h', 1000, now()) RETURNING id`).Scan(&instance); err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Exec(ctx, `INSERT INTO instance_transitions (instance_id, task, to_state, attempt, operator)
		VALUES ($1, 'etl', 'CREATED', 1, 'dispatcher')`, instance); err != nil {
		t.Fatal(err)
	}
	// A quick one takes id 3 (ids are drawn two at a time) and commits.
	insertInstance(t, st.Pool(), "etl", "quick")
	got, c := drain(t, r, c, 10)
	if !slices.Equal(got, []string{"t-3"}) {
		t.Fatalf("records while the slow transaction is open = %q, want [t-3]", got)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, c = drain(t, r, c, 10)
	if !slices.Equal(got, []string{"t-1"}) {
		t.Errorf("records after the slow commit = %q, want [t-1]", got)
	}
	// An aborted transaction's rows never appear.
	aborted, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aborted.Exec(ctx, `INSERT INTO operator_actions (action, task) VALUES ('fire', 'etl')`); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := drain(t, r, c, 10); len(got) != 0 {
		t.Errorf("records after a rollback = %q, want none", got)
	}
}

// TestRelaySkip plays a leader that published a page and died before saving
// its cursor: the next leader skips what the stream already holds.
func TestRelaySkip(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	fire := func() {
		t.Helper()
		if _, err := st.RecordAction(ctx, store.Action{Action: schemas.ActionFire, Task: "etl"}); err != nil {
			t.Fatal(err)
		}
	}
	applyTasks(t, st, "etl")
	insertInstance(t, st.Pool(), "etl", "ev-1", schemas.StateDispatched, schemas.StateRunning, schemas.StateSucceeded)
	fire()
	insertInstance(t, st.Pool(), "etl", "ev-2", schemas.StateSkipped)
	fire()
	all := outboxIDs(t, st)
	if want := []string{"o-1", "t-1", "t-2", "t-3", "t-4", "o-2", "t-5", "t-6", "o-3"}; !slices.Equal(all, want) {
		t.Fatalf("outbox = %q, want %q", all, want)
	}

	for published := range len(all) + 1 {
		r := acquire(t, st)
		if err := r.SaveCursor(ctx, store.RelayCursor{}); err != nil {
			t.Fatal(err)
		}
		// The dead leader began the batch and published its first records.
		recs, _, err := r.Next(ctx, store.RelayCursor{}, 3)
		if err != nil || len(recs) != 3 {
			t.Fatalf("Next = %v, %v", recs, err)
		}
		c, err := r.Cursor(ctx)
		if err != nil || c.Current == "" {
			t.Fatalf("cursor after beginning a batch = %+v, %v; want its snapshot stored", c, err)
		}
		if published > 0 {
			var skipped bool
			c, skipped, err = r.Skip(ctx, c, all[published-1])
			if err != nil || !skipped {
				t.Fatalf("Skip(%s) = %v, %v", all[published-1], skipped, err)
			}
			if _, again, err := r.Skip(ctx, c, all[published-1]); err != nil || again {
				t.Errorf("Skip(%s) twice skipped again (%v)", all[published-1], err)
			}
		}
		got, _ := drain(t, r, c, 2)
		if want := all[published:]; !slices.Equal(got, want) {
			t.Errorf("after %d published: records = %q, want %q", published, got, want)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Ids that are not in the batch, or not ids, skip nothing.
	r := acquire(t, st)
	if err := r.SaveCursor(ctx, store.RelayCursor{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(ctx, store.RelayCursor{}, 1); err != nil {
		t.Fatal(err)
	}
	c, err := r.Cursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t-99", "o-99", "nonsense", ""} {
		if next, skipped, err := r.Skip(ctx, c, id); err != nil || skipped || next != c {
			t.Errorf("Skip(%q) = %+v, %v, %v; want nothing skipped", id, next, skipped, err)
		}
	}
}

// TestRelayPageReadsItsRowsOnly: a page of a batch reads the rows it
// returns, not the whole batch again for every page (which made a burst's
// audit quadratic in the batch: a page of 500 of a batch of 7,000 rows
// read and sorted all 7,000).
func TestRelayPageReadsItsRowsOnly(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	r := acquire(t, st)
	_, c := drain(t, r, store.RelayCursor{}, 10)
	const rows, limit = 5000, 500
	if _, err := st.Pool().Exec(ctx, `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator)
		SELECT g, 'etl', NULL, 'CREATED', 1, 'event', 'DISPATCHED', 'dispatcher' FROM generate_series(1, $1) g`, rows); err != nil {
		t.Fatal(err)
	}
	recs, c, err := r.Next(ctx, c, limit)
	if err != nil || len(recs) != limit {
		t.Fatalf("first page: %d records, %v; want %d", len(recs), err, limit)
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := st.Pool().Exec(ctx, `ANALYZE instance_transitions`); err != nil {
				t.Fatal(err)
			}
		}
		var plan []map[string]any
		if err := r.Conn().QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.RelayTransitions,
			c.Done, c.Current, c.LastTransitionID, limit).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if read := rowsRead(plan[0]["Plan"].(map[string]any), "instance_transitions"); read > limit+1 {
			t.Errorf("analysed %v: the second page read %d rows of instance_transitions for %d transitions (of %d in the batch)",
				analysed, read, limit, 2*rows)
		}
	}
	if got, _ := drain(t, r, c, limit); len(got) != 2*rows-limit {
		t.Errorf("the batch's other pages held %d records, want %d", len(got), 2*rows-limit)
	}
}

// rowsRead sums the rows that the scans of table in an EXPLAIN (ANALYZE,
// FORMAT JSON) plan read: those they returned and those their filters
// removed, over all their loops (the counts are averages over loops).
func rowsRead(node map[string]any, table string) int {
	n := 0
	if node["Relation Name"] == table {
		loops := 1.0
		if v, ok := node["Actual Loops"].(float64); ok {
			loops = v
		}
		for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			if v, ok := node[k].(float64); ok {
				n += int(v * loops)
			}
		}
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			n += rowsRead(k.(map[string]any), table)
		}
	}
	return n
}

// TestRelayUnderConcurrentWriters: while writers commit transitions and
// operator actions in transactions of many sizes and lengths, some open
// across several of the relay's batches, a relay reading pages smaller than
// its batches publishes every record once, and each instance's transitions
// in the order they were written.
func TestRelayUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "etl")
	r := acquire(t, st)
	var got []string
	c := store.RelayCursor{}
	pull := func() {
		ids, next := drain(t, r, c, 7)
		got, c = append(got, ids...), next
	}
	pull()

	const writers, txs = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for k := range txs {
				err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
					// 1 to 9 instances, each with a row of two transitions
					// and, for some, a second row; an action now and then;
					// every fifth transaction stays open a while.
					for i := range 1 + (w+k)%9 {
						var id int64
						if err := tx.QueryRow(ctx, `INSERT INTO instances (task, task_version, event_id, source, state,
							max_attempts, priority, pool, handler, timeout_ms, fired_at)
							VALUES ('etl', 1, $1, 'event', 'RUNNING', 1, 'normal', 'default', 'h', 1000, now()) RETURNING id`,
							fmt.Sprintf("w%d-%d-%d", w, k, i)).Scan(&id); err != nil {
							return err
						}
						if _, err := tx.Exec(ctx, `INSERT INTO instance_transitions (instance_id, task, from_state, to_state,
							attempt, operator, then_state, then_operator) VALUES ($1, 'etl', NULL, 'CREATED', 1, 'event', 'DISPATCHED', 'dispatcher')`,
							id); err != nil {
							return err
						}
						if i%2 == 0 {
							if _, err := tx.Exec(ctx, `INSERT INTO instance_transitions (instance_id, task, from_state, to_state,
								attempt, operator) VALUES ($1, 'etl', 'DISPATCHED', 'RUNNING', 1, 'worker:w')`, id); err != nil {
								return err
							}
						}
					}
					if k%3 == 0 {
						if _, err := tx.Exec(ctx, `INSERT INTO operator_actions (action, task, operator) VALUES ('fire', 'etl', 'alice')`); err != nil {
							return err
						}
					}
					if k%5 == w%5 {
						time.Sleep(20 * time.Millisecond) // open across the relay's batches
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		pull()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pull()

	want := outboxIDs(t, st)
	if len(got) != len(want) {
		t.Fatalf("published %d records, the outbox holds %d", len(got), len(want))
	}
	seen := make(map[string]bool, len(got))
	for _, id := range got {
		if seen[id] {
			t.Fatalf("record %s published twice", id)
		}
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			t.Fatalf("record %s never published", id)
		}
	}
	// Each instance's transitions in the order of their ids.
	rows, err := st.Pool().Query(ctx, `SELECT 't-' || id, instance_id FROM instance_transition_log`)
	if err != nil {
		t.Fatal(err)
	}
	of := map[string]int64{}
	for rows.Next() {
		var id string
		var instance int64
		if err := rows.Scan(&id, &instance); err != nil {
			t.Fatal(err)
		}
		of[id] = instance
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	last := map[int64]int64{}
	for _, id := range got {
		instance, ok := of[id]
		if !ok {
			continue // an action
		}
		_, n, _ := schemas.ParseAuditID(id)
		if n < last[instance] {
			t.Errorf("instance %d: transition %s published after %d", instance, id, last[instance])
		}
		last[instance] = n
	}
}
