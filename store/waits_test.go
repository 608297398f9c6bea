package store_test

import (
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestWaits records, keeps, changes and prunes instances' wait reasons: a
// reason written again unchanged keeps its since, a changed one restarts
// it, and WaitOf shows a reason only for the instance's current attempt
// while it waits.
func TestWaits(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "w")
	made := create(t, st, newRunInstance("w", "e1", "", schemas.StateDispatched), newRunInstance("w", "e2", "", schemas.StateDispatched))
	a, b := made[0].ID, made[1].ID
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	wait := func(id int64, kind schemas.WaitKind, reason string, at time.Duration) store.Wait {
		return store.Wait{InstanceID: id, Attempt: 1, Kind: kind, Reason: reason, Ends: "start one", Since: t0.Add(at)}
	}
	if err := st.SetWaits(ctx, []store.Wait{wait(a, schemas.WaitUnservedPool, "nobody serves", 0), wait(b, schemas.WaitNoWorker, "none", 0)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWaits(ctx, []store.Wait{wait(a, schemas.WaitUnservedPool, "nobody serves", time.Minute), wait(b, schemas.WaitWorkerGone, "gone", time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Waits(ctx, []int64{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if !got[a].Since.Equal(t0) || got[a].Kind != schemas.WaitUnservedPool {
		t.Errorf("an unchanged reason: %+v, want its first since %v", got[a], t0)
	}
	if !got[b].Since.Equal(t0.Add(time.Minute)) || got[b].Kind != schemas.WaitWorkerGone || got[b].Reason != "gone" {
		t.Errorf("a changed reason: %+v, want the new one since %v", got[b], t0.Add(time.Minute))
	}
	in, err := st.GetInstance(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := got[a]
	if shown := store.WaitOf(in, w, ok); shown == nil || shown.Reason != "nobody serves" || shown.Ends != "start one" {
		t.Errorf("WaitOf a waiting instance = %+v", shown)
	}
	in.Attempt = 2
	if shown := store.WaitOf(in, w, ok); shown != nil {
		t.Errorf("WaitOf a later attempt = %+v, want nil", shown)
	}
	in.Attempt, in.State = 1, schemas.StateRunning
	if shown := store.WaitOf(in, w, ok); shown != nil {
		t.Errorf("WaitOf a running instance = %+v, want nil", shown)
	}

	// b runs: pruning drops its reason and keeps a's.
	if _, err := pool.Exec(ctx, `UPDATE instances SET state = 'RUNNING' WHERE id = $1`, b); err != nil {
		t.Fatal(err)
	}
	if err := st.PruneWaits(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.ClearWaits(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err = st.Waits(ctx, []int64{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got[b]; ok || len(got) != 1 {
		t.Errorf("after pruning: %+v, want a's reason only", got)
	}
	if err := st.ClearWaits(ctx, []int64{a}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Waits(ctx, []int64{a}); err != nil || len(got) != 0 {
		t.Errorf("after clearing: %+v, %v", got, err)
	}
}
