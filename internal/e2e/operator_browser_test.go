package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// TestConsoleShowsWhyAndAttempts drives the console as an operator
// reading the day's questions (issue 27): an instance dispatched to a
// pool nobody serves and one held by another run's mutex_key each say why
// they wait, with what would end it, on their page and in the instances
// list (and in GET /v1/instances/{id}); a retried instance shows one row
// per attempt with its worker, outcome, error and duration, and its first
// start and total time; a delayed firing is listed with its due time
// and cancelled from the console; the fire box shows the payload schema.
func TestConsoleShowsWhyAndAttempts(t *testing.T) {
	path := chromium(t)
	reg := metrics.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	consoleURL := s.consoleAPI(reg)
	mux := builtinsMux()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	mux.HandleFunc("test.hold", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	var tries atomic.Int64
	mux.HandleFunc("test.flaky", func(context.Context, *executor.Job) (any, error) {
		if n := tries.Add(1); n < 3 {
			return nil, fmt.Errorf("try %d: the upstream answered 503", n)
		}
		return map[string]bool{"ok": true}, nil
	})
	s.executor("worker-1", mux, 4)
	ctx := browser(t, path)
	do(t, ctx, "open the console", 60*time.Second, chromedp.Navigate(consoleURL+"/"))
	login(t, ctx, s.admin)

	// A pool nobody serves.
	s.apply("task_name: orphan\nexecution: {handler: builtin.echo}\ndispatch: {tags: [data-node-a]}\n")
	orphan := s.fire("orphan", nil)
	var got schemas.Instance
	waitFor(t, "the API to say why the orphan waits", time.Minute, func() (bool, error) {
		var err error
		got, err = s.client.GetInstance(context.Background(), orphan)
		return err == nil && got.Wait != nil, err
	})
	if got.Wait.Kind != schemas.WaitUnservedPool || !strings.Contains(got.Wait.Reason, `pool "data-node-a"`) ||
		!strings.Contains(got.Wait.Ends, "start an executor with --pool data-node-a") || got.Wait.Since.IsZero() {
		t.Errorf("the orphan's wait is %+v", got.Wait)
	}
	do(t, ctx, "read why the orphan waits", 60*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s/#/instances/%d", consoleURL, orphan)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="wait"][@data-kind="unserved_pool"][contains(., "data-node-a")][contains(., "ends when: start an executor")]`)),
	)

	// A mutex_key held by another run.
	s.apply("task_name: ledger\nexecution: {handler: test.hold}\nconcurrency: {mutex_key: \"shop-{{.shop}}\"}\n")
	holder := s.fire("ledger", map[string]int{"shop": 7})
	s.waitState(holder, schemas.StateRunning, time.Minute)
	queued := s.fire("ledger", map[string]int{"shop": 7})
	// The stack's API reads the mutex bucket with its own NATS credential.
	waitFor(t, "the API to say who holds the mutex", time.Minute, func() (bool, error) {
		in, err := s.client.GetInstance(context.Background(), queued)
		return err == nil && in.Wait != nil && in.Wait.Kind == schemas.WaitMutex &&
			strings.Contains(in.Wait.Reason, fmt.Sprintf("held by instance %d", holder)), err
	})
	do(t, ctx, "read why the second ledger run waits", 60*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s/#/instances/%d", consoleURL, queued)),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//div[@id="wait"][@data-kind="mutex"][contains(., "shop-7")][contains(., "held by instance %d")]`, holder))),
	)
	do(t, ctx, "see both waits in the instances list", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/instances"),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//tr[td/a[@href="#/instances/%d"]]/td/span[@class="wait-kind"][text()="unserved pool"]`, orphan))),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//tr[td/a[@href="#/instances/%d"]]/td/span[@class="wait-kind"][text()="mutex"]`, queued))),
	)

	// A retried instance reads as three attempts.
	s.apply("task_name: flaky\nexecution: {handler: test.flaky, retry: {max_attempts: 3, initial_interval_sec: 0}}\n")
	flaky := s.fire("flaky", nil)
	s.waitState(flaky, schemas.StateSucceeded, time.Minute)
	do(t, ctx, "read the attempts of the retried instance", 60*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s/#/instances/%d", consoleURL, flaky)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="attempts"]//tr[td[1]="1"][td[4]="worker-1"][td[5]/span="RETRYING"][td[7][contains(., "try 1: the upstream answered 503")]]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="attempts"]//tr[td[1]="2"][td[5]/span="RETRYING"][td[7][contains(., "try 2")]]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="attempts"]//tr[td[1]="3"][td[5]/span="SUCCEEDED"][td[7]="—"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[td[1][text()="first started"]]/td[2][normalize-space(.) != "—"]`)),
		chromedp.WaitVisible(chromedp.Search(`//tr[td[1][text()="total time"]]/td[2][normalize-space(.) != "—"]`)),
	)
	// A delayed firing is listed with its due time until an operator
	// cancels it; the fire box shows the task's payload schema.
	s.apply("task_name: nightly\nexecution: {handler: builtin.echo}\npayload_schema: {type: object, required: [day], properties: {day: {type: string}}}\n")
	if _, err := s.client.Fire(context.Background(), "nightly", wire.FireRequest{EventID: "tonight", Delay: "2h", Payload: []byte(`{"day": "2026-12-06"}`)}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "see the payload schema and the scheduled firing on the task's page", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/tasks/nightly"),
		chromedp.WaitVisible(chromedp.Search(`//details[@id="payload-schema"]/pre[contains(., "required")][contains(., "day")]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="firings"]//tr[td/code="tonight"]/td[4][contains(., "h")]`)),
	)
	do(t, ctx, "cancel the scheduled firing", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/firings"),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="firings"]//tr[td/code="tonight"]`)),
		click(`button[data-action="cancel-firing"][data-event="tonight"]`),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="firings"]/p[contains(., "No delayed firing waits")]`)),
	)
	if list, err := s.client.ListFirings(context.Background(), "nightly", 0); err != nil || len(list.Firings) != 0 {
		t.Errorf("after the console's cancel the pending firings are %+v (%v), want none", list.Firings, err)
	}

	in, err := s.client.GetInstance(context.Background(), flaky)
	if err != nil || len(in.Attempts) != 3 || in.Attempts[0].Worker != "worker-1" || in.Attempts[2].State != schemas.StateSucceeded {
		t.Errorf("GET /v1/instances/%d attempts = %+v (%v), want three, the last SUCCEEDED", flaky, in.Attempts, err)
	}
}

// TestDashboardWith150Consumers opens the dashboard of an installation
// with 150 dispatch consumers (issue 27: with 126 it was 6,000 px tall,
// its consumer table clipped at the right): the lag reads by stream and
// pool, the largest first with the rest folded and a link to the Streams
// page; the page fits the window's width; and the health report starts
// above the lag table's end, so no one scrolls past the table to find
// it. The run time card is called so, a spike of one minute leaves the
// throughput chart's scale to the normal minutes, and the alerts pager
// counts the alerts it shows.
func TestDashboardWith150Consumers(t *testing.T) {
	path := chromium(t)
	reg := metrics.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	consoleURL := s.consoleAPI(reg)
	ctx := context.Background()
	top := streams.Default()
	for i := range 150 {
		pool := fmt.Sprintf("pool-%02d", i%30)
		handler := fmt.Sprintf("h%d", i)
		c := top.PoolConsumer(pool, schemas.PriorityNormal, handler)
		if _, err := s.js.CreateOrUpdateConsumer(ctx, top.DispatchStream(), c); err != nil {
			t.Fatal(err)
		}
		if i%30 == 7 { // pool-07 lags
			for range 5 {
				if _, err := s.js.Publish(ctx, top.Dispatch(pool, schemas.PriorityNormal, handler), []byte("{}")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Runs, for the run time card and the throughput chart: two a minute
	// for half an hour, and a spike of 100 in one minute.
	s.apply("task_name: tick\nexecution: {handler: builtin.echo}\n")
	now := time.Now().Truncate(time.Minute)
	for m := 1; m <= 31; m++ {
		n := 2
		if m == 10 {
			n = 100
		}
		for i := range n {
			at := now.Add(-time.Duration(m) * time.Minute).Add(time.Duration(i) * 100 * time.Millisecond)
			if _, err := s.pool.Exec(ctx, `
				INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler,
					timeout_ms, fired_at, started_at, finished_at)
				VALUES ('tick', 1, $1, 'event', 'SUCCEEDED', 1, 1, 'normal', 'default', 'builtin.echo', 1000, $2, $2, $3)`,
				fmt.Sprintf("m%d-%d", m, i), at, at.Add(5*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	browserCtx := browser(t, path)
	do(t, browserCtx, "open the console", 60*time.Second, chromedp.Navigate(consoleURL+"/"))
	login(t, browserCtx, s.admin)
	do(t, browserCtx, "read the dashboard", 60*time.Second,
		chromedp.WaitVisible(chromedp.ID("lag-summary")),
		chromedp.WaitVisible(chromedp.ID("health")),
		chromedp.WaitVisible(chromedp.Search(`//div[@class="stat-label"][text()="run time p50 / p95"]`)),
		chromedp.WaitVisible(chromedp.Search(`//a[@id="lag-streams"][@href="#/streams"]`)),
		chromedp.WaitVisible(chromedp.Search(`//div[@id="lag-summary"]/p[contains(., "consumers in")]`)),
	)
	type dashLayout struct {
		ScrollWidth, InnerWidth    float64
		HealthTop, LagBottom, Rows float64
		First                      string
		Folded                     bool
	}
	layout := read(t, browserCtx, "measure the dashboard", 30*time.Second, chromedp.Evaluate[dashLayout](`(() => {
		const lag = document.querySelector('#lag-summary table');
		return {
			ScrollWidth: document.documentElement.scrollWidth, InnerWidth: window.innerWidth,
			HealthTop: document.getElementById('health').getBoundingClientRect().top + window.scrollY,
			LagBottom: lag.getBoundingClientRect().bottom + window.scrollY,
			Rows: lag.querySelectorAll('tbody tr').length,
			First: lag.querySelector('tbody tr td').textContent,
			Folded: !!document.querySelector('#lag-rest') && !document.querySelector('#lag-rest').open,
		};
	})()`))
	clipped := read(t, browserCtx, "read the throughput chart's scale", 30*time.Second, chromedp.Poll[string](
		`(() => { const c = Chart.getChart('throughput'); const note = document.getElementById('throughput-clipped').textContent;
			return c && note ? c.options.scales.y.max + ': ' + note : false; })()`))
	if !strings.HasPrefix(clipped, "4: 1 minute above the scale (▲), the busiest with 100 runs") {
		t.Errorf("the throughput chart reads %q, want its scale at 4 (twice the normal minute's 2) and the spike marked", clipped)
	}
	if layout.ScrollWidth > layout.InnerWidth {
		t.Errorf("the dashboard is %v px wide in a window of %v", layout.ScrollWidth, layout.InnerWidth)
	}
	if layout.HealthTop > layout.LagBottom {
		t.Errorf("the health report starts at %v px, below the lag table's end at %v px", layout.HealthTop, layout.LagBottom)
	}
	if layout.Rows > 10 || !layout.Folded || !strings.Contains(layout.First, "pool pool-07") {
		t.Errorf("the lag table shows %v rows, first %q, the rest folded: %v; want at most 10, pool-07 first, folded",
			layout.Rows, layout.First, layout.Folded)
	}

	// Six alerts, ids with gaps: the pager counts them, not "#50 – #1".
	for i := range 6 {
		if _, err := s.store.RaiseAlert(ctx, store.AlertSignal{Rule: "backlog", Level: schemas.AlertP2,
			Key: fmt.Sprintf("k%d", i*9), Reason: "test", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	do(t, browserCtx, "read the alerts pager", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/alerts"),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="page-range"][text()="6 alerts, newest first"]`)),
	)
}
