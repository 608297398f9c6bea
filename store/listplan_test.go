package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestArchivedListUsesAnIndexForEveryFilter plans GET
// /v1/instances?archived=true for each filter it takes, on a history of
// 60,000 instances over 12 monthly partitions (and an archive), analysed:
// each filter reads about the rows it returns, never every partition to
// its end. A filter that matches nothing — a state no instance is in, a
// task without instances — reads (almost) none, whatever the history's
// size: before the history's indexes ending in id, it read all 60,000.
func TestArchivedListUsesAnIndexForEveryFilter(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	from := now.AddDate(-1, 0, 0)
	if _, err := st.EnsureHistoryPartitions(ctx, store.HistoryMonth, from, now); err != nil {
		t.Fatal(err)
	}
	// etl: 60,000 SUCCEEDED over the year, every 1,000th FAILED; rare: 5.
	const n = 60000
	for _, sql := range []string{`
		INSERT INTO instance_history (id, task, task_version, event_id, source, state, attempt, max_attempts,
			priority, pool, handler, timeout_ms, fired_at, created_at, finished_at, updated_at)
		SELECT g, CASE WHEN g % 12000 = 7 THEN 'rare' ELSE 'etl' END, 1, 'h-' || g, 'event',
			CASE WHEN g % 1000 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, 1, 1, 'normal', 'default', 'h', 1000,
			f, f, f, f
		FROM generate_series(1, $1::bigint) g,
			LATERAL (SELECT $2::timestamptz + ($3::timestamptz - $2::timestamptz) * (g::float8 / $1)) t(f)`,
		`INSERT INTO instance_archive (id, task, task_version, event_id, source, state, attempt, max_attempts,
			priority, pool, handler, timeout_ms, fired_at, created_at, finished_at, updated_at)
		SELECT $1 + g, 'etl', 1, 'a-' || g, 'event', 'SUCCEEDED', 1, 1, 'normal', 'default', 'h', 1000,
			$2::timestamptz, $2::timestamptz, $2::timestamptz, $3::timestamptz
		FROM generate_series(1, 2000) g`,
		`ANALYZE instance_history`, `ANALYZE instance_archive`,
	} {
		var err error
		if strings.HasPrefix(sql, "ANALYZE") {
			_, err = pool.Exec(ctx, sql)
		} else {
			_, err = pool.Exec(ctx, sql, n, from, now)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const limit = 50
	for _, tt := range []struct {
		name string
		f    store.InstanceFilter
		// most is the most rows the plan may read.
		most int
	}{
		{"newest", store.InstanceFilter{}, 2 * limit},
		{"a state none is in", store.InstanceFilter{State: schemas.StateRunning}, limit},
		{"a task without instances", store.InstanceFilter{Task: "none"}, limit},
		{"a task and a state none of it is in", store.InstanceFilter{Task: "rare", State: schemas.StateFailed}, limit},
		{"a rare state", store.InstanceFilter{State: schemas.StateFailed}, 2 * limit},
		{"a rare task", store.InstanceFilter{Task: "rare"}, limit},
		{"a task and a rare state", store.InstanceFilter{Task: "etl", State: schemas.StateFailed}, 2 * limit},
		// A window prunes the history's partitions to its months; the
		// archive, cold and small, is read by its primary key.
		{"a window", store.InstanceFilter{Since: now.AddDate(0, -2, 0), Until: now.AddDate(0, -1, 0)}, 2*limit + 2000},
		{"a window without instances", store.InstanceFilter{Since: now.AddDate(-3, 0, 0), Until: now.AddDate(-2, 0, 0)}, limit + 2000},
	} {
		tt.f.Archived, tt.f.Limit = true, limit
		sql, args := store.ListInstancesSQL(tt.f)
		var out []byte
		if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var plan []map[string]any
		if err := json.Unmarshal(out, &plan); err != nil {
			t.Fatal(err)
		}
		if read := rowsReadOf(plan[0]["Plan"].(map[string]any), "instance_history", "instance_archive"); read > tt.most {
			t.Errorf("%s: the plan read %d rows of the history and the archive, want at most %d:\n%s", tt.name, read, tt.most, out)
		}
		if _, err := st.ListInstances(ctx, tt.f); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// rowsReadOf is rowsRead over every table whose name starts with one of
// prefixes (a partitioned table's partitions).
func rowsReadOf(node map[string]any, prefixes ...string) int {
	n := 0
	if name, ok := node["Relation Name"].(string); ok {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				n += rowsRead(node, name)
				break
			}
		}
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			n += rowsReadOf(k.(map[string]any), prefixes...)
		}
	}
	return n
}

// The mover's choice reads the oldest candidates up to its limit, whatever
// the backlog behind them: a plan that checked every old instance and
// sorted the rest (the planner misjudges how many keys the history already
// holds) read the whole backlog on each call, so that a pass over a
// backlog of 100,000 spent 217 µs an instance choosing.
func TestMoverChoiceReadsNoMoreThanItTakes(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	// 5,000 ended instances of an hour ago, two transitions each, the
	// oldest 2,000 copied already (their keys in the history, the hot
	// rows not yet deleted), every transition relayed.
	const backlog, copied, limit = 5000, 2000, 100
	at := time.Now().Add(-time.Hour)
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO instances (id, task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, created_at, started_at, finished_at, updated_at, run_id, worker_id) OVERRIDING SYSTEM VALUE
		SELECT g, 'a', 1, 'm-' || g, 'event', 'SUCCEEDED', 1, 1, 'normal', 'default', 'h', 1000,
			f, f, f, f, f, 'run-' || g, 'w'
		FROM generate_series(1, $1::bigint) g, LATERAL (SELECT $2::timestamptz + g * interval '1 ms') t(f)`, []any{backlog, at}},
		{`INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, then_state, then_operator, at)
		SELECT g, 'a', f, t, 1, 'dispatcher', t2, 'worker:w', $2::timestamptz
		FROM generate_series(1, $1::bigint) g,
			(VALUES (1, NULL, 'CREATED', 'DISPATCHED'), (2, 'DISPATCHED', 'RUNNING', 'SUCCEEDED')) v(o, f, t, t2)`, []any{backlog, at}},
		{`INSERT INTO instance_history_keys (task, event_id, id, fired_at)
		SELECT task, event_id, id, fired_at FROM instances WHERE id <= $1`, []any{copied}},
		{`SELECT setval(pg_get_serial_sequence('instances', 'id'), $1::bigint)`, []any{backlog}},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatal(err)
		}
	}
	relayAll(t, pool)
	for _, sql := range []string{`ANALYZE instances`, `ANALYZE instance_transitions`, `ANALYZE instance_history_keys`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var done string
	if err := pool.QueryRow(ctx, `SELECT done::text FROM relay_cursor WHERE name = 'audit'`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+store.ChooseFamiliesSQL, time.Now(), limit, done).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []map[string]any
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	// The scan reads the copied ones and the chosen; a copied one costs a
	// look-up of its key, a chosen one a look-up or two in each table.
	most := 3 * (copied + limit)
	read := rowsReadOf(plan[0]["Plan"].(map[string]any), "instances", "instance_transitions", "instance_history_keys")
	t.Logf("choosing %d families read %d rows", limit, read)
	if read > most {
		t.Errorf("choosing %d families read %d rows, want at most %d (the backlog is %d):\n%s", limit, read, most, backlog, out)
	}
	var ids []int64
	if err := pool.QueryRow(ctx, store.ChooseFamiliesSQL, time.Now(), limit, done).Scan(&ids, new(*time.Time), new(*time.Time)); err != nil {
		t.Fatal(err)
	}
	if len(ids) != limit || ids[0] != copied+1 || ids[limit-1] != copied+limit {
		t.Errorf("chose %d families from %v to %v, want the oldest %d not copied: %d to %d", len(ids), ids[:min(1, len(ids))], ids[max(0, len(ids)-1):], limit, copied+1, copied+limit)
	}
}

// The mover's look for the copies still in the hot tables reads the hot
// rows and a key each, not every key of the history: as a join, the
// planner hashed them all (2.3 s a call with 10 M in the history, for a
// handful of hot rows).
func TestMoverLooksUpCopiesByTheirKeys(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	ctx := t.Context()
	applyTasks(t, store.New(pool), "a")
	// 50,000 keys of moved instances; 200 hot ended instances, 100 of them copied.
	const history, hot, copied = 50000, 200, 100
	at := time.Now().Add(-time.Hour)
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO instance_history_keys (task, event_id, id, fired_at)
		SELECT 'a', 'h-' || g, g, $2 FROM generate_series(1, $1::bigint) g`, []any{history, at}},
		{`INSERT INTO instances (id, task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, created_at, finished_at, updated_at) OVERRIDING SYSTEM VALUE
		SELECT $1 + g, 'a', 1, 'm-' || g, 'event', 'SUCCEEDED', 1, 1, 'normal', 'default', 'h', 1000, $3, $3, $3, $3
		FROM generate_series(1, $2::bigint) g`, []any{history, hot, at}},
		{`INSERT INTO instance_history_keys (task, event_id, id, fired_at)
		SELECT task, event_id, id, fired_at FROM instances WHERE id <= $1`, []any{history + copied}},
		{`ANALYZE instances`, nil}, {`ANALYZE instance_history_keys`, nil},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatal(err)
		}
	}
	q := `SELECT count(*) FROM ` + store.CopiedHot
	var out []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+q, time.Now()).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []map[string]any
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	read, most := rowsReadOf(plan[0]["Plan"].(map[string]any), "instances", "instance_history_keys"), 2*hot
	t.Logf("looking for the copies read %d rows", read)
	if read > most {
		t.Errorf("looking for the copies among %d hot instances read %d rows, want at most %d (the history holds %d keys):\n%s",
			hot, read, most, history+copied, out)
	}
	var n int
	if err := pool.QueryRow(ctx, q, time.Now()).Scan(&n); err != nil || n != copied {
		t.Errorf("found %d copies still hot (%v), want %d", n, err, copied)
	}
}
