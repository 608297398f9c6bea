package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// relayAll marks every transition committed so far as on AX_AUDIT, as the
// audit relay would once it has published them.
func relayAll(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO relay_cursor (name, done) VALUES ('audit', pg_current_snapshot())
		ON CONFLICT (name) DO UPDATE SET done = EXCLUDED.done`); err != nil {
		t.Fatal(err)
	}
}

// firedAt is a firing of task with event id, fired at, that ends at once (SKIPPED).
func firedAt(task, eventID string, at time.Time) store.NewInstance {
	in := newRunInstance(task, eventID, "", schemas.StateSkipped)
	in.FiredAt, in.Reason = at, "skipped for the test"
	return in
}

func create(t *testing.T, st *store.Store, in ...store.NewInstance) []store.Attempt {
	t.Helper()
	got, err := st.CreateInstances(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// moveAll moves every ended instance to the history and fails unless all
// of them left the hot tables.
func moveAll(t *testing.T, st *store.Store) store.MoveResult {
	t.Helper()
	res, err := st.MoveHistory(t.Context(), store.MoveOptions{EndedBefore: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Waiting != 0 {
		t.Fatalf("MoveHistory = %+v: instances still wait", res)
	}
	return res
}

// olderSnapshot begins a transaction that has taken its snapshot, to be
// older than what follows; the test's end rolls it back.
func olderSnapshot(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), `SELECT count(*) FROM instances`); err != nil {
		t.Fatal(err)
	}
	return tx
}

func TestHistoryHasEveryColumn(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	// A migration that adds a column to a hot table adds it to its
	// history and archive too: the move copies every column by name.
	for hot, copies := range map[string][]string{
		"instances":            {"instance_history", "instance_archive"},
		"instance_transitions": {"instance_transition_history", "instance_transition_archive"},
	} {
		for _, c := range copies {
			if n := count(t, pool, `SELECT count(*) FROM information_schema.columns h
				WHERE h.table_name = $1 AND NOT EXISTS (SELECT 1 FROM information_schema.columns c
					WHERE c.table_name = $2 AND c.column_name = h.column_name AND c.data_type = h.data_type)`, hot, c); n != 0 {
				t.Errorf("%s lacks %d columns of %s (or has them with another type): add them in the migration that adds them to %s", c, n, hot, hot)
			}
		}
	}
}

func TestMoveHistoryKeepsTheInstanceReadable(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	old := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	made := create(t, st, firedAt("a", "e1", old), firedAt("a", "e2", old.AddDate(0, 1, 0)))
	live := create(t, st, newRunInstance("a", "e3", "", schemas.StateDispatched))
	if err := st.RecordEvents(ctx, []store.Event{{InstanceID: made[0].ID, Attempt: 1, Kind: "stale_failed", Reason: "late", At: old}}); err != nil {
		t.Fatal(err)
	}
	before, err := st.GetInstance(ctx, made[0].ID)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing moves before its transitions are on AX_AUDIT.
	res, err := st.MoveHistory(ctx, store.MoveOptions{EndedBefore: time.Now().Add(time.Hour)})
	if err != nil || res.Copied != 0 {
		t.Fatalf("MoveHistory before the relay = %+v, %v; want nothing copied", res, err)
	}
	relayAll(t, pool)
	if res := moveAll(t, st); res.Copied != 2 || res.Moved != 2 {
		t.Fatalf("MoveHistory = %+v, want the 2 ended instances copied and moved", res)
	}
	if n := count(t, pool, `SELECT count(*) FROM instances`); n != 1 {
		t.Fatalf("%d instances left in the hot table, want the live one", n)
	}
	parts, err := st.HistoryPartitions(ctx)
	if err != nil || len(parts) != 2 || parts[0].Name != "20260301_20260401" || parts[1].Name != "20260401_20260501" {
		t.Fatalf("partitions = %+v, %v; want the 2 months the instances fired in", parts, err)
	}

	after, err := st.GetInstance(ctx, made[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Archived || len(after.Transitions) != len(before.Transitions) || len(after.Events) != 1 ||
		after.Transitions[1].To != schemas.StateSkipped || after.Events[0].Reason != "late" {
		t.Fatalf("moved instance = %+v, want it archived with its transitions %+v and event", after, before.Transitions)
	}
	list, err := st.ListInstances(ctx, store.InstanceFilter{Archived: true, Task: "a"})
	if err != nil || len(list) != 2 || list[0].ID != made[1].ID || !list[0].Archived {
		t.Fatalf("archived list = %+v, %v; want both moved instances, newest first", list, err)
	}
	hot, err := st.ListInstances(ctx, store.InstanceFilter{Task: "a"})
	if err != nil || len(hot) != 1 || hot[0].ID != live[0].ID {
		t.Fatalf("list = %+v, %v; want the live instance only", hot, err)
	}
	if in, err := st.InstanceByEvent(ctx, "a", "e2"); err != nil || in.ID != made[1].ID || !in.Archived {
		t.Fatalf("InstanceByEvent of a moved instance = %+v, %v", in, err)
	}
	// A rerun repeats the firing of the moved instance.
	f, err := st.InstanceFiring(ctx, made[0].ID)
	if err != nil || f.Task != "a" {
		t.Fatalf("InstanceFiring of a moved instance = %+v, %v", f, err)
	}
	rerun := create(t, st, newRunInstance("a", schemas.RerunEventIDPrefix+"1-x", "", schemas.StateDispatched))
	if len(rerun) != 1 || rerun[0].ID <= live[0].ID {
		t.Fatalf("rerun of a moved instance made %+v, want a new instance", rerun)
	}
}

func TestRepeatedFiringOfAMovedInstanceMakesNone(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a")
	at := time.Now().Add(-time.Hour)
	first := create(t, st, firedAt("a", "e1", at))
	relayAll(t, pool)
	moveAll(t, st)
	// The firing comes again (a redelivery, or the same event id
	// published anew): its instance is in the history, so no second.
	if again := create(t, st, firedAt("a", "e1", at), firedAt("a", "e2", at)); len(again) != 1 || again[0].EventID != "e2" {
		t.Fatalf("CreateInstances after the move = %+v, want only e2's new instance", again)
	}
	if n := count(t, pool, `SELECT count(*) FROM archived_instances WHERE task = 'a' AND event_id = 'e1'`) +
		count(t, pool, `SELECT count(*) FROM instances WHERE task = 'a' AND event_id = 'e1'`); n != 1 {
		t.Fatalf("%d instances of firing e1, want 1 (instance %d)", n, first[0].ID)
	}
}

func TestMoveHistoryWaitsForOlderSnapshots(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	made := create(t, st, firedAt("a", "e1", time.Now().Add(-time.Hour)))
	relayAll(t, pool)
	// A transaction whose snapshot predates the copy does not see the
	// key in instance_history_keys: while it runs the hot row stays, so
	// that its insert of the same firing still conflicts with it.
	old := olderSnapshot(t, pool)
	res, err := st.MoveHistory(ctx, store.MoveOptions{EndedBefore: time.Now().Add(time.Hour), Wait: 50 * time.Millisecond})
	if err != nil || res.Copied != 1 || res.Moved != 0 || res.Waiting != 1 {
		t.Fatalf("MoveHistory under an older snapshot = %+v, %v; want 1 copied, still waiting", res, err)
	}
	var n int
	if err := old.QueryRow(ctx, `SELECT count(*) FROM instance_history_keys`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the older snapshot sees %d keys (%v), want 0", n, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM instances WHERE id = $1`, made[0].ID); n != 1 {
		t.Fatal("the instance left the hot table under an older snapshot")
	}
	if err := old.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res := moveAll(t, st); res.Copied != 0 || res.Moved != 1 {
		t.Fatalf("MoveHistory after the older snapshot ended = %+v, want the copied instance moved", res)
	}
}

// A call that copies a whole Limit deletes its own copies only (another
// call follows); a Sweep, or the pass's last call, which copies fewer,
// deletes every copy still in the hot tables, such as one an older
// snapshot held up.
func TestMoveHistoryPassEndsWithEveryCopy(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	made := create(t, st, firedAt("a", "e1", time.Now().Add(-3*time.Hour)), firedAt("a", "e2", time.Now().Add(-2*time.Hour)),
		firedAt("a", "e3", time.Now().Add(-time.Hour)))
	relayAll(t, pool)
	opts := store.MoveOptions{EndedBefore: time.Now().Add(time.Hour), Limit: 1, Wait: 50 * time.Millisecond}
	old := olderSnapshot(t, pool)
	if res, err := st.MoveHistory(ctx, opts); err != nil || res != (store.MoveResult{Copied: 1, Waiting: 1}) {
		t.Fatalf("the first call under an older snapshot = %+v, %v; want e1 copied, waiting", res, err)
	}
	if err := old.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := st.MoveHistory(ctx, opts); err != nil || res != (store.MoveResult{Copied: 1, Moved: 1}) {
		t.Fatalf("the second call = %+v, %v; want e2 copied and moved", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM instances WHERE id = $1`, made[0].ID); n != 1 {
		t.Fatal("a call that copied a whole Limit deleted an earlier call's copy")
	}
	sweep := opts
	sweep.Sweep = true
	if res, err := st.MoveHistory(ctx, sweep); err != nil || res != (store.MoveResult{Copied: 1, Moved: 2}) {
		t.Fatalf("a sweep that copies a whole Limit = %+v, %v; want e3 copied, e1 and e3 moved", res, err)
	}
	if res, err := st.MoveHistory(ctx, opts); err != nil || res != (store.MoveResult{}) {
		t.Fatalf("the pass's last call = %+v, %v; want nothing left", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM instances`); n != 0 {
		t.Fatalf("%d instances in the hot table after the pass, want 0", n)
	}
}

func TestLateReportDuringTheMove(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	made := create(t, st, firedAt("a", "e1", time.Now().Add(-time.Hour)))
	id := made[0].ID
	relayAll(t, pool)
	// A late report holds the instance, as ApplyReports does, and records
	// its stale event while the move runs.
	report, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer report.Rollback(ctx)
	if _, err := report.Exec(ctx, `SELECT id FROM instances WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := report.Exec(ctx, `INSERT INTO instance_events (instance_id, attempt, kind, reason) VALUES ($1, 1, 'stale_succeeded', 'late')`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.MoveHistory(ctx, store.MoveOptions{EndedBefore: time.Now().Add(time.Hour), Wait: time.Minute})
		done <- err
	}()
	// The move waits for the report's lock.
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF i%'`) == 0 {
		select {
		case err := <-done:
			t.Fatalf("MoveHistory returned %v without waiting for the report's lock", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := report.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	in, err := st.GetInstance(ctx, id)
	if err != nil || !in.Archived || len(in.Events) != 1 || in.Events[0].Kind != "stale_succeeded" {
		t.Fatalf("moved instance = %+v, %v; want it archived with the late report's event", in, err)
	}
	// A report after the move finds no instance, and its event no row to land on.
	out, err := st.ApplyReports(ctx, nil, []schemas.Report{{InstanceID: id, Attempt: 1, Kind: schemas.ReportSucceeded, WorkerID: "w", At: time.Now()}})
	if err != nil || len(out) != 1 || out[0].Found || out[0].Applied {
		t.Fatalf("ApplyReports after the move = %+v, %v; want one outcome, not found", out, err)
	}
	if err := st.RecordEvents(ctx, []store.Event{{InstanceID: id, Attempt: 1, Kind: "stale_failed", At: time.Now()}}); err != nil {
		t.Fatalf("RecordEvents of a moved instance: %v", err)
	}
}

func TestHistoryLeader(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	first, err := st.AcquireHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireHistory(ctx); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("second AcquireHistory error = %v, want ErrNotLeader", err)
	}
	if err := first.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := st.AcquireHistory(ctx)
	if err != nil {
		t.Fatalf("AcquireHistory after the leader left: %v", err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestExpireHistory(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "plain", "short", "kept", "arch")
	now := time.Now().UTC()
	ids := map[string]int64{}
	for _, task := range []string{"plain", "short", "kept", "arch"} {
		for _, age := range []int{100, 40, 10} {
			made := create(t, st, firedAt(task, "e"+time.Duration(age).String(), now.AddDate(0, 0, -age)))
			ids[task+"/"+time.Duration(age).String()] = made[0].ID
		}
	}
	relayAll(t, pool)
	res, err := st.MoveHistory(ctx, store.MoveOptions{EndedBefore: time.Now().Add(time.Hour)})
	if err != nil || res.Moved != 12 {
		t.Fatalf("MoveHistory = %+v, %v", res, err)
	}
	tasks := map[string]store.Retention{
		"short": {Keep: 20 * 24 * time.Hour},
		"kept":  {Keep: 365 * 24 * time.Hour},
		"arch":  {Keep: 30 * 24 * time.Hour, Archive: true},
	}
	// plain keeps the default, 60 days; kept's year holds every partition.
	exp, err := st.ExpireHistory(ctx, store.ExpireOptions{Now: now, Default: store.Retention{Keep: 60 * 24 * time.Hour}, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.Dropped) != 0 || exp.Deleted != 3 || exp.Archived != 2 {
		t.Fatalf("ExpireHistory = %+v, want plain/100, short/100 and short/40 deleted, arch/100 and arch/40 archived", exp)
	}
	left := func() []string {
		var out []string
		for k, id := range ids {
			in, err := st.GetInstance(ctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				t.Fatal(err)
			default:
				archive := count(t, pool, `SELECT count(*) FROM instance_archive WHERE id = $1`, id)
				out = append(out, k+map[int]string{0: "", 1: "(archive)"}[archive])
				if len(in.Transitions) != 2 {
					t.Errorf("%s has transitions %+v, want its 2", k, in.Transitions)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{"arch/100ns(archive)", "arch/10ns", "arch/40ns(archive)", "kept/100ns", "kept/10ns", "kept/40ns",
		"plain/10ns", "plain/40ns", "short/10ns"}
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("instances left = %q, want %q", got, want)
	}

	// Without kept's year, the partitions older than 60 days go whole.
	delete(tasks, "kept")
	exp, err = st.ExpireHistory(ctx, store.ExpireOptions{Now: now, Default: store.Retention{Keep: 60 * 24 * time.Hour}, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.Dropped) == 0 || exp.Deleted != 1 || exp.Archived != 0 {
		t.Fatalf("ExpireHistory = %+v, want the partition of 100 days ago dropped with kept/100", exp)
	}
	parts, err := st.HistoryPartitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if !p.To.After(now.AddDate(0, 0, -60)) {
			t.Errorf("partition %s outlived the longest retention (dropped %q)", p.Name, exp.Dropped)
		}
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == "kept/100ns" })
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("instances left = %q, want %q", got, want)
	}
	// An archived instance keeps its key: its firing again makes none. A
	// dropped one's firing is new again; the audit stream has the old record.
	again := create(t, st, firedAt("arch", "e100ns", now), firedAt("plain", "e100ns", now))
	if len(again) != 1 || again[0].Task != "plain" {
		t.Fatalf("firings of an archived and a dropped instance made %+v, want plain's only", again)
	}
}

// TestTransitionsHaveTheirInstance checks what the foreign key of
// instance_transitions.instance_id guarded before migration 00016 dropped
// it: every transition written has its instance in the hot tables, the move
// to the history takes an instance's transitions with it, and a report for
// an instance that moved writes no transition.
func TestTransitionsHaveTheirInstance(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "fk")
	made := create(t, st, newRunInstance("fk", "e0", "", schemas.StateDispatched),
		newRunInstance("fk", "e1", "", schemas.StateDispatched), firedAt("fk", "e2", time.Now()))
	ids := make(map[string]int64)
	for _, a := range made {
		ids[a.EventID] = a.ID
	}
	now := time.Now()
	report := schemas.Report{InstanceID: ids["e0"], Attempt: 1, WorkerID: "w1", Kind: schemas.ReportSucceeded,
		StartedAt: now, At: now, Pool: "default", Handlers: []string{"h"}}
	if out, err := st.ApplyReports(ctx, nil, []schemas.Report{report}); err != nil || !out[0].Applied {
		t.Fatalf("ApplyReports = %+v, %v", out, err)
	}
	const orphans = `SELECT count(*) FROM instance_transitions t WHERE NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = t.instance_id)`
	if n := count(t, pool, orphans); n != 0 {
		t.Fatalf("%d transitions without their instance before the move", n)
	}
	relayAll(t, pool)
	if res := moveAll(t, st); res.Moved != 2 {
		t.Fatalf("MoveHistory = %+v, want e0 and e2 moved", res)
	}
	// The report again, for an instance no longer in the hot tables.
	out, err := st.ApplyReports(ctx, nil, []schemas.Report{report})
	if err != nil || out[0].Applied || out[0].Found {
		t.Fatalf("ApplyReports after the move = %+v, %v; want not applied, not found", out, err)
	}
	if n := count(t, pool, orphans); n != 0 {
		t.Fatalf("%d transitions without their instance after the move", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM instance_transition_log`); n != 2 {
		t.Fatalf("%d transitions in the hot table, want e1's 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM archived_transitions WHERE instance_id = ANY($1)`,
		[]int64{ids["e0"], ids["e2"]}); n != 4+2 {
		t.Fatalf("%d transitions of e0 and e2 in the history, want 6 (CREATED, DISPATCHED, RUNNING, SUCCEEDED; CREATED, SKIPPED)", n)
	}
}
