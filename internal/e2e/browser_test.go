package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/schemas"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// chromium returns the path of the Chromium the browser tests drive; the
// test fails, saying how to install it, when it is missing.
func chromium(t *testing.T) string {
	if testing.Short() {
		t.Skip("the browser tests need Chromium: skipped with -short; make test runs them")
	}
	t.Helper()
	path := chromiumPath
	if p := os.Getenv("AX_CHROMIUM"); p != "" {
		path = p
	}
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("the browser tests need Chromium at %s (set AX_CHROMIUM to use another): install it with `apt-get install -y chromium` (.ci/run does): %v", path, err)
	}
	return path
}

// browser starts the headless Chromium at path for the test, with a fresh
// profile, and returns a chromedp context of its first tab. It stops the
// browser when the test ends: register it after the servers the pages talk
// to, so that it stops first.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1360, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium at %s: %v", path, err)
	}
	return ctx
}

// do runs browser steps under a deadline and fails the test, naming step
// and showing the page, when they fail.
func do(t *testing.T, ctx context.Context, step string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	read(t, ctx, step, timeout, chromedp.Steps(steps...))
}

// click clicks the element sel names once it is visible. It finds the
// element again at the moment of the click: the console re-renders a page
// when its data changes, which leaves a node found earlier stale.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.click(); return true; })()`, sel)),
	)
}

// setValue sets the value of the input sel names, found, like click's,
// at the moment it is set.
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.value = %q; return true; })()`, sel, value))
}

// read runs one browser action under a deadline and returns its value; it
// fails the test like do.
func read[T any](t *testing.T, ctx context.Context, step string, timeout time.Duration, action chromedp.Action[T]) T {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(actx, action)
	if err != nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		page, _ := chromedp.Run(pctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("browser: %s: %v; the page shows:\n%s", step, err, page)
	}
	return v
}

// TestConsoleInBrowser drives the web console in headless Chromium as an
// operator would: log in with a token (a wrong one is refused), apply a
// task with the tasks page's form, pause and resume it, fire it with a
// payload from the task's page, watch the instance reach SUCCEEDED on its
// page and read its log lines there, rerun it, cancel a running instance,
// and open every other page. With AX_SCREENSHOTS=1 it also writes the
// screenshots of docs/screenshots.
func TestConsoleInBrowser(t *testing.T) {
	path := chromium(t)
	// The dispatcher, an auditor and the console's API share one registry,
	// as in ax dev, so that the dashboard shows the fleet measures.
	reg := metrics.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	s.monitor(reg)
	consoleURL := s.consoleAPI(reg)
	mux := builtinsMux()
	mux.HandleFunc("test.greet", func(ctx context.Context, task *executor.Job) (any, error) {
		var p struct {
			Who string `json:"who"`
		}
		if err := json.Unmarshal(task.Payload, &p); err != nil {
			return nil, executor.Permanent(fmt.Errorf("decode the payload: %w", err))
		}
		log := executor.Logger(ctx)
		for i := range 3 {
			log.Info(fmt.Sprintf("greeting %s", p.Who), "step", i+1)
		}
		log.Warn("greeted everyone")
		time.Sleep(200 * time.Millisecond) // a run time that shows in the charts
		return map[string]string{"greeted": p.Who}, nil
	})
	s.executor("worker-1", mux, 4)
	ctx := browser(t, path)

	do(t, ctx, "log in with a wrong token", 60*time.Second,
		chromedp.Navigate(consoleURL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "not-a-token"),
		click("#login button[type=submit]"),
		chromedp.WaitVisible(chromedp.Search(`//form[@id="login"]//div[@role="alert"][contains(., "not valid")]`)),
	)
	login(t, ctx, s.admin)

	def := "task_name: greet\nowner: browser-test\ndescription: Greets whoever the payload names.\n" +
		"execution:\n  handler: test.greet\n  timeout: 30s\ntriggers:\n  - type: cron\n    schedule: \"0 3 * * *\"\n" +
		"redact: [pin]\n"
	do(t, ctx, "apply a task", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/tasks"),
		chromedp.WaitVisible(chromedp.ID("definition")),
		chromedp.SetValue(chromedp.ID("definition"), def),
		click("#apply button[type=submit]"),
		chromedp.WaitVisible(chromedp.Search(`//p[contains(., "Applied")]/a[text()="greet"]`)),
		chromedp.WaitVisible(chromedp.Search(`//td/a[@href="#/tasks/greet"]`)),
		// The next fire time of its cron trigger fills in.
		chromedp.WaitVisible(chromedp.Search(`//tr[td/a[@href="#/tasks/greet"]]/td[5][normalize-space(.) != "—"]`)),
	)

	// A refused definition shows each of its problems once.
	bad := "task_name: bad\nexecution:\n  handler: test.greet\n  retry:\n    max_attempts: 0\npriority: whenever\n"
	do(t, ctx, "apply a refused task", 60*time.Second,
		chromedp.SetValue(chromedp.ID("definition"), bad),
		click("#apply button[type=submit]"),
		chromedp.WaitVisible(chromedp.CSS(`#apply div[role="alert"]`)),
	)
	refusal := read(t, ctx, "read the refusal", 60*time.Second, chromedp.Text(chromedp.CSS(`#apply div[role="alert"]`)))
	for field, problem := range map[string]string{"execution.retry.max_attempts": "must be at least 1", "priority": "must be one of urgent, normal, low"} {
		if n := strings.Count(refusal, problem); n != 1 || !strings.Contains(refusal, field+": "+problem) {
			t.Errorf("the refusal shows %q %d times, want once, after its field %s:\n%s", problem, n, field, refusal)
		}
	}

	do(t, ctx, "pause and resume the task", 60*time.Second,
		chromedp.Navigate(consoleURL+"/#/tasks/greet"),
		chromedp.WaitVisible(chromedp.CSS(`h1 button[data-action="pause"]`)),
		click(`h1 button[data-action="pause"]`),
		chromedp.WaitVisible(chromedp.Search(`//h1/span[text()="paused"]`)),
		click(`h1 button[data-action="resume"]`),
		chromedp.WaitVisible(chromedp.CSS(`h1 button[data-action="pause"]`)),
		chromedp.WaitVisible(chromedp.ID("payload")),
	)
	if info, err := s.client.GetTask(context.Background(), "greet"); err != nil || info.Paused || !info.Enabled {
		t.Fatalf("after pause and resume in the console, the task is %+v (%v), want enabled and not paused", info, err)
	}
	if name := read(t, ctx, "read the task's name", 60*time.Second, chromedp.Text(chromedp.ID("task-name"))); name != "greet" {
		t.Errorf("the task page names %q, want greet", name)
	}
	do(t, ctx, "fire the task with a payload", 60*time.Second,
		chromedp.SetValue(chromedp.ID("payload"), `{"who": "the browser", "pin": "4321-secret"}`),
		click("#fire button[type=submit]"),
		chromedp.WaitVisible(chromedp.ID("state")),
	)

	do(t, ctx, "watch the instance succeed and read its log", 60*time.Second,
		chromedp.WaitVisible(chromedp.Search(`//span[@id="state"]/span[text()="SUCCEEDED"]`)),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="logs"]/div[contains(., "greeted everyone")]`)),
	)
	// The field the task's redact names shows as the marker, to the admin too.
	do(t, ctx, "wait for the redacted payload", 60*time.Second,
		chromedp.WaitVisible(chromedp.Search(`//tr[td[1][text()="payload"]]/td[2]/pre[contains(., "`+schemas.RedactedMarker+`")]`)))
	shown := read(t, ctx, "read the redacted payload", 60*time.Second,
		chromedp.Text(chromedp.Search(`//tr[td[1][text()="payload"]]/td[2]`)))
	if !strings.Contains(shown, `"pin": "`+schemas.RedactedMarker+`"`) || strings.Contains(shown, "4321-secret") || !strings.Contains(shown, "the browser") {
		t.Errorf("the instance page shows the payload\n%s\nwant pin as %q and who as it is", shown, schemas.RedactedMarker)
	}
	if state := read(t, ctx, "read the state", 60*time.Second, chromedp.Text(chromedp.ID("state"))); state != string(schemas.StateSucceeded) {
		t.Errorf("the instance page shows state %q, want SUCCEEDED", state)
	}
	logs := read(t, ctx, "read the log tail", 60*time.Second, chromedp.Text(chromedp.ID("logs")))
	for i := range 3 {
		if want := fmt.Sprintf(`greeting the browser {"step":%d}`, i+1); !strings.Contains(logs, want) {
			t.Errorf("the log tail lacks %q:\n%s", want, logs)
		}
	}

	// The instance the console made is the one the API reports, with the
	// payload typed into the console.
	hash := read(t, ctx, "read the location", 60*time.Second, chromedp.Evaluate[string](`location.hash`))
	var id int64
	if _, err := fmt.Sscanf(hash, "#/instances/%d", &id); err != nil {
		t.Fatalf("the console is at %q after firing, want #/instances/<id>", hash)
	}
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	var payload map[string]string
	if err := json.Unmarshal(inst.Payload, &payload); err != nil || payload["who"] != "the browser" {
		t.Errorf("instance %d has payload %s, want the one typed into the console", id, inst.Payload)
	}
	// A firing from the console is an operator's, as one from ax fire is.
	if inst.Source != schemas.SourceManual {
		t.Errorf("instance %d fired from the console has source %q, want %q", id, inst.Source, schemas.SourceManual)
	}
	// The page redraws its table on each refresh, so a cell found in one
	// step may be gone in the next: read the text in one evaluation, until
	// the page shows the source.
	var src string
	waitFor(t, "the instance page to show the source", 60*time.Second, func() (bool, error) {
		src = read(t, ctx, "read the source", 10*time.Second, chromedp.Evaluate[string](
			`(document.evaluate('//tr[td[1][text()="source"]]/td[2]', document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue || {}).textContent || ""`))
		return src != "", nil
	})
	if src != string(schemas.SourceManual) {
		t.Errorf("the instance page shows source %q, want %q", src, schemas.SourceManual)
	}

	// The alert notifications link to the log of an instance.
	do(t, ctx, "open the log link", 60*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s/#/instances/%d/logs", consoleURL, id)),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="logs"]/div[contains(., "greeted everyone")]`)),
	)

	// Rerun makes another instance, which the console opens.
	do(t, ctx, "rerun the instance", 60*time.Second,
		click("#rerun"),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//h1[contains(., "Instance #%d")]`, id+1))),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="state"]/span[text()="SUCCEEDED"]`)),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="logs"]/div[contains(., "greeted everyone")]`)),
	)

	// A running instance's page shows the progress its handler reports
	// (builtin.sleep: milliseconds slept of 60000, each second), and the bar
	// moves as the reports come.
	s.apply("task_name: sleeper\nexecution: {handler: builtin.sleep}\n")
	sleeper := s.fire("sleeper", map[string]float64{"seconds": 60})
	do(t, ctx, "open a running instance", 60*time.Second,
		chromedp.Navigate(fmt.Sprintf("%s/#/instances/%d", consoleURL, sleeper)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="state"]/span[text()="RUNNING"]`)))
	shownProgress := func(step string, above int64) int64 {
		t.Helper()
		return read(t, ctx, step, 40*time.Second, chromedp.Poll[int64](fmt.Sprintf(`(() => {
			const el = document.querySelector('#progress');
			const bar = el && el.querySelector('progress');
			if (!el || !bar || el.dataset.total !== '60000' || Number(bar.value) !== Number(el.dataset.done)) return false;
			const done = Number(el.dataset.done);
			return done > %d && el.textContent.includes('of 1m0s') ? done : false;
		})()`, above)))
	}
	first := shownProgress("see the progress bar", 0)
	shownProgress("see the progress bar move", first)

	// Cancel stops a running instance.
	do(t, ctx, "cancel a running instance", 60*time.Second,
		chromedp.WaitVisible(chromedp.Search(`//span[@id="state"]/span[text()="RUNNING"]`)),
		chromedp.WaitVisible(chromedp.Search(`//pre[@id="logs"]/div[contains(., "sleeping")]`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`window.confirm = () => true; true`)(ctx, tg)
			return err
		}),
		click("#cancel"),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="state"]/span[text()="CANCELLED"]`)),
	)
	// The CANCELLED badge has a look of its own: neither the plain badge's
	// nor that of SKIPPED, which the system decides.
	colours := read(t, ctx, "read the badge colours", 60*time.Second, chromedp.Evaluate[map[string]string](`(() => {
		const bg = (el) => getComputedStyle(el).backgroundColor;
		const probe = (cls) => { const el = document.createElement('span'); el.className = cls; document.body.append(el); const c = bg(el); el.remove(); return c; };
		const el = document.querySelector('#state .badge');
		return { class: el.className, cancelled: bg(el), plain: probe('badge'), skipped: probe('badge state-skipped') };
	})()`))
	if colours["class"] != "badge state-cancelled" {
		t.Errorf("the CANCELLED badge has class %q, want \"badge state-cancelled\"", colours["class"])
	}
	if c := colours["cancelled"]; c == colours["plain"] || c == colours["skipped"] {
		t.Errorf("the CANCELLED badge's background is %s, the plain badge's %s and SKIPPED's %s: want one of its own", c, colours["plain"], colours["skipped"])
	}

	// Every other page shows what the API holds, without an error and
	// without a value the script failed to turn into text.
	for _, p := range []struct{ hash, shows string }{
		{"#/tasks/sleeper", `//a[@id="all-instances"][@href="#/instances?task=sleeper"]`},
		{"#/instances", fmt.Sprintf(`//td/a[@href="#/instances/%d"]`, id)},
		{"#/workers", `//td/code[text()="worker-1"]`},
		{"#/streams", `//td/code[text()="dispatcher"]`},
		{"#/alerts", `//h1[text()="Alerts"]`},
		{"#/audit", `//td/code[text()="worker:worker-1"]`},
		{"#/", `//h2[text()="Fleet measures"]`},
	} {
		do(t, ctx, "open "+p.hash, 60*time.Second,
			chromedp.Navigate(consoleURL+"/"+p.hash),
			chromedp.WaitVisible(chromedp.Search(p.shows)),
		)
		if n := read(t, ctx, "look for errors on "+p.hash, 60*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("main .error").length`)); n != 0 {
			t.Errorf("%s shows %d errors", p.hash, n)
		}
		if junk := read(t, ctx, "look for junk on "+p.hash, 60*time.Second, chromedp.Evaluate[[]string](
			`document.querySelector("main").innerText.match(/\b(null|undefined|NaN)\b|\[object \w+\]/g) || []`)); len(junk) != 0 {
			t.Errorf("%s shows %q as text", p.hash, junk)
		}
	}

	if os.Getenv("AX_SCREENSHOTS") != "" {
		screenshots(t, ctx, s, consoleURL, id)
	}
}

// login logs the console on screen in with token and waits for the
// dashboard.
func login(t *testing.T, ctx context.Context, token string) {
	t.Helper()
	do(t, ctx, "log in", 60*time.Second,
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token),
		click("#login button[type=submit]"),
		chromedp.WaitVisible(chromedp.CSS("canvas#throughput")),
	)
}

// statJS is a script that returns the value of the dashboard's figure
// labelled %q, or null.
const statJS = `(() => {
	const s = [...document.querySelectorAll('.stat')].find((s) => s.querySelector('.stat-label').textContent === %q);
	return s ? s.querySelector('.stat-value').textContent : null;
})()`

// waitStat waits until the dashboard's figure labelled label shows want.
func waitStat(label, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(statJS, label) + ` === ` + strconv.Quote(want))
}

// TestConsoleUnderABacklog: under a backlog of more runs than one page of
// instances holds, the dashboard's counts, success rate and run times are
// those of every run of the hour, and the instances list pages through
// them, filters them by time and refreshes itself.
func TestConsoleUnderABacklog(t *testing.T) {
	path := chromium(t)
	s := newSystem(t)
	mux := builtinsMux()
	s.executor("worker-1", mux, 64)
	s.apply("task_name: echo\nexecution: {handler: builtin.echo}\n")
	s.apply("task_name: fail\nexecution: {handler: builtin.fail}\n")
	const ok, failed = 600, 20
	s.fireMany("echo", ok)
	s.fireMany("fail", failed)
	var sum schemas.Summary
	waitFor(t, "every run to end", 2*time.Minute, func() (bool, error) {
		var err error
		sum, err = s.client.Summary(context.Background(), apiclient.SummaryQuery{})
		return sum.States[schemas.StateSucceeded] == ok && sum.States[schemas.StateFailed] == failed, err
	})
	if sum.Total != ok+failed || sum.RunTime.Count != ok+failed || sum.RunTime.P50 == nil {
		t.Fatalf("the summary of the hour is %+v, want %d runs, each with a run time", sum, ok+failed)
	}

	ctx := browser(t, path)
	do(t, ctx, "open the console", 60*time.Second, chromedp.Navigate(s.apiURL+"/"))
	login(t, ctx, s.admin)
	stat := func(label string) string {
		return read(t, ctx, "read "+label, 60*time.Second, chromedp.Evaluate[string](fmt.Sprintf(statJS, label)))
	}
	runs, rate := fmt.Sprint(ok+failed), fmt.Sprintf("%.1f %%", 100*float64(ok)/float64(ok+failed))
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, err := chromedp.Run(actx, chromedp.Steps(waitStat("runs in the last hour", runs), waitStat("success rate", rate)))
	cancel()
	if err != nil {
		t.Errorf("the dashboard shows %q runs in the last hour and a success rate of %q, want %s and %s (%v)",
			stat("runs in the last hour"), stat("success rate"), runs, rate, err)
	}
	if lat := stat("run time p50 / p95"); strings.Contains(lat, "—") {
		t.Errorf("the dashboard shows latencies %q, want the p50 and p95 of %d runs", lat, ok+failed)
	}
	do(t, ctx, "read the count of failures", 60*time.Second,
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//p[@id="states"]/a[@data-state="FAILED"]/span[@class="count"][text()="%d"]`, failed))))
	// The chart of the hour counts every run too.
	charted := read(t, ctx, "read the throughput chart", 60*time.Second, chromedp.Evaluate[int](
		`Chart.getChart('throughput').data.datasets.reduce((a, d) => a + d.data.reduce((x, y) => x + y, 0), 0)`))
	if charted != ok+failed {
		t.Errorf("the throughput chart shows %d runs, want %d", charted, ok+failed)
	}

	// The count of a state links to those instances of the hour.
	do(t, ctx, "open the failures of the hour", 60*time.Second,
		click(`#states a[data-state="FAILED"]`),
		chromedp.WaitVisible(chromedp.ID("page-older")),
	)
	if got := shownIDs(t, ctx); len(got) != failed {
		t.Errorf("the failures of the hour list %d instances, want %d", len(got), failed)
	}
	if hash := read(t, ctx, "read the location", 60*time.Second, chromedp.Evaluate[string](`location.hash`)); hash != "#/instances?state=FAILED&since=1h" {
		t.Errorf("the count of failures links to %s", hash)
	}

	// Pages of 50, older and back.
	page := func(q apiclient.InstanceQuery) []int64 {
		t.Helper()
		q.Task, q.Limit = "echo", 50
		list, err := s.client.ListInstances(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(list))
		for i, in := range list {
			ids[i] = in.ID
		}
		return ids
	}
	first := page(apiclient.InstanceQuery{})
	second := page(apiclient.InstanceQuery{Before: first[len(first)-1]})
	do(t, ctx, "open the newest page", 60*time.Second,
		chromedp.Navigate(s.apiURL+"/#/instances?task=echo"),
		waitIDs(first),
		chromedp.WaitVisible(chromedp.CSS(`span#page-newer.disabled`)),
	)
	do(t, ctx, "page to older instances", 60*time.Second, click("a#page-older"), waitIDs(second))
	do(t, ctx, "page back to newer ones", 60*time.Second, click("a#page-newer"), waitIDs(first))
	do(t, ctx, "page to older instances again", 60*time.Second, click("a#page-older"), waitIDs(second))
	do(t, ctx, "go to the newest page", 60*time.Second, click("a#page-newest"), waitIDs(first))

	// The time filter reaches the API: nothing was fired before 2020.
	do(t, ctx, "filter by time", 60*time.Second,
		setValue("#filter-until", "2020-01-01T00:00:00Z"),
		click(`form.filters button[type=submit]`),
		chromedp.WaitVisible(chromedp.Search(`//p[text()="No instances match."]`)),
		setValue("#filter-until", ""),
		setValue("#filter-since", "1h"),
		click(`form.filters button[type=submit]`),
		waitIDs(first),
	)
	if hash := read(t, ctx, "read the location", 60*time.Second, chromedp.Evaluate[string](`location.hash`)); hash != "#/instances?task=echo&since=1h" {
		t.Errorf("the filter routes to %s, want #/instances?task=echo&since=1h", hash)
	}

	// The newest page shows a new run by itself.
	id := s.fire("echo", nil)
	do(t, ctx, "see a new run appear", 60*time.Second,
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//td/a[@href="#/instances/%d"]`, id))))
}

// idsJS is a script that returns the ids of the instances listed on the page.
const idsJS = `[...document.querySelectorAll('main tbody tr td:first-child a')].map((a) => Number(a.textContent.slice(1)))`

// shownIDs returns the ids of the instances listed on the page.
func shownIDs(t *testing.T, ctx context.Context) []int64 {
	t.Helper()
	return read(t, ctx, "read the instances listed", 60*time.Second, chromedp.Evaluate[[]int64](idsJS))
}

// waitIDs waits until the page lists the instances ids, in that order.
func waitIDs(ids []int64) chromedp.Action[chromedp.Void] {
	want, _ := json.Marshal(ids)
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`JSON.stringify(%s) === %q`, idsJS, want))
}

// consoleAPI starts another API of the system, which serves the metrics
// of reg, and returns its URL.
func (s *system) consoleAPI(reg *prometheus.Registry) string {
	s.t.Helper()
	conn, _ := s.srv.Connect()
	a, err := api.New(api.Options{Store: s.store, Conn: conn, Logger: s.log, Metrics: reg})
	if err != nil {
		s.t.Fatal(err)
	}
	hs := httptest.NewServer(a.Handler())
	s.t.Cleanup(hs.Close)
	return hs.URL
}

// screenshots writes docs/screenshots/{dashboard,tasks,task,instance,workers,instances}.png.
func screenshots(t *testing.T, ctx context.Context, s *system, consoleURL string, id int64) {
	t.Helper()
	s.apply("task_name: nightly-report\nowner: finance\nexecution: {handler: builtin.sleep}\n" +
		"triggers: [{type: cron, schedule: \"30 1 * * *\", timezone: Europe/Paris}]\n")
	s.apply("task_name: sync-crm\nowner: sales\nexecution: {handler: builtin.fail}\n")
	for range 4 {
		s.fire("greet", map[string]string{"who": "the screenshots"})
		s.fire("nightly-report", map[string]float64{"seconds": 0.1})
	}
	s.waitState(s.fire("sync-crm", map[string]string{"message": "the CRM answered 503"}), schemas.StateFailed, 60*time.Second)
	s.waitState(s.fire("greet", map[string]string{"who": "everyone"}), schemas.StateSucceeded, 60*time.Second)
	dir := filepath.Join("..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pages := []struct{ name, hash, ready string }{
		{"dashboard", "#/", "canvas#lag"},
		{"tasks", "#/tasks", "#definition"},
		{"task", "#/tasks/greet", "canvas#durations"},
		{"instance", fmt.Sprintf("#/instances/%d", id), `#logs .line`},
		{"workers", "#/workers", "main table"},
		{"instances", "#/instances", "main table"},
	}
	for _, p := range pages {
		do(t, ctx, "open "+p.name, 60*time.Second,
			// Away first: a navigation to the hash on screen loads nothing.
			chromedp.Navigate("about:blank"),
			chromedp.Navigate(consoleURL+"/"+p.hash),
			chromedp.WaitVisible(chromedp.CSS(p.ready)),
			chromedp.Sleep(300*time.Millisecond), // let the charts and the log tail settle
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				// Messages of the actions before are no part of the page.
				_, err := chromedp.Evaluate[bool](`document.querySelectorAll(".flash").forEach((e) => e.remove()); true`)(ctx, tg)
				return err
			}),
		)
		png := read(t, ctx, "screenshot "+p.name, 60*time.Second, chromedp.FullScreenshot(100))
		path := filepath.Join(dir, p.name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}
