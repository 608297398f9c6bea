package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
)

// runBook counts the runs of each (task, event id), as a handler that
// writes down what it did would.
type runBook struct {
	mu   sync.Mutex
	runs map[string]int
}

func newRunBook() *runBook { return &runBook{runs: map[string]int{}} }

func (l *runBook) handler(_ context.Context, j *executor.Job) (any, error) {
	l.mu.Lock()
	l.runs[j.Name+" "+j.EventID]++
	l.mu.Unlock()
	return nil, nil
}

func (l *runBook) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.runs))
	for k, v := range l.runs {
		out[k] = v
	}
	return out
}

// startTrigger runs a trigger service on the real clock whose backfill
// loop looks every 50ms.
func (s *system) startTrigger() {
	s.t.Helper()
	conn, _ := s.srv.Connect()
	tr, err := trigger.New(trigger.Options{Conn: conn, Store: s.store, Logger: s.log, BackfillPoll: 50 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	servicetest.Start(s.t, "trigger", tr)
}

// TestBackfillRunsEachTickOnce backfills 30 daily ticks of a schedule
// while a live task takes 10 firings a second: each tick runs exactly once
// (the handler's runBook), with the tick's own event id and the reason
// "backfill N"; ticks an earlier backfill ran are found, not fired again;
// the live task's median start latency stays within its bound (a median:
// a p99 of the 20 or so live starts of the backfill is their slowest, which
// a busy machine's stall decides, not the backfill); re-running
// the same backfill creates nothing; a cancelled backfill fires no more.
func TestBackfillRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: daily-load
execution:
  handler: test.runBook
triggers:
  - type: cron
    schedule: "0 0 3 * * *"
    timezone: Europe/Paris
`)
	s.apply(`
task_name: live
execution:
  handler: test.runBook
`)
	book := newRunBook()
	mux := builtinsMux()
	mux.HandleFunc("test.runBook", book.handler)
	s.executor("w1", mux, 8)
	s.startTrigger()
	ctx := context.Background()

	// The live task: 10 firings a second, each stamped with when it left.
	liveCtx, stopLive := context.WithCancel(ctx)
	var liveWG sync.WaitGroup
	liveWG.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-liveCtx.Done():
				return
			case <-tick.C:
			}
			ev := schemas.TriggerEvent{EventID: fmt.Sprintf("live-%d", i), FiredAt: time.Now().UTC()}
			if _, err := streams.Publish(liveCtx, s.js, s.srv.Topology.Trigger("live"), ev.EventID, ev); err != nil && liveCtx.Err() == nil {
				t.Errorf("publish live firing: %v", err)
				return
			}
		}
	})
	defer func() { stopLive(); liveWG.Wait() }()
	latencies := func(since, until time.Time) []time.Duration {
		rows, err := s.pool.Query(ctx, `SELECT started_at - fired_at FROM instances
			WHERE task = 'live' AND started_at IS NOT NULL AND fired_at >= $1 AND fired_at < $2`, since, until)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []time.Duration
		for rows.Next() {
			var d time.Duration
			if err := rows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	countLive := func(since time.Time) func() (bool, error) {
		return func() (bool, error) {
			var n int
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'live' AND state = 'SUCCEEDED' AND fired_at >= $1`, since).Scan(&n)
			return n >= 30, err
		}
	}
	base := time.Now()
	waitFor(t, "3 s of live work", 60*time.Second, countLive(base))
	baseEnd := time.Now()

	// An earlier backfill ran March 1-5; the next covers March 1-30.
	paris, _ := time.LoadLocation("Europe/Paris")
	day := func(d int) time.Time { return time.Date(2026, 3, d, 0, 0, 0, 0, paris) }
	first, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: day(1), To: day(5).Add(23 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	awaitBackfill := func(id int64, state schemas.BackfillState) schemas.Backfill {
		t.Helper()
		var b schemas.Backfill
		waitFor(t, fmt.Sprintf("backfill %d %s", id, state), 60*time.Second, func() (bool, error) {
			var err error
			b, err = s.client.GetBackfill(ctx, id)
			return err == nil && b.State == state && b.Instances["SUCCEEDED"] == b.Total, err
		})
		return b
	}
	awaitBackfill(first.ID, "done")
	during := time.Now()
	b, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: day(1), To: day(30).Add(23 * time.Hour), MaxRunning: 2, Rate: 20})
	if err != nil {
		t.Fatal(err)
	}
	if b.Total != 30 {
		t.Fatalf("the backfill of March 1-30 counts %d ticks, want 30", b.Total)
	}
	b = awaitBackfill(b.ID, "done")
	duringEnd := time.Now()
	if b.Fired != 25 || b.Existing != 5 {
		t.Errorf("backfill fired %d and found %d run, want 25 and 5", b.Fired, b.Existing)
	}
	runs := book.snapshot()
	for d := 1; d <= 30; d++ {
		tick := time.Date(2026, 3, d, 3, 0, 0, 0, paris)
		id := schemas.CronEventID("daily-load", 0, tick)
		if runs["daily-load "+id] != 1 {
			t.Errorf("tick %s ran %d times, want once", tick, runs["daily-load "+id])
		}
	}
	var reasons int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instance_transitions t JOIN instances i ON i.id = t.instance_id
		WHERE i.task = 'daily-load' AND t.to_state = 'CREATED' AND t.reason LIKE 'backfill %' AND i.priority = 'low'`).Scan(&reasons); err != nil {
		t.Fatal(err)
	}
	if reasons != 30 {
		t.Errorf("%d of 30 backfilled instances are low priority with a CREATED reason \"backfill N\"", reasons)
	}
	alone, beside := latencies(base, baseEnd), latencies(during, duringEnd)
	t.Logf("live task at 10 firings/s: start latency p50 %v, p99 %v alone; p50 %v, p99 %v during the backfill",
		quantile(alone, 0.5), quantile(alone, 0.99), quantile(beside, 0.5), quantile(beside, 0.99))
	if p50, bound := quantile(beside, 0.5), max(3*quantile(alone, 0.5), quantile(alone, 0.5)+500*time.Millisecond); p50 > bound {
		t.Errorf("live median start latency during the backfill is %v, above its bound %v", p50, bound)
	}

	// The same backfill again creates nothing.
	var before int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'daily-load'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	again, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: day(1), To: day(30).Add(23 * time.Hour), MaxRunning: 2, Rate: 20})
	if err != nil {
		t.Fatal(err)
	}
	again = awaitBackfill(again.ID, "done")
	var after int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'daily-load'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if again.Fired != 0 || again.Existing != 30 || after != before {
		t.Errorf("re-running the backfill fired %d (found %d), instances %d -> %d; want nothing new", again.Fired, again.Existing, before, after)
	}

	// Cancel: a slow backfill of April stops where it is.
	slow, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: time.Date(2026, 4, 1, 0, 0, 0, 0, paris),
		To: time.Date(2026, 4, 30, 0, 0, 0, 0, paris), Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slow backfill's first tick", 30*time.Second, func() (bool, error) {
		b, err := s.client.GetBackfill(ctx, slow.ID)
		return b.Fired >= 1, err
	})
	cancelled, err := s.client.SetBackfill(ctx, slow.ID, "cancel")
	if err != nil {
		t.Fatal(err)
	}
	// Another backfill done means the loop has passed several times since.
	probe, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: day(10), To: day(12)})
	if err != nil {
		t.Fatal(err)
	}
	awaitBackfill(probe.ID, "done")
	end, err := s.client.GetBackfill(ctx, slow.ID)
	if err != nil {
		t.Fatal(err)
	}
	var april int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE task = 'daily-load' AND fired_at >= '2026-04-01'`).Scan(&april); err != nil {
		t.Fatal(err)
	}
	if end.State != "cancelled" || end.Fired != cancelled.Fired || april != cancelled.Fired {
		t.Errorf("after cancel: state %s, fired %d -> %d, April instances %d; want it stopped", end.State, cancelled.Fired, end.Fired, april)
	}
}

// TestBackfillPauseResumeAndOverlapSkip backfills with overlap skip while
// a live run of the task is in flight: it fires nothing until the run
// ends; paused, it fires nothing either; resumed, it fires its ticks one
// at a time, never beside another run of the task.
func TestBackfillPauseResumeAndOverlapSkip(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: nightly
execution:
  handler: test.block
triggers:
  - type: cron
    schedule: "0 0 3 * * *"
`)
	s.apply(`
task_name: probe
execution:
  handler: test.block
triggers:
  - type: cron
    schedule: "0 0 4 * * *"
`)
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	mux := builtinsMux()
	mux.HandleFunc("test.block", func(ctx context.Context, j *executor.Job) (any, error) {
		if j.Name == "probe" {
			return nil, nil
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if j.EventID == "live" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil, nil
	})
	s.executor("w1", mux, 8)
	s.startTrigger()
	ctx := context.Background()
	live, err := s.client.Fire(ctx, "nightly", wire.FireRequest{EventID: "live"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the live run to start", 30*time.Second, func() (bool, error) {
		in, err := s.client.GetInstance(ctx, live.InstanceID)
		return in.State == schemas.StateRunning, err
	})
	day := func(d int) time.Time { return time.Date(2026, 5, d, 0, 0, 0, 0, time.UTC) }
	bf, err := s.client.Backfill(ctx, "nightly", wire.BackfillRequest{From: day(1), To: day(3).Add(23 * time.Hour), Overlap: "skip", MaxRunning: 3})
	if err != nil {
		t.Fatal(err)
	}
	// A probe backfill done means the loop has passed over bf since.
	probe := func(from int) {
		t.Helper()
		p, err := s.client.Backfill(ctx, "probe", wire.BackfillRequest{From: day(from), To: day(from)})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a probe backfill", 30*time.Second, func() (bool, error) {
			b, err := s.client.GetBackfill(ctx, p.ID)
			return b.State == "done", err
		})
	}
	fired := func() int {
		b, err := s.client.GetBackfill(ctx, bf.ID)
		if err != nil {
			t.Fatal(err)
		}
		return b.Fired
	}
	probe(10)
	if n := fired(); n != 0 {
		t.Fatalf("overlap skip fired %d ticks beside a live run", n)
	}
	if _, err := s.client.SetBackfill(ctx, bf.ID, "pause"); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, "the live run to end", 30*time.Second, func() (bool, error) {
		in, err := s.client.GetInstance(ctx, live.InstanceID)
		return in.State == schemas.StateSucceeded, err
	})
	probe(11)
	if n := fired(); n != 0 {
		t.Fatalf("a paused backfill fired %d ticks", n)
	}
	if _, err := s.client.SetBackfill(ctx, bf.ID, "resume"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resumed backfill", 60*time.Second, func() (bool, error) {
		b, err := s.client.GetBackfill(ctx, bf.ID)
		return b.State == "done" && b.Instances["SUCCEEDED"] == 3, err
	})
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("%d runs of the task ran at once; overlap skip allows one", most)
	}
}
