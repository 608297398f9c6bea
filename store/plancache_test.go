package store_test

import (
	"testing"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestShortListStatementsArePlannedOnce runs the statements the dispatcher
// and the auditor run with a few task names or runs at a time, as often as
// a steady load does, and asks the server how it planned them: once, the
// generic plan, and never a custom plan for the list at hand. Left to
// choose, the server kept a custom plan for each call (the list's length
// makes a custom plan look cheaper than the generic one, made for ten),
// 40 to 340 µs of planning a call.
func TestShortListStatementsArePlannedOnce(t *testing.T) {
	t.Parallel()
	pool := storetest.NewOneConn(t) // one connection: its prepared statements are all of them
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "once-a", "once-b")
	const calls = 8
	for i := range calls {
		tasks := []string{"once-a", "once-b"}[:1+i%2]
		if _, err := st.GetTasks(ctx, tasks); err != nil {
			t.Fatal(err)
		}
		ends := []store.RunEnd{{Task: "once-a", RunID: "run-1"}, {Task: "once-b", RunID: "run-2"}}[:1+i%2]
		if _, err := st.ChainFirings(ctx, ends); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PromoteWaiting(ctx, tasks); err != nil {
			t.Fatal(err)
		}
		if _, err := st.FailureStreaks(ctx, tasks, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecentRuns(ctx, tasks, 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct{ name, sql string }{
		{"GetTasks", store.TasksNamed}, {"ChainFirings", store.ChainParentsSQL}, {"PromoteWaiting", store.WithWaiting},
		{"FailureStreaks", store.FailureStreaks}, {"RecentRuns", store.RecentRuns},
	} {
		var generic, custom int64
		if err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
			q.sql).Scan(&generic, &custom); err != nil {
			t.Fatalf("%s: its statement among the connection's prepared ones: %v", q.name, err)
		}
		if custom != 0 || generic != calls {
			t.Errorf("%s: %d calls ran %d custom plans and %d times the generic plan, want the generic plan every time",
				q.name, calls, custom, generic)
		}
	}
}
