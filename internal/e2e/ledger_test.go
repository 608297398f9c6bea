package e2e_test

import (
	"encoding/json"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/trigger/triggertest"
)

// ledgerTask fires every minute of the local hours 1 to 3 in Berlin: on
// 2025-03-30 the clocks spring forward over 02:00-02:59 (one tick at
// 03:00 CEST fires them), on 2025-10-26 they fall back over them (each
// fires at its first occurrence only).
const ledgerTask = `
task_name: berlin-nightly
execution: {handler: builtin.echo}
triggers: [{type: cron, schedule: "* 1-3 * * *", timezone: Europe/Berlin, misfire: fire_once}]
`

// TestLedgerThroughDSTAndATriggerOutage runs a trigger service on a
// simulated clock through both of Berlin's 2025 changes, with a 2-minute
// outage of the trigger on the spring night (misfire fire_once), moves the
// spring night's instances to the history tables, and reads both nights'
// ledgers with the real `ax ledger`: the exact ticks, the one missed tick,
// the late fire, the DST marks, and the summary lines; the JSON form too.
func TestLedgerThroughDSTAndATriggerOutage(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.executor("w1", builtinsMux(), 16)
	s.apply(ledgerTask)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(y int, mo time.Month, d, h, mi, sec int) time.Time {
		return time.Date(y, mo, d, h, mi, sec, 0, berlin)
	}
	clock := triggertest.NewClock(at(2025, 3, 30, 0, 58, 30))
	trig := clockTrigger{s: s, clock: clock}
	stepTo := func(last time.Time) { trig.stepTo("berlin-nightly", last) }
	succeeded := func(n int) { s.waitInState("berlin-nightly", schemas.StateSucceeded, n, 2*time.Minute) }

	// Spring: the trigger is down from 01:10:30 to 01:12:30.
	stop := trig.start()
	stepTo(at(2025, 3, 30, 1, 10, 0))
	stop()
	clock.Set(at(2025, 3, 30, 1, 12, 30))
	stop = trig.start()
	stepTo(at(2025, 3, 30, 3, 4, 0))
	stop()
	succeeded(64)
	relayAndMoveHistory(t, s)

	// Autumn. The restart fires, late, the latest tick missed since
	// spring (2025-10-25 03:59 CEST), outside the ledger's range.
	clock.Set(at(2025, 10, 26, 0, 58, 30))
	stop = trig.start()
	stepTo(at(2025, 10, 26, 3, 4, 0))
	stop()
	succeeded(1 + 125)

	bin := systemtest.BuildAX(t)
	ledger := func(from, to time.Time, format string) string {
		out, err := exec.Command(bin, "ledger", "berlin-nightly", "--api", s.apiURL, "--token", s.admin,
			"--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--format", format).CombinedOutput()
		if err != nil {
			t.Fatalf("ax ledger: %v\n%s", err, out)
		}
		return string(out)
	}

	// Spring, as JSON: 01:00-01:59 CET, 03:00 CEST for the gap, 03:01-03:04.
	var spring schemas.Ledger
	if err := json.Unmarshal([]byte(ledger(at(2025, 3, 30, 0, 58, 0), at(2025, 3, 30, 3, 5, 0), "json")), &spring); err != nil {
		t.Fatal(err)
	}
	var want []string
	for m := range 60 {
		want = append(want, at(2025, 3, 30, 1, m, 0).UTC().Format(time.RFC3339))
	}
	for m := range 5 {
		want = append(want, at(2025, 3, 30, 3, m, 0).UTC().Format(time.RFC3339))
	}
	checkTicks(t, "spring", spring, want)
	for _, tk := range spring.Ticks {
		local := tk.Tick.In(berlin).Format("15:04")
		wantStatus, wantDST := schemas.TickFired, ""
		switch local {
		case "01:11":
			wantStatus = schemas.TickMissed
		case "01:12":
			wantStatus = schemas.TickLate
		case "03:00":
			wantDST = "gap"
		}
		if tk.Status != wantStatus || tk.DST != wantDST || (tk.InstanceID != 0) != (wantStatus != schemas.TickMissed) ||
			(tk.InstanceID != 0 && (!tk.Moved || tk.State != schemas.StateSucceeded || tk.Attempts != 1)) {
			t.Errorf("spring tick %s (%s): %+v, want status %s, dst %q, an instance moved to history unless missed", local, tk.Wall, tk, wantStatus, wantDST)
		}
		switch local {
		case "01:11":
			if !strings.Contains(tk.Reason, "no trigger service fired it in time") || !strings.Contains(tk.Reason, "misfire fire_once") {
				t.Errorf("missed tick's reason %q, want the trigger outage and fire_once", tk.Reason)
			}
		case "01:12":
			if !strings.HasPrefix(tk.Reason, "misfire fire_once: the latest of 2 missed ticks") {
				t.Errorf("late tick's reason %q, want fire_once's", tk.Reason)
			}
		case "03:00":
			if !strings.Contains(tk.DSTNote, "02:00:00, 02:01:00, 02:02:00") || !strings.Contains(tk.DSTNote, "fired once at 03:00 CEST") {
				t.Errorf("gap tick's note %q", tk.DSTNote)
			}
		}
	}
	if want := "65 ticks, 64 instances, 1 missed, 0 doubled, 0 retried, 1 fired late"; spring.Line != want {
		t.Errorf("spring summary %q, want %q", spring.Line, want)
	}

	// Autumn, as the table: 01:00-02:59 CEST (the second hour repeats, not
	// fired again), then 03:00-03:04 CET.
	table := ledger(at(2025, 10, 26, 0, 58, 0), at(2025, 10, 26, 3, 5, 0), "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if got, want := lines[len(lines)-1], "125 ticks, 125 instances, 0 missed, 0 doubled, 0 retried"; got != want {
		t.Errorf("autumn summary %q, want %q\n%s", got, want, table)
	}
	if n := strings.Count(table, "dst repeat: local 02:"); n != 60 {
		t.Errorf("%d ticks marked dst repeat, want 60:\n%s", n, table)
	}
	if !strings.Contains(table, "2025-10-26 02:30:00 CEST") || strings.Contains(table, "2025-10-26 02:30:00 CET") {
		t.Errorf("the table does not show 02:30 CEST once and 02:30 CET never:\n%s", table)
	}
	var autumn schemas.Ledger
	if err := json.Unmarshal([]byte(ledger(at(2025, 10, 26, 0, 58, 0), at(2025, 10, 26, 3, 5, 0), "json")), &autumn); err != nil {
		t.Fatal(err)
	}
	want = want[:0]
	for m := range 120 { // 01:00-02:59 CEST: 02:xx at its first occurrence (time.Date may pick either)
		want = append(want, at(2025, 10, 26, 1, 0, 0).Add(time.Duration(m)*time.Minute).UTC().Format(time.RFC3339))
	}
	for m := range 5 {
		want = append(want, at(2025, 10, 26, 3, m, 0).UTC().Format(time.RFC3339))
	}
	checkTicks(t, "autumn", autumn, want)
	if autumn.Summary.DSTRepeat != 60 || autumn.Summary.Instances != 125 || autumn.Ticks[0].Moved {
		t.Errorf("autumn summary %+v, first tick %+v", autumn.Summary, autumn.Ticks[0])
	}
	t.Run("console", func(t *testing.T) {
		ctx := browser(t, chromium(t))
		do(t, ctx, "open the console", 60*time.Second, chromedp.Navigate(s.apiURL+"/"))
		login(t, ctx, s.admin)
		q := url.Values{"from": {at(2025, 3, 30, 0, 58, 0).Format(time.RFC3339)}, "to": {at(2025, 3, 30, 3, 5, 0).Format(time.RFC3339)}}
		do(t, ctx, "open the ledger", 60*time.Second,
			chromedp.Navigate(s.apiURL+"/#/tasks/berlin-nightly/ledger?"+q.Encode()),
			chromedp.WaitVisible(chromedp.ID("ledger-summary")))
		line := read(t, ctx, "read the summary", 60*time.Second, chromedp.Text(chromedp.ID("ledger-summary")))
		body := read(t, ctx, "read the page", 60*time.Second, chromedp.Text(chromedp.CSS("main")))
		if line != spring.Line || !strings.Contains(body, "dst gap: local 02:00:00") || strings.Count(body, "missed") < 1 {
			t.Errorf("the console's ledger shows %q, want %q with the gap and the missed tick:\n%.2000s", line, spring.Line, body)
		}
		// The missed tick's "why?" explains it.
		do(t, ctx, "explain the missed tick", 60*time.Second,
			click(`a.why[href*="2025-03-30T00%3A11%3A00Z"]`),
			chromedp.WaitVisible(chromedp.ID("explain-verdict")))
		verdict := read(t, ctx, "read the verdict", 60*time.Second, chromedp.Text(chromedp.ID("explain-verdict")))
		if !strings.HasPrefix(verdict, "did not run: the trigger did not fire it in time") || !strings.Contains(verdict, "misfire fire_once: fired 2025-03-30T00:12:00Z late, skipped 1") {
			t.Errorf("the console explains the missed tick with %q", verdict)
		}
	})
	csv := ledger(at(2025, 10, 26, 0, 58, 0), at(2025, 10, 26, 3, 5, 0), "csv")
	if rows := strings.Count(strings.TrimSpace(csv), "\n"); rows != 125 || !strings.HasPrefix(csv, "tick,wall,trigger,event_id,status") {
		t.Errorf("csv has %d rows after its header, want 125:\n%.300s", rows, csv)
	}
}

// checkTicks checks the ledger's ticks are want (RFC 3339, UTC), in order.
func checkTicks(t *testing.T, name string, l schemas.Ledger, want []string) {
	t.Helper()
	var got []string
	for _, tk := range l.Ticks {
		got = append(got, tk.Tick.UTC().Format(time.RFC3339))
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s ticks:\n got %v\nwant %v", name, got, want)
	}
}

// relayAndMoveHistory marks every transition relayed to AX_AUDIT (no
// auditor runs here) and moves every ended instance to the history.
func relayAndMoveHistory(t *testing.T, s *system) {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO relay_cursor (name, done) VALUES ('audit', pg_current_snapshot())
		ON CONFLICT (name) DO UPDATE SET done = EXCLUDED.done`); err != nil {
		t.Fatal(err)
	}
	res, err := s.store.MoveHistory(t.Context(), store.MoveOptions{EndedBefore: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Waiting != 0 {
		t.Fatalf("history move left %d waiting", res.Waiting)
	}
}
