package store_test

import (
	"testing"

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
