package store_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

func TestInstanceTimes(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a")
	end := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	id := addRun(t, pool, "a", schemas.StateSucceeded, end, 3*time.Second, "")
	queued := insertInstance(t, pool, "a", "ev-2", schemas.StateDispatched)
	got, err := st.InstanceTimes(t.Context(), []int64{id, queued, 999})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[id].FiredAt.Equal(end.Add(-3*time.Second)) || !got[id].Running[1].Equal(end.Add(-3*time.Second)) ||
		len(got[queued].Running) != 0 {
		t.Errorf("times = %+v", got)
	}
}

// TestInstanceTimesAsTheLog: InstanceTimes finds each attempt's RUNNING
// time as the view instance_transition_log has it (the statement it ran
// before, below), for a transition to RUNNING alone in its row, first of a
// pair, second of a pair, and for instances with several attempts.
func TestInstanceTimesAsTheLog(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	at := func(s int) time.Time { return time.Date(2025, 3, 1, 12, 0, s, 0, time.UTC) }
	// A row of instance_transitions: attempt, from → to (→ then) at second s.
	type row struct {
		attempt        int
		from, to, then string
		s              int
	}
	runs := map[string][]row{
		"alone": {{1, "", "CREATED", "DISPATCHED", 0}, {1, "DISPATCHED", "RUNNING", "", 1}, {1, "RUNNING", "SUCCEEDED", "", 2}},
		"first": {{1, "", "CREATED", "DISPATCHED", 0}, {1, "DISPATCHED", "RUNNING", "SUCCEEDED", 3}},
		"second": {{1, "", "CREATED", "DISPATCHED", 0}, {1, "DISPATCHED", "RETRYING", "", 4},
			{2, "RETRYING", "DISPATCHED", "RUNNING", 5}, {2, "RUNNING", "SUCCEEDED", "", 6}},
		"attempts": {{1, "", "CREATED", "DISPATCHED", 0}, {1, "DISPATCHED", "RUNNING", "RETRYING", 7},
			{2, "RETRYING", "DISPATCHED", "", 8}, {2, "DISPATCHED", "RUNNING", "", 9}, {2, "RUNNING", "RETRYING", "", 10},
			{3, "RETRYING", "DISPATCHED", "RUNNING", 11}, {3, "RUNNING", "FAILED", "", 12}},
		"queued": {{1, "", "CREATED", "DISPATCHED", 0}},
	}
	ids := []int64{999999}
	names := make(map[int64]string)
	for name, rows := range runs {
		var id int64
		if err := pool.QueryRow(ctx, `
			INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
			VALUES ('a', 1, $1, 'event', 'DISPATCHED', 3, 'normal', 'default', 'h', 60000, $2) RETURNING id`,
			name, at(0)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		names[id] = name
		for _, r := range rows {
			if _, err := pool.Exec(ctx, `
				INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, at, then_state, then_operator)
				VALUES ($1, 'a', NULLIF($2, ''), $3, $4, 'w', $5, NULLIF($6, ''), CASE WHEN $6 <> '' THEN 'w' END)`,
				id, r.from, r.to, r.attempt, at(r.s), r.then); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := st.InstanceTimes(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	// Each attempt's RUNNING time by instance, as InstanceTimes found it
	// and as the view has it (InstanceTimes' statement before).
	type running struct {
		ID      int64
		Attempt int
		At      time.Time
	}
	var found []running
	for id, it := range got {
		if !it.FiredAt.Equal(at(0)) {
			t.Errorf("%s: fired at %v, want %v", names[id], it.FiredAt, at(0))
		}
		for a, when := range it.Running {
			found = append(found, running{id, a, when.UTC()})
		}
	}
	rows, err := pool.Query(ctx, `
		SELECT i.id, t.attempt, t.at AT TIME ZONE 'UTC'
		FROM instances i JOIN instance_transition_log t ON t.instance_id = i.id AND t.to_state = 'RUNNING'
		WHERE i.id = ANY($1) ORDER BY i.id, t.attempt`, ids)
	if err != nil {
		t.Fatal(err)
	}
	logged, err := pgx.CollectRows(rows, pgx.RowToStructByPos[running])
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(found, func(a, b running) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Attempt, b.Attempt)) })
	if len(got) != len(runs) || !slices.EqualFunc(found, logged, func(a, b running) bool {
		return a.ID == b.ID && a.Attempt == b.Attempt && a.At.Equal(b.At)
	}) {
		t.Errorf("InstanceTimes found %d instances (want %d), RUNNING\n%v\nthe log has\n%v", len(got), len(runs), found, logged)
	}
	// And the log is what the rows say: 1 + 1 + 1 + 3 attempts RUNNING.
	if len(logged) != 6 {
		t.Errorf("the log has %d attempts RUNNING, want 6: %v", len(logged), logged)
	}
	for _, l := range logged {
		for _, r := range runs[names[l.ID]] {
			if r.attempt == l.Attempt && (r.to == "RUNNING" || r.then == "RUNNING") && !l.At.Equal(at(r.s)) {
				t.Errorf("%s: the log has attempt %d RUNNING at %v, want %v", names[l.ID], l.Attempt, l.At, at(r.s))
			}
		}
	}
}

// TestInstanceTimesReadsItsInstancesOnly plans InstanceTimes for a batch of
// 120 instances (a batch of audit records' worth) in a table of 20,000 with
// two rows of transitions each, as a burst leaves them, not analysed and
// analysed: it reads the batch's instances and their transitions' rows,
// not every row of instance_transitions (which a join with the UNION ALL
// view instance_transition_log read twice, for every batch).
func TestInstanceTimesReadsItsInstancesOnly(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	if _, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		SELECT 'a', 1, 'e' || g, 'event', 'SUCCEEDED', 1, 'normal', 'default', 'h', 1000, now() FROM generate_series(1, 20000) g;
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator)
		SELECT id, task, NULL, 'CREATED', 1, 'event', 'DISPATCHED', 'dispatcher' FROM instances;
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator)
		SELECT id, task, 'DISPATCHED', 'RUNNING', 1, 'worker:w', 'SUCCEEDED', 'worker:w' FROM instances`); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM instances ORDER BY id OFFSET 10000 LIMIT 120) b`).
		Scan(&ids); err != nil {
		t.Fatal(err)
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := pool.Exec(ctx, `ANALYZE instances, instance_transitions`); err != nil {
				t.Fatal(err)
			}
		}
		var plan []map[string]any
		if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.InstanceTimesQuery, ids).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		root := plan[0]["Plan"].(map[string]any)
		if read := rowsRead(root, "instance_transitions"); read > 2*len(ids) {
			t.Errorf("analysed %v: read %d rows of instance_transitions for %d instances of 2 rows each:\n%v",
				analysed, read, len(ids), plan)
		}
		if read := rowsRead(root, "instances"); read > len(ids) {
			t.Errorf("analysed %v: read %d rows of instances for %d", analysed, read, len(ids))
		}
	}
	got, err := st.InstanceTimes(ctx, ids)
	if err != nil || len(got) != len(ids) || len(got[ids[0]].Running) != 1 {
		t.Errorf("InstanceTimes = %d instances (the first %+v), %v; want %d, each RUNNING once", len(got), got[ids[0]], err, len(ids))
	}
}

func TestLiveInstanceCountsAndBacklog(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a", "b")
	old := insertInstance(t, pool, "a", "ev-1", schemas.StateDispatched)
	insertInstance(t, pool, "a", "ev-2", schemas.StateDispatched)
	insertInstance(t, pool, "a", "ev-3", schemas.StateDispatched, schemas.StateRunning)
	insertInstance(t, pool, "b", "ev-1", schemas.StateDispatched, schemas.StateRunning, schemas.StateRetrying)
	insertInstance(t, pool, "b", "ev-2", schemas.StateDispatched, schemas.StateRunning, schemas.StateSucceeded)
	if _, err := pool.Exec(ctx, `UPDATE instances SET updated_at = now() - interval '10 minutes' WHERE id = $1 OR task = 'b'`, old); err != nil {
		t.Fatal(err)
	}
	counts, err := st.LiveInstanceCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(counts); got != "[{a DISPATCHED 2} {a RUNNING 1} {b RETRYING 1}]" {
		t.Errorf("live counts = %s", got)
	}
	backlog, err := st.Backlog(ctx, 5*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog) != 2 || backlog[0] != (store.BacklogCount{Task: "a", Pool: "default", State: schemas.StateDispatched, Count: 1, OldestID: old}) ||
		backlog[1].Task != "b" || backlog[1].State != schemas.StateRetrying {
		t.Errorf("backlog = %+v", backlog)
	}
}

func TestRecentEnds(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a", "b")
	now := time.Now()
	addRun(t, pool, "a", schemas.StateSucceeded, now, time.Second, "")
	addRun(t, pool, "a", schemas.StateRetrying, now, time.Second, "timeout after 1s")
	last := addRun(t, pool, "a", schemas.StateFailed, now, time.Second, "timeout: the attempt outlived its timeout")
	addRun(t, pool, "a", schemas.StateFailed, now.Add(-time.Hour), time.Second, "timeout after 1s") // before the window
	failed := addRun(t, pool, "b", schemas.StateFailed, now, time.Second, "lease expired: the worker stopped renewing it")
	ends, err := st.RecentEnds(t.Context(), now.Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TaskEnds{
		{Task: "a", Attempts: 3, Timeouts: 2, LastTimeoutID: last, Failed: 1, LastFailedID: last},
		{Task: "b", Attempts: 1, Failed: 1, LastFailedID: failed},
	}
	if fmt.Sprint(ends) != fmt.Sprint(want) {
		t.Errorf("recent ends = %+v, want %+v", ends, want)
	}
	for reason, want := range map[string][2]bool{
		"timeout after 5s": {true, false}, "timeout: overdue": {true, false}, "lease expired: gone": {false, true}, "boom": {},
	} {
		if store.IsTimeoutReason(reason) != want[0] || store.IsLeaseExpiredReason(reason) != want[1] {
			t.Errorf("reason %q: timeout %t, lease expired %t", reason, store.IsTimeoutReason(reason), store.IsLeaseExpiredReason(reason))
		}
	}
}
