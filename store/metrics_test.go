package store_test

import (
	"fmt"
	"testing"
	"time"

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
