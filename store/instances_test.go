package store_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestCreateInstancesRepeatedKeys creates batches that repeat keys: one
// already created before (the unique index refuses the plain insert and the
// batch goes in with ON CONFLICT) and one twice in the same batch, with and
// without a key created before. Each key has one instance, returned for
// every batch that names it, with its CREATED and DISPATCHED transitions
// once.
func TestCreateInstancesRepeatedKeys(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "rk")
	ids := make(map[string]int64)
	create := func(events ...string) {
		t.Helper()
		in := make([]store.NewInstance, len(events))
		for i, e := range events {
			in[i] = newRunInstance("rk", e, "", schemas.StateDispatched)
		}
		made, err := st.CreateInstances(ctx, in)
		if err != nil {
			t.Fatalf("create %v: %v", events, err)
		}
		got := make(map[string]bool)
		for _, a := range made {
			id, ok := ids[a.EventID]
			if ok && id != a.ID {
				t.Fatalf("create %v: event %s is instance %d, was %d", events, a.EventID, a.ID, id)
			}
			// An instance made by an earlier call may have had its attempt
			// published: the dispatcher must say so when it publishes it again.
			if a.Republished != ok {
				t.Fatalf("create %v: event %s returned with Republished %v, want %v (made before: %v)", events, a.EventID, a.Republished, ok, ok)
			}
			ids[a.EventID] = a.ID
			got[a.EventID] = true
		}
		if len(made) != len(got) {
			t.Fatalf("create %v: %d instances returned for %d keys", events, len(made), len(got))
		}
		for _, e := range events {
			if !got[e] {
				t.Fatalf("create %v: no instance returned for %s (got %v)", events, e, made)
			}
		}
	}
	create("e0", "e1")
	create("e1", "e2") // e1 exists: the plain insert skips it
	create("e3", "e2", "e3", "e4")
	create("e0", "e4", "e5")
	create("e6", "e6")
	var instances, created, dispatched, other int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM instances),
		count(*) FILTER (WHERE from_state IS NULL AND to_state = 'CREATED'),
		count(*) FILTER (WHERE from_state = 'CREATED' AND to_state = 'DISPATCHED'),
		count(*) FILTER (WHERE NOT (from_state IS NULL AND to_state = 'CREATED') AND NOT (from_state = 'CREATED' AND to_state = 'DISPATCHED'))
		FROM instance_transition_log`).Scan(&instances, &created, &dispatched, &other); err != nil {
		t.Fatal(err)
	}
	if instances != 7 || created != 7 || dispatched != 7 || other != 0 || len(ids) != 7 {
		t.Fatalf("%d instances (%d returned), %d CREATED, %d DISPATCHED, %d other transitions; want 7 of each and no other",
			instances, len(ids), created, dispatched, other)
	}
}

// TestCreateInstancesFieldsAndDefaults creates a firing with every optional
// field set and one with none: the batch leaves out the empty fields, and
// each column holds what was given, or its default.
func TestCreateInstancesFieldsAndDefaults(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "fd")
	parent := create(t, st, newRunInstance("fd", "parent", "", schemas.StateDispatched))[0]
	full := newRunInstance("fd", "full", "run-x", schemas.StateSkipped)
	full.Operator, full.MutexTemplate, full.Reason, full.CreatedReason = "alice", "m-{{.a}}", "skipped: paused", "rerun of instance 1"
	full.RetryPolicy = schemas.Retry{MaxAttempts: 3, Backoff: "exp"}
	full.Route = store.Route{Strategy: schemas.DispatchHash, Key: "{{.k}}", MinWorkerVersion: "1.2.0"}
	full.Shard = store.Shard{ParentID: parent.ID, ShardIndex: 1, ShardCount: 2}
	create(t, st, full, newRunInstance("fd", "bare", "", schemas.StateDispatched))
	const row = `SELECT i.operator || '|' || i.mutex_template || '|' || i.retry_policy::text || '|' || i.run_id || '|' ||
		i.dispatch_strategy || '|' || i.dispatch_key || '|' || i.min_worker_version || '|' || COALESCE(i.parent_id, 0) || '|' ||
		i.shard_index || '|' || i.shard_count || '|' || i.state || '|' || t.operator || '|' || t.reason || '|' ||
		t.then_state || '|' || t.then_reason
		FROM instances i JOIN instance_transitions t ON t.instance_id = i.id WHERE i.event_id = $1`
	for _, c := range []struct{ event, want string }{
		{"full", `alice|m-{{.a}}|{"backoff": "exp", "max_attempts": 3}|run-x|hash|{{.k}}|1.2.0|` +
			strconv.FormatInt(parent.ID, 10) + `|1|2|SKIPPED|alice|rerun of instance 1|SKIPPED|skipped: paused`},
		// The batch is sorted by key: bare's id is drawn first.
		{"bare", `||{}|run-` + strconv.FormatInt(parent.ID+1, 10) + `|pull|||0|0|0|DISPATCHED|event||DISPATCHED|`},
	} {
		var got string
		if err := pool.QueryRow(ctx, row, c.event).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: columns %s, want %s", c.event, got, c.want)
		}
	}
}

// TestWaitingLookReadsTheWaitingIndex plans PromoteWaiting's first look (does
// a task of a batch of ends have WAITING instances?) on a table that holds
// thousands of ended instances of the task and has not been analysed, as in
// a burst, and analysed: it reads an index of the WAITING instances
// (instances_waiting_idx, or the live instances' on state), not the task's
// entries of (task, id) or (task, event_id), which hold every instance of
// the task.
func TestWaitingLookReadsTheWaitingIndex(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "wl")
	if _, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms, fired_at)
		SELECT 'wl', 1, 'e' || g, 'event', CASE WHEN g % 1000 = 0 THEN 'RUNNING' ELSE 'SUCCEEDED' END, 1, 'normal', 'default', 'h',
			1000, now()
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := pool.Exec(ctx, `ANALYZE instances`); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := pool.Query(ctx, `EXPLAIN (COSTS OFF) `+store.WithWaiting, []string{"wl"})
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "instances_task_id_idx") || strings.Contains(plan, "instances_task_event_id_key") ||
			!strings.Contains(plan, "instances_waiting_idx") && !strings.Contains(plan, "instances_live_idx") {
			t.Errorf("analysed %v: the look's plan reads more than the WAITING instances:\n%s", analysed, plan)
		}
	}
}

// TestCreationLeavesThePlanModeAlone: the creation statement runs with
// the generic plan, and the connection it ran on is back at the server's
// plan_cache_mode afterwards: after a batch of new keys, and after one
// whose plain insert failed on a key made before.
func TestCreationLeavesThePlanModeAlone(t *testing.T) {
	t.Parallel()
	pool := storetest.NewOneConn(t) // every statement on the connection the creations used
	st := store.New(pool)
	applyTasks(t, st, "pm")
	mode := func(after string) {
		t.Helper()
		var m string
		if err := pool.QueryRow(t.Context(), `SHOW plan_cache_mode`).Scan(&m); err != nil {
			t.Fatal(err)
		}
		if m != "auto" {
			t.Errorf("plan_cache_mode %q after %s, want the server's auto", m, after)
		}
	}
	for _, events := range [][]string{{"e0"}, {"e0", "e1"}} {
		in := make([]store.NewInstance, len(events))
		for i, e := range events {
			in[i] = newRunInstance("pm", e, "", schemas.StateDispatched)
		}
		made, err := st.CreateInstances(t.Context(), in)
		if err != nil || len(made) != len(events) {
			t.Fatalf("create %v: %d instances, %v", events, len(made), err)
		}
		mode(fmt.Sprintf("creating %v", events))
	}
}

// TestCreateInstancesRefusesAChangedTask: an instance made from a task's
// record as GetTasks read it (its Stamp) is created only while the task's
// row is that version. Once the task has changed — here paused — the batch
// that holds it is refused whole with IsTaskChanged, by every statement that
// creates instances, and a record read anew creates it.
func TestCreateInstancesRefusesAChangedTask(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a", "b")
	read := func() map[string]store.TaskRecord {
		t.Helper()
		recs, err := st.GetTasks(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		for name, rec := range recs {
			if rec.Stamp == "" {
				t.Fatalf("GetTasks: task %s has no stamp", name)
			}
		}
		return recs
	}
	stamped := func(recs map[string]store.TaskRecord, task, event string) store.NewInstance {
		in := newRunInstance(task, event, "", schemas.StateDispatched)
		in.TaskStamp = recs[task].Stamp
		return in
	}
	instances := func() int { return count(t, pool, `SELECT count(*) FROM instances`) }
	old := read()
	if _, err := st.CreateInstances(ctx, []store.NewInstance{stamped(old, "a", "a1"), stamped(old, "b", "b1")}); err != nil {
		t.Fatalf("create from the tasks as read: %v", err)
	}
	if _, err := st.SetTaskPaused(ctx, "a", true, "ops"); err != nil {
		t.Fatal(err)
	}
	fresh := read()
	if fresh["a"].Stamp == old["a"].Stamp || fresh["b"].Stamp != old["b"].Stamp {
		t.Fatalf("stamps after pausing a: a %s → %s, b %s → %s; want a's new and b's the same",
			old["a"].Stamp, fresh["a"].Stamp, old["b"].Stamp, fresh["b"].Stamp)
	}
	_, err := st.CreateInstances(ctx, []store.NewInstance{stamped(old, "a", "a2"), stamped(old, "b", "b2")})
	if !store.IsTaskChanged(err) {
		t.Fatalf("create from a's record before its pause: err %v, want IsTaskChanged", err)
	}
	if n := instances(); n != 2 {
		t.Fatalf("%d instances after the refused batch, want the 2 made before it", n)
	}
	_, _, err = st.CreateLimitedInstances(ctx, "a", 1, schemas.BlockSerial, []store.NewInstance{stamped(old, "a", "a3")})
	if !store.IsTaskChanged(err) {
		t.Fatalf("CreateLimitedInstances from a's record before its pause: err %v, want IsTaskChanged", err)
	}
	_, err = st.CreateAdmittedInstances(ctx, "a", nil, []store.NewInstance{stamped(old, "a", "a4")})
	if !store.IsTaskChanged(err) {
		t.Fatalf("CreateAdmittedInstances from a's record before its pause: err %v, want IsTaskChanged", err)
	}
	if n := instances(); n != 2 {
		t.Fatalf("%d instances after the refused statements, want 2", n)
	}
	if _, err := st.CreateInstances(ctx, []store.NewInstance{stamped(old, "b", "b2"), stamped(fresh, "a", "a2")}); err != nil {
		t.Fatalf("create from a's record read again and b's unchanged one: %v", err)
	}
	if n := instances(); n != 4 {
		t.Fatalf("%d instances, want 4", n)
	}
}
