package store_test

import (
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestApplyProgress walks one attempt's progress through the rules of
// ApplyProgress: before the started report too, only from its holder, only
// newer than the stored one, the newest of a batch, never after the end,
// and never a transition.
func TestApplyProgress(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "prog")
	made := create(t, st, newRunInstance("prog", "e1", "", schemas.StateDispatched))
	id := made[0].ID
	t0 := time.Now().Truncate(time.Millisecond)
	progress := func(worker string, at time.Duration, done int64, msg string) schemas.Report {
		return schemas.Report{InstanceID: id, Attempt: 1, WorkerID: worker, Pool: "default", Handlers: []string{"h"}, Kind: schemas.ReportProgress,
			StartedAt: t0, At: t0.Add(at), Progress: &schemas.Progress{Done: done, Total: 10, Message: msg}}
	}
	apply := func(reps ...schemas.Report) []store.ProgressOutcome {
		t.Helper()
		out, err := st.ApplyProgress(ctx, reps)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(reps) {
			t.Fatalf("%d outcomes for %d reports", len(out), len(reps))
		}
		return out
	}
	stored := func() *schemas.InstanceProgress {
		t.Helper()
		in, err := st.GetInstance(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return in.Progress
	}

	// DISPATCHED: no started report has come (a short attempt sends
	// none); the progress is written all the same, from a worker of the
	// pool (the attempt has no holder yet), and not from another pool.
	early := progress("w1", 0, 1, "early")
	early.Pool = "gpu"
	if o := apply(early)[0]; o.Applied || !o.Refused {
		t.Fatalf("progress from another pool while DISPATCHED = %+v; want refused", o)
	}
	if o := apply(progress("w1", 0, 1, "early"))[0]; !o.Applied || o.Refused || o.State != schemas.StateDispatched {
		t.Fatalf("progress while DISPATCHED = %+v; want applied", o)
	}
	if p := stored(); p == nil || p.Done != 1 || p.Message != "early" {
		t.Fatalf("stored progress = %+v; want the early one", p)
	}
	if _, err := st.ApplyReports(ctx, []schemas.Report{{InstanceID: id, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"h"},
		Kind: schemas.ReportStarted, StartedAt: t0, At: t0}}, nil); err != nil {
		t.Fatal(err)
	}
	before, err := st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	updatedAt := func() (at time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT updated_at FROM instances WHERE id = $1`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	updatedBefore := updatedAt()

	// The newest of a batch is written, and only it.
	out := apply(progress("w1", time.Second, 2, "two"), progress("w1", 3*time.Second, 4, "four"), progress("w1", 2*time.Second, 3, "three"))
	if !out[1].Applied || out[0].Applied || out[2].Applied {
		t.Fatalf("batch outcomes = %+v; want only the newest (the second) applied", out)
	}
	want := schemas.InstanceProgress{Attempt: 1, Done: 4, Total: 10, Message: "four", At: t0.Add(3 * time.Second)}
	if p := stored(); p == nil || p.Done != want.Done || p.Message != want.Message || !p.At.Equal(want.At) || p.Attempt != 1 || p.Total != 10 {
		t.Fatalf("stored progress = %+v; want %+v", p, want)
	}

	// Older, or as old with no more done: a late delivery, dropped.
	for _, r := range []schemas.Report{progress("w1", 2*time.Second, 9, "late"), progress("w1", 3*time.Second, 4, "again")} {
		if o := apply(r)[0]; o.Applied || o.Refused {
			t.Errorf("progress at %v done %d = %+v; want dropped as not newer", r.At.Sub(t0), r.Progress.Done, o)
		}
	}
	// Same at, more done: newer.
	if o := apply(progress("w1", 3*time.Second, 5, ""))[0]; !o.Applied {
		t.Errorf("progress at the same time with more done = %+v; want applied", o)
	}
	if p := stored(); p.Done != 5 || p.Message != "" {
		t.Errorf("stored progress = %+v; want done 5 and no message", p)
	}

	// Another worker of the pool, or another pool: refused.
	forged := progress("w2", time.Hour, 9, "forged")
	otherPool := progress("w1", time.Hour, 9, "forged")
	otherPool.Pool = "gpu"
	for _, r := range []schemas.Report{forged, otherPool} {
		if o := apply(r)[0]; o.Applied || !o.Refused || o.WorkerID != "w1" {
			t.Errorf("progress from worker %s of pool %s = %+v; want refused, the holder w1", r.WorkerID, r.Pool, o)
		}
	}
	// Another attempt: dropped, not refused.
	other := progress("w1", time.Hour, 9, "attempt 2")
	other.Attempt = 2
	if o := apply(other)[0]; o.Applied || o.Refused {
		t.Errorf("progress of attempt 2 = %+v; want dropped", o)
	}
	if p := stored(); p.Done != 5 {
		t.Errorf("stored progress = %+v after refused reports; want done 5 still", p)
	}

	// No transition, no updated_at.
	after, err := st.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Transitions) != len(before.Transitions) || after.State != schemas.StateRunning || !updatedAt().Equal(updatedBefore) {
		t.Errorf("progress changed the instance: %d transitions, state %s, updated_at %v; want %d, RUNNING, %v",
			len(after.Transitions), after.State, updatedAt(), len(before.Transitions), updatedBefore)
	}

	// Once the attempt ended, nothing more, and the last progress stays.
	if _, err := st.ApplyReports(ctx, nil, []schemas.Report{{InstanceID: id, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"h"},
		Kind: schemas.ReportSucceeded, StartedAt: t0, At: t0.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if o := apply(progress("w1", 2*time.Hour, 10, "after"))[0]; o.Applied || o.Refused || o.State != schemas.StateSucceeded {
		t.Errorf("progress after the end = %+v; want dropped", o)
	}
	if p := stored(); p == nil || p.Done != 5 {
		t.Errorf("stored progress after the end = %+v; want done 5 kept", p)
	}
	// An unknown instance: not found.
	unknown := progress("w1", 0, 1, "")
	unknown.InstanceID = id + 1000
	if o := apply(unknown)[0]; o.Found || o.Applied {
		t.Errorf("progress of an unknown instance = %+v; want not found", o)
	}
}

// TestApplyProgressCostsOneHOTUpdatePerAttempt counts what a batch of
// progress reports writes: one row update per attempt, however many
// reports of it the batch holds, and each a HOT update (the progress
// column has no index and nothing indexed changes), which writes no index
// entry. An index on the column, or a write of an indexed one, would fail it.
func TestApplyProgressCostsOneHOTUpdatePerAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// One connection, so that the statistics it flushes are all there are.
	pool := storetest.NewOneConn(t)
	st := store.New(pool)
	applyTasks(t, st, "prog")
	made := create(t, st, newRunInstance("prog", "e1", "", schemas.StateDispatched),
		newRunInstance("prog", "e2", "", schemas.StateDispatched), newRunInstance("prog", "e3", "", schemas.StateDispatched))
	t0 := time.Now()
	var started, progress []schemas.Report
	for _, m := range made {
		started = append(started, schemas.Report{InstanceID: m.ID, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"h"},
			Kind: schemas.ReportStarted, StartedAt: t0, At: t0})
		for i := range 4 {
			progress = append(progress, schemas.Report{InstanceID: m.ID, Attempt: 1, WorkerID: "w1", Pool: "default", Handlers: []string{"h"},
				Kind: schemas.ReportProgress, StartedAt: t0, At: t0.Add(time.Duration(i) * time.Second),
				Progress: &schemas.Progress{Done: int64(i), Total: 4}})
		}
	}
	if _, err := st.ApplyReports(ctx, started, nil); err != nil {
		t.Fatal(err)
	}
	updates := func() (all, hot int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables, pg_stat_clear_snapshot()
			WHERE relid = 'instances'::regclass`).Scan(&all, &hot); err != nil {
			t.Fatal(err)
		}
		return all, hot
	}
	all0, hot0 := updates()
	out, err := st.ApplyProgress(ctx, progress)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, o := range out {
		if o.Applied {
			applied++
		}
	}
	all, hot := updates()
	if applied != 3 || all-all0 != 3 || hot-hot0 != 3 {
		t.Errorf("%d progress reports of 3 attempts: %d applied, %d row updates of which %d HOT; want 3, 3, 3",
			len(progress), applied, all-all0, hot-hot0)
	}
}
