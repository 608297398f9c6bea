package store_test

import (
	"encoding/json"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// migrateTo moves the database of db to migration version v, up or down.
func migrateTo(t *testing.T, db *storetest.DB, v int64) {
	t.Helper()
	migrations, err := fs.Sub(store.Migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	conn := stdlib.OpenDBFromPool(db.Pool)
	defer func() { _ = conn.Close() }()
	p, err := goose.NewProvider(goose.DialectPostgres, conn, migrations)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := p.GetDBVersion(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v < cur {
		_, err = p.DownTo(t.Context(), v)
	} else {
		_, err = p.UpTo(t.Context(), v)
	}
	if err != nil {
		t.Fatalf("migrate from %d to %d: %v", cur, v, err)
	}
}

// transitionsSaid returns what the instance's transitions say, one string each.
func transitionsSaid(in schemas.Instance) []string {
	var out []string
	for _, tr := range in.Transitions {
		out = append(out, string(tr.From)+">"+string(tr.To)+" by "+tr.Operator+" ("+tr.Reason+") #"+strconv.FormatInt(tr.ID, 10))
	}
	return out
}

// TestTransitionPairsMigration upgrades a database whose transitions are one
// a row (the schema before migration 00017), in the hot table and in the
// history, and reads every transition after it as before; migration 00017's
// down splits the rows of two transitions again.
func TestTransitionPairsMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	// One instance written by this version, in rows of two transitions.
	made := create(t, st, newRunInstance("a", "e1", "", schemas.StateDispatched))
	now := time.Now()
	if out, err := st.ApplyReports(ctx, nil, []schemas.Report{{InstanceID: made[0].ID, Attempt: 1, WorkerID: "w1",
		Kind: schemas.ReportSucceeded, At: now, StartedAt: now, Output: json.RawMessage(`{}`), Pool: "default", Handlers: []string{"h"}}}); err != nil || !out[0].Applied {
		t.Fatalf("ApplyReports = %+v, %v", out, err)
	}
	paired, err := st.GetInstance(ctx, made[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM instance_transitions`); n != 2 || len(paired.Transitions) != 4 {
		t.Fatalf("%d rows hold the %d transitions %q, want 2 rows of 4", n, len(paired.Transitions), transitionsSaid(paired))
	}

	migrateTo(t, db, 16)
	if n := count(t, db.Pool, `SELECT count(*) FROM instance_transitions`); n != 4 {
		t.Fatalf("migration 00017 down left %d rows, want a row for each of the 4 transitions", n)
	}
	// The first instance moves to the history under the old schema.
	relayAll(t, db.Pool)
	if res := moveAll(t, st); res.Moved != 1 {
		t.Fatalf("MoveHistory = %+v, want the first instance moved", res)
	}
	// One instance written as before migration 00017: a row a transition.
	var old int64
	if err := db.Pool.QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		VALUES ('a', 1, 'e0', 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now()) RETURNING id`).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
		VALUES ($1, 'a', NULL, 'CREATED', 1, 'event', ''), ($1, 'a', 'CREATED', 'DISPATCHED', 1, 'dispatcher', ''),
			($1, 'a', 'DISPATCHED', 'RUNNING', 1, 'worker:w1', ''), ($1, 'a', 'RUNNING', 'SUCCEEDED', 1, 'worker:w1', 'done')`,
		old); err != nil {
		t.Fatal(err)
	}

	migrateTo(t, db, 17)
	moved, err := st.GetInstance(ctx, made[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !moved.Archived || !slices.Equal(transitionsSaid(moved), transitionsSaid(paired)) {
		t.Errorf("moved instance's transitions after the migrations = %q, want %q", transitionsSaid(moved), transitionsSaid(paired))
	}
	kept, err := st.GetInstance(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{">CREATED by event () #5", "CREATED>DISPATCHED by dispatcher () #6",
		"DISPATCHED>RUNNING by worker:w1 () #7", "RUNNING>SUCCEEDED by worker:w1 (done) #8"}
	if got := transitionsSaid(kept); !slices.Equal(got, want) {
		t.Errorf("transitions written before the migration = %q, want %q", got, want)
	}
	recs, err := st.ListAudit(ctx, store.AuditFilter{InstanceID: old})
	if err != nil || len(recs) != 4 || recs[0].ID != "t-8" || recs[3].ID != "t-5" {
		t.Errorf("audit records of the instance = %+v, %v; want t-8 to t-5", recs, err)
	}

	// A new instance's transitions take ids after every earlier one's
	// (written by this version, on its schema).
	migrateTo(t, db, math.MaxInt64)
	made = create(t, st, newRunInstance("a", "e2", "", schemas.StateDispatched))
	fresh, err := st.GetInstance(ctx, made[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := transitionsSaid(fresh); len(got) != 2 || fresh.Transitions[0].ID <= 8 || fresh.Transitions[1].ID != fresh.Transitions[0].ID+1 {
		t.Errorf("new instance's transitions = %q, want 2 with consecutive ids after 8", got)
	}
}

// TestInstancesTaskMigration moves a database with instances down to before
// migration 00018, whose down puts the foreign key of instances.task back
// over the rows, and up again: the key is gone, every instance is still
// there, and instances are created and ended as before.
func TestInstancesTaskMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	applyTasks(t, st, "a")
	const fk = `SELECT count(*) FROM pg_constraint WHERE conrelid = 'instances'::regclass AND contype = 'f'
		AND confrelid = 'tasks'::regclass`
	if n := count(t, db.Pool, fk); n != 0 {
		t.Fatalf("instances has %d foreign keys to tasks, want none", n)
	}
	create(t, st, newRunInstance("a", "e1", "", schemas.StateDispatched))

	migrateTo(t, db, 17)
	if n := count(t, db.Pool, fk); n != 1 {
		t.Fatalf("after migration 00018's down, instances has %d foreign keys to tasks, want 1", n)
	}
	// An instance written under the key, as that version wrote it: the
	// code of this version writes columns of later migrations.
	var e2 int64
	if err := db.Pool.QueryRow(t.Context(), `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		VALUES ('a', 1, 'e2', 'event', 'DISPATCHED', 1, 'normal', 'default', 'h', 1000, now()) RETURNING id`).Scan(&e2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(t.Context(), `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason, then_state, then_operator, then_reason)
		VALUES ($1, 'a', NULL, 'CREATED', 1, 'event', '', 'DISPATCHED', 'dispatcher', '')`, e2); err != nil {
		t.Fatal(err)
	}

	migrateTo(t, db, 18)
	if n := count(t, db.Pool, fk); n != 0 {
		t.Fatalf("after migration 00018, instances has %d foreign keys to tasks, want none", n)
	}
	migrateTo(t, db, math.MaxInt64)
	made := create(t, st, newRunInstance("a", "e3", "", schemas.StateDispatched))
	finishInstance(t, st, made[0].ID, true, `{}`)
	if n := count(t, db.Pool, `SELECT count(*) FROM instances WHERE task = 'a'`); n != 3 {
		t.Fatalf("%d instances of a, want e1, e2 and e3", n)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM instance_transition_log`); n != 3*2+2 {
		t.Fatalf("%d transitions, want 8 (CREATED and DISPATCHED of each, RUNNING and SUCCEEDED of e3)", n)
	}
}

// TestWaitingIndexMigration builds migration 00019's index of the WAITING
// instances over a table that holds some, and PromoteWaiting finds them
// through it.
func TestWaitingIndexMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	applyTasks(t, st, "a")
	migrateTo(t, db, 18)
	if _, err := db.Pool.Exec(t.Context(), `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		VALUES ('a', 1, 'w1', 'event', 'WAITING', 1, 'normal', 'default', 'h', 1000, now()),
			('a', 1, 'd1', 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now())`); err != nil {
		t.Fatal(err)
	}
	migrateTo(t, db, 19)
	if n := count(t, db.Pool, `SELECT count(*) FROM pg_index WHERE indexrelid = 'instances_waiting_idx'::regclass AND indisvalid`); n != 1 {
		t.Fatalf("instances_waiting_idx valid: %d, want 1", n)
	}
	migrateTo(t, db, math.MaxInt64) // PromoteWaiting reads instance_limits too
	promoted, err := st.PromoteWaiting(t.Context(), []string{"a"})
	if err != nil || len(promoted) != 1 || promoted[0].EventID != "w1" {
		t.Fatalf("PromoteWaiting = %+v, %v; want w1 dispatched", promoted, err)
	}
}

// TestCronMsgIDKeyMigration reads the key migration 00021 made: 64 hex
// digits, one row that stays one, and a new random key when the table is
// made again.
func TestCronMsgIDKeyMigration(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	first, err := st.CronMsgIDKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hexKey := regexp.MustCompile(`^[0-9a-f]{64}$`)
	if !hexKey.Match(first) {
		t.Fatalf("key %q, want 64 hex digits", first)
	}
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO cron_msg_id_key (one, key) VALUES (false, 'x')`); err == nil {
		t.Error("a second key row was inserted")
	}
	migrateTo(t, db, 20)
	if _, err := st.CronMsgIDKey(t.Context()); err == nil {
		t.Error("the key is there below migration 00021")
	}
	migrateTo(t, db, 21)
	again, err := st.CronMsgIDKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !hexKey.Match(again) || string(again) == string(first) {
		t.Errorf("the key made again is %q (before: %q), want new random hex", again, first)
	}
}
