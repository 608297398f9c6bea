package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/schemas"
)

// TestConsoleRangesInBrowser drives the console's pages for work over
// ranges in headless Chromium: a backfill shows its progress and is
// paused, resumed and cancelled from its page; the dead-letter page shows
// a group with its count and replays it with a payload patch; the bulk
// page selects the WAITING instances of a task with a dry run and
// cancels them.
func TestConsoleRangesInBrowser(t *testing.T) {
	path := chromium(t)
	reg := metrics.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	s.monitor(reg)
	consoleURL := s.consoleAPI(reg)
	book := newRunBook()
	s.executor("w1", recordMux(book), 8)
	s.startTrigger()
	s.apply(fmt.Sprintf(recordTask, "records"))
	s.apply(`
task_name: daily-load
execution:
  handler: test.record
triggers:
  - type: cron
    schedule: "0 0 3 * * *"
`)
	s.apply(`
task_name: serial
execution:
  handler: builtin.sleep
concurrency:
  max_running_instances: 1
  blocking_strategy: serial
`)
	s.fireRecords("records", 4, func(i int) map[string]any { return map[string]any{"n": i, "bad": i%2 == 1} })
	ctx := context.Background()
	// A slow backfill of 20 daily ticks: one tick a minute.
	bf, err := s.client.Backfill(ctx, "daily-load", wire.BackfillRequest{From: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 3, 20, 3, 0, 0, 0, time.UTC), Rate: 1.0 / 60})
	if err != nil {
		t.Fatal(err)
	}
	s.fireEach("serial", 4, sleep60)
	s.waitInState("serial", schemas.StateWaiting, 3, 60*time.Second)

	bctx := browser(t, path)
	do(t, bctx, "open the console", 60*time.Second, chromedp.Navigate(consoleURL+"/"))
	login(t, bctx, s.admin)
	row := fmt.Sprintf(`//tr[td/span[@class="backfill-id"][text()="%d"]]`, bf.ID)
	do(t, bctx, "pause, resume and cancel the backfill", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/backfills"),
		chromedp.WaitVisible(chromedp.Search(row+`//span[@class="backfill-progress"][contains(., "/ 20 ticks done")]`)),
		click(fmt.Sprintf(`button[data-action="pause"][data-id="%d"]`, bf.ID)),
		chromedp.WaitVisible(chromedp.Search(row+`//span[@class="backfill-state"][text()="paused"]`)),
		click(fmt.Sprintf(`button[data-action="resume"][data-id="%d"]`, bf.ID)),
		chromedp.WaitVisible(chromedp.Search(row+`//span[@class="backfill-state"][text()="running"]`)),
		click(fmt.Sprintf(`button[data-action="cancel"][data-id="%d"]`, bf.ID)),
		chromedp.WaitVisible(chromedp.Search(row+`//span[@class="backfill-state"][text()="cancelled"]`)),
	)
	if got, err := s.client.GetBackfill(ctx, bf.ID); err != nil || got.State != "cancelled" {
		t.Fatalf("after the console's cancel the backfill is %q (%v)", got.State, err)
	}
	var audits int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM operator_actions WHERE action IN ('backfill_pause', 'backfill_resume', 'backfill_cancel')`).Scan(&audits); err != nil {
		t.Fatal(err)
	}
	if audits != 3 {
		t.Errorf("%d audited backfill actions, want pause, resume and cancel", audits)
	}

	group := `//tr[td/code[@class="error-class"][text()="bad record N"]]`
	do(t, bctx, "replay the dead-letter group with a patch", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/dead-letters"),
		chromedp.WaitVisible(chromedp.Search(group+`//span[@class="dl-count"][text()="2"]`)),
		setValue(`input.replay-patch`, `{"bad": null}`),
		click(`button.replay`),
		chromedp.WaitVisible(chromedp.Search(`//p[contains(., "No dead letters")]`)),
	)
	s.waitInState("records", schemas.StateSucceeded, 4, 60*time.Second)

	do(t, bctx, "select the waiting instances and cancel them", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/bulk"),
		chromedp.WaitVisible(chromedp.ID("bulk-form")),
		setValue(`#bulk-task`, "serial"),
		setValue(`#bulk-state`, "WAITING"),
		click(`#bulk-preview`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="bulk-summary"][contains(., "3 instances match")]`)),
		click(`#bulk-cancel`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="bulk-summary"][contains(., "Cancelled 3 of 3")]`)),
	)
	s.waitInState("serial", schemas.StateCancelled, 3, 30*time.Second)
}
