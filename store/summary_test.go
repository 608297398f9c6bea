package store_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestInstanceSummary: the summary counts every instance fired in its
// window, by state and bucket, however many there are, and takes the run
// time percentiles over those that ran.
func TestInstanceSummary(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "etl", "other")
	since := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

	// etl: 600 SUCCEEDED in the first minute, with run times 1..600 ms;
	// 200 FAILED in the second, of 1 s each; 3 RUNNING in the third.
	// other: 5 SUCCEEDED in the first. Outside the window: one before, one at
	// its end.
	_, err := pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, started_at, finished_at)
		SELECT 'etl', 1, 'ok-' || n, 'event', 'SUCCEEDED', 1, 'normal', 'default', 'builtin.echo', 60000,
			$1::timestamptz + n * interval '10 ms', $1::timestamptz + interval '1 s',
			$1::timestamptz + interval '1 s' + n * interval '1 ms'
		FROM generate_series(1, 600) n`, since)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, started_at, finished_at)
		SELECT 'etl', 1, 'bad-' || n, 'event', 'FAILED', 1, 'normal', 'default', 'builtin.echo', 60000,
			$1::timestamptz + interval '1 minute' + n * interval '10 ms', $1::timestamptz + interval '2 minutes',
			$1::timestamptz + interval '2 minutes 1 second'
		FROM generate_series(1, 200) n`, since)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := insertInstance(t, pool, "etl", fmt.Sprintf("run-%d", i), schemas.StateDispatched, schemas.StateRunning)
		if _, err := pool.Exec(ctx, `UPDATE instances SET fired_at = $2, started_at = $2 WHERE id = $1`, id, since.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for i, at := range []time.Time{since, since, since, since, since.Add(59 * time.Second), since.Add(-time.Millisecond), since.Add(3 * time.Minute)} {
		id := insertInstance(t, pool, "other", fmt.Sprintf("o-%d", i), schemas.StateSucceeded)
		if _, err := pool.Exec(ctx, `UPDATE instances SET fired_at = $2 WHERE id = $1`, id, at); err != nil {
			t.Fatal(err)
		}
	}

	sum, err := st.InstanceSummary(ctx, store.SummaryFilter{Since: since, Until: since.Add(3 * time.Minute), Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 808 || sum.States[schemas.StateSucceeded] != 605 || sum.States[schemas.StateFailed] != 200 ||
		sum.States[schemas.StateRunning] != 3 || sum.States[schemas.StateCancelled] != 0 || len(sum.States) != 10 {
		t.Errorf("summary counts %d instances, by state %v; want 808: 605 SUCCEEDED, 200 FAILED, 3 RUNNING", sum.Total, sum.States)
	}
	if sum.SuccessRate == nil || *sum.SuccessRate != 605.0/805 {
		t.Errorf("success rate = %v, want 605/805", ptr(sum.SuccessRate))
	}
	// The run times: 600 of 1..600 ms, 200 of 1000 ms.
	rt := sum.RunTime
	if rt.Count != 800 || !near(rt.P50, 400.5) || !near(rt.Max, 1000) || !near(rt.P95, 1000) || !near(rt.P99, 1000) {
		t.Errorf("run time = count %d p50 %v p95 %v p99 %v max %v; want 800, 400.5, 1000, 1000, 1000",
			rt.Count, ptr(rt.P50), ptr(rt.P95), ptr(rt.P99), ptr(rt.Max))
	}
	if sum.StepSeconds != 60 || len(sum.Series) != 3 {
		t.Fatalf("series of %d buckets of %vs, want 3 of 60s", len(sum.Series), sum.StepSeconds)
	}
	for i, want := range []schemas.SummaryBucket{
		{Start: since, Total: 605, Succeeded: 605},
		{Start: since.Add(time.Minute), Total: 200, Failed: 200},
		{Start: since.Add(2 * time.Minute), Total: 3},
	} {
		b := sum.Series[i]
		if !b.Start.Equal(want.Start) || b.Total != want.Total || b.Succeeded != want.Succeeded || b.Failed != want.Failed {
			t.Errorf("bucket %d = %+v, want %+v", i, b, want)
		}
	}
	if b := sum.Series[0].RunTime; b.Count != 600 || !near(b.P50, 300.5) || !near(b.Max, 600) {
		t.Errorf("bucket 0 run time = count %d p50 %v max %v, want 600, 300.5, 600", b.Count, ptr(b.P50), ptr(b.Max))
	}
	if b := sum.Series[2].RunTime; b.Count != 0 || b.P50 != nil {
		t.Errorf("bucket 2 run time = count %d p50 %v, want none", b.Count, ptr(b.P50))
	}

	// One task; a window without an ended instance has no rate or run time.
	one, err := st.InstanceSummary(ctx, store.SummaryFilter{Task: "other", Since: since, Until: since.Add(3 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if one.Total != 5 || one.Series != nil || one.RunTime.Count != 0 {
		t.Errorf("summary of other = total %d, %d buckets, %d run times; want 5, no series, none", one.Total, len(one.Series), one.RunTime.Count)
	}
	empty, err := st.InstanceSummary(ctx, store.SummaryFilter{Since: since.Add(2 * time.Minute), Until: since.Add(3 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if empty.Total != 3 || empty.SuccessRate != nil || empty.RunTime.P50 != nil {
		t.Errorf("summary of the third minute = total %d rate %v p50 %v, want 3 and no rate or run time", empty.Total, ptr(empty.SuccessRate), ptr(empty.RunTime.P50))
	}

	for _, f := range []store.SummaryFilter{
		{Since: since},
		{Since: since, Until: since},
		{Since: since, Until: since.Add(time.Hour), Step: time.Second},
	} {
		if _, err := st.InstanceSummary(ctx, f); err == nil {
			t.Errorf("InstanceSummary(%+v) succeeded, want an error", f)
		}
	}
}

// near reports whether *p is within a microsecond of want milliseconds.
func near(p *float64, want float64) bool {
	return p != nil && math.Abs(*p-want) < 1e-3
}

func ptr(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestInstanceSummaryCountsMovedInstances: instances the history mover
// moved out of the hot table still count in the summary of their window,
// once each, beside those still hot.
func TestInstanceSummaryCountsMovedInstances(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	old := time.Date(2026, 3, 14, 15, 0, 0, 0, time.UTC)
	create(t, st, firedAt("a", "e1", old), firedAt("a", "e2", old.Add(time.Minute)), firedAt("a", "e3", old.Add(2*time.Minute)))
	relayAll(t, pool)
	if res := moveAll(t, st); res.Moved != 3 {
		t.Fatalf("MoveHistory = %+v, want 3 moved", res)
	}
	create(t, st, firedAt("a", "e4", old.Add(3*time.Minute)))
	if n := count(t, pool, `SELECT count(*) FROM instances`); n != 1 {
		t.Fatalf("%d instances in the hot table, want 1", n)
	}
	sum, err := st.InstanceSummary(ctx, store.SummaryFilter{Task: "a", Since: old, Until: old.Add(time.Hour), Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 4 || sum.States[schemas.StateSkipped] != 4 || sum.Series[0].Total != 1 || sum.Series[3].Total != 1 {
		t.Errorf("summary = total %d, states %v, series %+v; want the 3 moved instances and the hot one", sum.Total, sum.States, sum.Series[:4])
	}
}
