package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// addRun writes an ended instance of task that ran for d and ended at
// finished, with its transitions.
func addRun(t *testing.T, pool *pgxpool.Pool, task string, state schemas.State, finished time.Time, d time.Duration, errText string) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(t.Context(), `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, started_at, finished_at, error)
		VALUES ($1, 1, gen_random_uuid()::text, 'event', $2, 1, 'normal', 'default', 'h', 60000, $3, $3, $4, $5)
		RETURNING id`, task, string(state), finished.Add(-d), finished, errText).Scan(&id)
	if err != nil {
		t.Fatalf("insert instance: %v", err)
	}
	_, err = pool.Exec(t.Context(), `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason, at)
		VALUES ($1, $2, NULL, 'CREATED', 1, 'event', '', $3), ($1, $2, 'CREATED', 'DISPATCHED', 1, 'dispatcher', '', $3),
			($1, $2, 'DISPATCHED', 'RUNNING', 1, 'worker:w', '', $3), ($1, $2, 'RUNNING', $4, 1, 'worker:w', $5, $6)`,
		id, task, finished.Add(-d), string(state), errText, finished)
	if err != nil {
		t.Fatalf("insert transitions: %v", err)
	}
	return id
}

func TestFailureStreaks(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a", "b", "c", "d")
	now := time.Now()
	addRun(t, pool, "a", schemas.StateFailed, now, time.Second, "old")
	addRun(t, pool, "a", schemas.StateSucceeded, now, time.Second, "")
	first := addRun(t, pool, "a", schemas.StateFailed, now.Add(-time.Minute), time.Second, "one")
	addRun(t, pool, "a", schemas.StateSkipped, now, 0, "")
	last := addRun(t, pool, "a", schemas.StateFailed, now, time.Second, "two")
	addRun(t, pool, "b", schemas.StateFailed, now, time.Second, "")
	addRun(t, pool, "b", schemas.StateSucceeded, now, time.Second, "")
	for range 4 {
		addRun(t, pool, "c", schemas.StateFailed, now, time.Second, "c")
	}
	// A sharded firing of d that failed counts once, as its parent, however
	// many of its children failed; the firing before it succeeded.
	addRun(t, pool, "d", schemas.StateSucceeded, now, time.Second, "")
	parent := addRun(t, pool, "d", schemas.StateFailed, now, time.Second, "shards 0, 1, 2 failed")
	for range 3 {
		child := addRun(t, pool, "d", schemas.StateFailed, now, time.Second, "shard")
		if _, err := pool.Exec(t.Context(), `UPDATE instances SET parent_id = $1 WHERE id = $2`, parent, child); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.FailureStreaks(t.Context(), []string{"a", "b", "c", "d", "none"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	a := got["a"]
	if d := got["d"]; d.Failures != 1 || d.LastInstanceID != parent {
		t.Errorf("streak of d = %+v, want 1 failure: the parent %d, not its shards", d, parent)
	}
	if len(got) != 3 || a.Failures != 2 || a.LastInstanceID != last || a.LastError != "two" ||
		!a.Since.Equal(now.Add(-time.Minute).Truncate(time.Microsecond)) {
		t.Errorf("streaks = %+v; want a with 2 failures since the first (%d), c and d", got, first)
	}
	if got["c"].Failures != 3 {
		t.Errorf("streak of c = %+v, want 3: counted up to the limit", got["c"])
	}
}

func TestDurationOutlier(t *testing.T) {
	t.Parallel()
	sec := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Second
		}
		return out
	}
	for _, tt := range []struct {
		latest  time.Duration
		history []time.Duration
		minRuns int
		median  time.Duration
		p95     time.Duration
		slow    bool
	}{
		{21 * time.Second, sec(10, 9, 11, 10, 10), 5, 10 * time.Second, 11 * time.Second, false},
		{23 * time.Second, sec(10, 9, 11, 10, 10), 5, 10 * time.Second, 11 * time.Second, true},
		{23 * time.Second, sec(10, 9, 11, 10), 5, 10 * time.Second, 11 * time.Second, false}, // too little history
		{time.Minute, nil, 1, 0, 0, false},
		// 20 runs: the p95 is the 19th, so one wild run is forgiven.
		{50 * time.Second, append(sec(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20), 100*time.Second), 5,
			10 * time.Second, 20 * time.Second, true},
		{40 * time.Second, append(sec(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20), 100*time.Second), 5,
			10 * time.Second, 20 * time.Second, false},
	} {
		st, slow := store.DurationOutlier(tt.latest, tt.history, 2, tt.minRuns)
		if slow != tt.slow || st.Median != tt.median || st.P95 != tt.p95 || st.Runs != len(tt.history) {
			t.Errorf("DurationOutlier(%v, %v) = %+v, %t; want median %v, p95 %v, %t", tt.latest, tt.history, st, slow,
				tt.median, tt.p95, tt.slow)
		}
	}
}

func TestHealthReport(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	apply := func(def string) {
		t.Helper()
		if _, _, err := st.ApplyTask(ctx, parseTask(t, def), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	apply("task_name: owned\nowner: data-team\nexecution: {handler: h}\n")
	apply("task_name: orphan\nexecution: {handler: h}\n")
	apply("task_name: flaky\nowner: ops\nexecution: {handler: h}\n")
	apply("task_name: slow\nowner: ops\nexecution: {handler: h}\n")
	// A drill's copy fails on purpose and names no owner: left out.
	apply("task_name: drill-storm-flaky\ntask_type: drill\nexecution: {handler: h}\n")
	// Cron triggers: one settled recently, one far behind, one never
	// planned, and one of a disabled task.
	apply("task_name: on-time\nowner: ops\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '@hourly'}]\n")
	apply("task_name: behind\nowner: ops\nexecution: {handler: h}\ntriggers: [{type: manual}, {type: cron, schedule: '*/5 * * * *', timezone: Europe/Berlin}]\n")
	apply("task_name: unplanned\nowner: ops\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '@every 10s'}]\n")
	apply("task_name: stopped\nowner: ops\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '@every 10s'}]\n")
	if _, err := st.SetTaskEnabled(ctx, "stopped", false, "alice"); err != nil {
		t.Fatal(err)
	}
	// The tasks changed a day ago, so every tick since then was due.
	if _, err := pool.Exec(ctx, `UPDATE tasks SET updated_at = now() - interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	behindTick := now.Add(-time.Hour).Truncate(5 * time.Minute)
	if err := st.SaveTriggerStates(ctx, []store.TriggerState{
		{Task: "on-time", TriggerIndex: 0, Schedule: "@hourly", Timezone: "UTC", LastTick: now.Truncate(time.Hour)},
		{Task: "behind", TriggerIndex: 1, Schedule: "*/5 * * * *", Timezone: "Europe/Berlin", LastTick: behindTick},
	}); err != nil {
		t.Fatal(err)
	}

	for range 3 {
		addRun(t, pool, "flaky", schemas.StateFailed, now, time.Second, "boom")
	}
	addRun(t, pool, "owned", schemas.StateFailed, now, time.Second, "once") // a streak of one is not reported
	for range 3 {
		addRun(t, pool, "drill-storm-flaky", schemas.StateFailed, now, time.Second, "drill")
	}
	for i := range 6 {
		addRun(t, pool, "slow", schemas.StateSucceeded, now.Add(-time.Duration(10-i)*time.Minute), time.Duration(10+i)*time.Second, "")
	}
	slowID := addRun(t, pool, "slow", schemas.StateSucceeded, now, time.Minute, "")

	rep, err := st.HealthReport(ctx, store.HealthOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ConsecutiveFailures) != 1 || rep.ConsecutiveFailures[0].Task != "flaky" || rep.ConsecutiveFailures[0].Failures != 3 {
		t.Errorf("consecutive failures = %+v", rep.ConsecutiveFailures)
	}
	if fmt.Sprint(rep.WithoutOwner) != "[orphan]" {
		t.Errorf("without owner = %v", rep.WithoutOwner)
	}
	if len(rep.MissedSchedules) != 2 {
		t.Fatalf("missed schedules = %+v, want behind and unplanned", rep.MissedSchedules)
	}
	behind, unplanned := rep.MissedSchedules[0], rep.MissedSchedules[1]
	if behind.Task != "behind" || behind.TriggerIndex != 1 || behind.LastTick == nil || !behind.LastTick.Equal(behindTick) ||
		!behind.ExpectedAt.Equal(behindTick.Add(5*time.Minute)) || behind.Timezone != "Europe/Berlin" {
		t.Errorf("behind = %+v", behind)
	}
	if unplanned.Task != "unplanned" || unplanned.LastTick != nil || now.Sub(unplanned.ExpectedAt) < 23*time.Hour {
		t.Errorf("unplanned = %+v, want its first tick a day ago", unplanned)
	}
	if len(rep.DurationOutliers) != 1 {
		t.Fatalf("duration outliers = %+v", rep.DurationOutliers)
	}
	if o := rep.DurationOutliers[0]; o.Task != "slow" || o.InstanceID != slowID || o.DurationSeconds != 60 || o.P95Seconds != 15 ||
		o.MedianSeconds != 12 || o.Runs != 6 {
		t.Errorf("outlier = %+v", o)
	}
	if rep.Rules.DurationOutliers == "" || rep.Rules.MissedSchedules == "" || rep.Rules.ConsecutiveFailures == "" {
		t.Errorf("rules = %+v", rep.Rules)
	}

	// Thresholds move what is reported.
	rep, err = st.HealthReport(ctx, store.HealthOptions{Now: now, MinFailures: 1, Factor: 10, Grace: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ConsecutiveFailures) != 2 || len(rep.DurationOutliers) != 0 || len(rep.MissedSchedules) != 0 {
		t.Errorf("with other thresholds: %+v", rep)
	}
}

// TestHealthReadsReadTheirRowsOnly plans the health report's reads of a
// task's latest ended instances (FailureStreaks) and SUCCEEDED runs
// (RecentRuns) on a table of 20,000 instances of one task, as a burst
// leaves it, after 10 older ones of another, not analysed and analysed:
// each reads about the rows it returns from the task's newest entry of
// (task, id DESC), for either task. Not every instance of the task (a
// bitmap scan of the task's entries and a sort of them for a LIMIT of 100),
// nor every newer one of any task (a backward scan of the primary key).
func TestHealthReadsReadTheirRowsOnly(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "hl", "few")
	// Of hl, the newest 50 are still running, and every tenth is a shard
	// of its first: rows the reads pass on their way.
	if _, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms,
			fired_at, started_at, finished_at, parent_id)
		SELECT CASE WHEN g <= 10 THEN 'few' ELSE 'hl' END, 1, 'e' || g, 'event',
			CASE WHEN g > 20010 - 50 THEN 'RUNNING' ELSE 'SUCCEEDED' END, 1, 'normal', 'default', 'h',
			1000, now(), now(), CASE WHEN g > 20010 - 50 THEN NULL ELSE now() END,
			CASE WHEN g > 11 AND g % 10 = 0 THEN currval(pg_get_serial_sequence('instances', 'id')) - (g - 11) END
		FROM generate_series(1, 20010) g`); err != nil {
		t.Fatal(err)
	}
	const limit = 100
	// The most rows a read passes for its latest 100 of hl: the 50 still
	// running, and the shards among the rest.
	const most = limit + 50 + limit/9 + 2
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := pool.Exec(ctx, `ANALYZE instances`); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range []struct{ name, sql string }{{"FailureStreaks", store.FailureStreaks}, {"RecentRuns", store.RecentRuns}} {
			// One task a plan, for its counts not to be averages over loops.
			for task, want := range map[string]int{"hl": most, "few": 10} {
				out, err := st.ReadLatest(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+q.sql, []string{task}, limit)
				var plan []map[string]any
				if err == nil {
					err = json.Unmarshal([]byte(out[0]), &plan)
				}
				if err != nil {
					t.Fatal(err)
				}
				if read := rowsRead(plan[0]["Plan"].(map[string]any), "instances"); read > want {
					t.Errorf("analysed %v: %s of %s read %d rows of instances, want at most %d:\n%v",
						analysed, q.name, task, read, want, plan)
				}
				// The plan the auditor runs: the generic one (store's
				// genericPlan), made without the task or the limit.
				generic := explainGeneric(t, pool, q.sql, fmt.Sprintf(`'{%s}', %d`, task, limit))
				if read := rowsRead(generic, "instances"); read > want {
					t.Errorf("analysed %v: %s of %s read %d rows of instances with the generic plan, want at most %d:\n%v",
						analysed, q.name, task, read, want, generic)
				}
			}
		}
	}
	streaks, err := st.FailureStreaks(ctx, []string{"hl", "few"}, limit)
	if err != nil || len(streaks) != 0 {
		t.Errorf("FailureStreaks = %v, %v; want none", streaks, err)
	}
	runs, err := st.RecentRuns(ctx, []string{"hl", "few", "none"}, limit)
	if err != nil || len(runs) != 2 || len(runs["hl"]) != limit || len(runs["few"]) != 10 {
		t.Fatalf("RecentRuns = %d tasks, %d runs of hl, %d of few, %v; want %d and 10", len(runs), len(runs["hl"]),
			len(runs["few"]), err, limit)
	}
	if r := runs["hl"]; r[0].InstanceID <= r[1].InstanceID {
		t.Errorf("RecentRuns of hl from %d then %d, want newest first", r[0].InstanceID, r[1].InstanceID)
	}
}

// explainGeneric runs sql with args (its parameters, written as SQL) under
// the generic plan, as the health reads run (no bitmap scans), on a
// connection of its own, and returns the plan as EXPLAIN ANALYZE gives it.
func explainGeneric(t *testing.T, pool *pgxpool.Pool, sql, args string) map[string]any {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, stmt := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_bitmapscan = off`, `PREPARE q AS ` + sql} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var out []byte
	if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE q(`+args+`)`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []map[string]any
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	return plan[0]["Plan"].(map[string]any)
}

// TestHealthReadsLeaveTheSettingsAlone: the health report's reads turn
// bitmap scans off and the generic plan on for their statement only; the
// connection they ran on plans as before afterwards, after a read that
// returned rows and after one that failed.
func TestHealthReadsLeaveTheSettingsAlone(t *testing.T) {
	t.Parallel()
	pool := storetest.NewOneConn(t) // every statement on the connection the reads used
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "bm")
	insertInstance(t, pool, "bm", "e1", schemas.StateDispatched, schemas.StateRunning, schemas.StateFailed)
	settings := func(after string) {
		t.Helper()
		for name, want := range map[string]string{"enable_bitmapscan": "on", "plan_cache_mode": "auto"} {
			var v string
			if err := pool.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != want {
				t.Errorf("%s %q after %s, want the server's %s", name, v, after, want)
			}
		}
	}
	if streaks, err := st.FailureStreaks(ctx, []string{"bm"}, 10); err != nil || len(streaks) != 1 {
		t.Fatalf("FailureStreaks = %v, %v; want bm's", streaks, err)
	}
	settings("FailureStreaks")
	if _, err := st.ReadLatest(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("a read that divides by zero did not fail")
	}
	settings("a failed read")
}
