package trigger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/trigger"
)

func TestNewRequiresConnAndStore(t *testing.T) {
	t.Parallel()
	if _, err := trigger.New(trigger.Options{}); err == nil || !strings.Contains(err.Error(), "Options.Conn is required") {
		t.Errorf("New without Conn = %v", err)
	}
}

// firing is what a test expects on AX_TRIGGERS.
type firing struct {
	task    string
	trigger int
	tick    string // RFC 3339, UTC
}

func (f firing) String() string { return fmt.Sprintf("%s/%d@%s", f.task, f.trigger, f.tick) }

func firingsOf(evs []schemas.TriggerEvent) []firing {
	var out []firing
	for _, ev := range evs {
		parts := strings.SplitN(ev.EventID, ":", 4)
		var idx int
		fmt.Sscan(parts[2], &idx)
		out = append(out, firing{ev.Task, idx, rfc(ev.FiredAt)})
	}
	return out
}

// TestHeapFiresTicksInOrder runs tasks with different schedules and zones
// in one service for half an hour of simulated time: every tick fires once,
// at its time, in order, with its event id.
func TestHeapFiresTicksInOrder(t *testing.T) {
	t.Parallel()
	start := mustTime("2024-05-01T09:58:00Z")
	end := mustTime("2024-05-01T10:31:00Z")
	e := newEnv(t, start)
	tasks := []struct {
		name     string
		triggers []schemas.Trigger
	}{
		{"a", []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "*/30 * * * * *"}}},
		{"b", []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "@every 45s", Timezone: "Europe/Berlin"}}},
		{"c", []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "0 */2 * * * *", Timezone: "Europe/Berlin"}}},
		{"d", []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "15 * * * * *", Timezone: "America/New_York"}}},
		{"e", []schemas.Trigger{{Type: schemas.TriggerTypeCron, Schedule: "@hourly", Timezone: "Asia/Kolkata"}}},
		{"f", []schemas.Trigger{
			{Type: schemas.TriggerTypeEvent},
			{Type: schemas.TriggerTypeCron, Schedule: "*/40 * * * * *"},
			{Type: schemas.TriggerTypeCron, Schedule: "10 */3 * * * *", Timezone: "Asia/Tokyo"},
		}},
	}
	var want []firing
	for _, task := range tasks {
		var yaml strings.Builder
		fmt.Fprintf(&yaml, "task_name: %s\nexecution: {handler: h}\ntriggers:\n", task.name)
		for i, tr := range task.triggers {
			fmt.Fprintf(&yaml, "  - {type: %s", tr.Type)
			if tr.Schedule != "" {
				fmt.Fprintf(&yaml, ", schedule: %q", tr.Schedule)
			}
			if tr.Timezone != "" {
				fmt.Fprintf(&yaml, ", timezone: %s", tr.Timezone)
			}
			yaml.WriteString("}\n")
			if tr.Type != schemas.TriggerTypeCron {
				continue
			}
			ticks, err := taskdef.NextFireTimes(tr, start, 200)
			if err != nil {
				t.Fatal(err)
			}
			for _, tick := range ticks {
				if tick.After(end) {
					break
				}
				want = append(want, firing{task.name, i, rfc(tick)})
			}
		}
		e.apply(yaml.String())
	}
	e.start(trigger.Options{})

	var deadlines []string
	for e.clock.Now().Before(end) {
		deadlines = append(deadlines, rfc(e.clock.Step(t, 1)))
	}
	e.clock.WaitTimers(t, 1)

	evs := e.events()
	got := firingsOf(evs)
	for i := 1; i < len(got); i++ {
		if got[i].tick < got[i-1].tick {
			t.Errorf("firing %d (%v) is older than the one before it (%v)", i, got[i], got[i-1])
		}
	}
	cmp := func(a, b firing) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Errorf("fired %d ticks, want %d:\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
	// The service woke once per distinct tick, exactly at it.
	var wantDeadlines []string
	for _, f := range want {
		wantDeadlines = append(wantDeadlines, f.tick)
	}
	slices.Sort(wantDeadlines)
	wantDeadlines = slices.Compact(wantDeadlines)
	if !slices.Equal(deadlines, wantDeadlines) {
		t.Errorf("the timer was armed for\n%v\nwant\n%v", deadlines, wantDeadlines)
	}
	for _, ev := range evs {
		if ev.Source != schemas.SourceCron || ev.Reason != "" {
			t.Errorf("event %+v: want source cron and no reason", ev)
		}
		parts := strings.SplitN(ev.EventID, ":", 4)
		var idx int
		fmt.Sscan(parts[2], &idx)
		if ev.EventID != schemas.CronEventID(ev.Task, idx, ev.FiredAt) {
			t.Errorf("event id %q is not CronEventID of its task and tick", ev.EventID)
		}
	}
	e.waitLastTick("f", 2, mustTime("2024-05-01T10:30:10Z"))
}

// TestReplansOnTaskChange changes tasks through the tasks bucket while the
// service runs: a new schedule, disabling, enabling and deleting a task each
// show at once in the timer the service waits on.
func TestReplansOnTaskChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:30Z"))
	e.apply("task_name: tx\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 0 * * * *'}]\n")
	e.apply("task_name: ty\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 0 12 * * *'}]\n")
	published := e.published()
	e.start(trigger.Options{})
	waitDeadline := func(want string) {
		t.Helper()
		e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == want })
	}
	waitDeadline("2024-05-01T11:00:00Z")

	e.apply("task_name: tx\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '*/10 * * * * *'}]\n")
	waitDeadline("2024-05-01T10:00:40Z")
	e.clock.Step(t, 1)
	waitDeadline("2024-05-01T10:00:50Z")

	e.setEnabled("tx", false)
	waitDeadline("2024-05-01T12:00:00Z") // only y is left

	e.setEnabled("tx", true) // the clock did not move: nothing was missed
	waitDeadline("2024-05-01T10:00:50Z")

	// A task deleted from the store leaves the heap when its entry goes.
	ctx := context.Background()
	if _, err := e.db.Pool.Exec(ctx, `DELETE FROM task_versions WHERE name = 'tx'; DELETE FROM tasks WHERE name = 'tx'`); err != nil {
		t.Fatal(err)
	}
	if err := e.kv.Delete(ctx, "tx"); err != nil {
		t.Fatal(err)
	}
	waitDeadline("2024-05-01T12:00:00Z")

	// An unchanged trigger keeps its plan when its task changes otherwise.
	e.apply("task_name: ty\ndescription: now with words\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 0 12 * * *'}]\n")
	e.apply("task_name: tz\nexecution: {handler: h}\ntriggers: [{type: event}]\n")
	e.setEnabled("tz", false)
	waitDeadline("2024-05-01T12:00:00Z")

	got := firingsOf(e.events())
	want := []firing{{"tx", 0, "2024-05-01T10:00:40Z"}}
	if !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
	// The stream drops a second firing of a tick as its duplicate; the
	// service must not publish one: a task enabled again goes on from the
	// tick it fired last, saved or not.
	if got := firingsOf(published()); !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

// TestDST runs the daylight saving time rules in the service: the timer
// wakes at the ticks of taskdef.CronSchedule and fires each once.
func TestDST(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, zone, schedule, start string
		want                        []string
	}{
		{"New York spring forward", "America/New_York", "30 2 * * *", "2024-03-09T12:00:00Z",
			[]string{"2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"}},
		{"New York fall back", "America/New_York", "30 1 * * *", "2024-11-02T12:00:00Z",
			[]string{"2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"}},
		{"Berlin spring forward", "Europe/Berlin", "0 30 2 * * *", "2024-03-30T12:00:00Z",
			[]string{"2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"}},
		{"Berlin fall back", "Europe/Berlin", "*/30 2 * * *", "2024-10-26T12:00:00Z",
			[]string{"2024-10-27T00:00:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, mustTime(tc.start))
			e.apply(fmt.Sprintf("task_name: dst\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '%s', timezone: %s}]\n", tc.schedule, tc.zone))
			e.start(trigger.Options{})
			var woke []string
			for range tc.want {
				woke = append(woke, rfc(e.clock.Step(t, 1)))
			}
			e.clock.WaitTimers(t, 1)
			if !slices.Equal(woke, tc.want) {
				t.Errorf("woke at %v, want %v", woke, tc.want)
			}
			var fired []string
			for _, f := range firingsOf(e.events()) {
				fired = append(fired, f.tick)
			}
			if !slices.Equal(fired, tc.want) {
				t.Errorf("fired %v, want %v", fired, tc.want)
			}
		})
	}
}

// TestTickWithinGraceFiresOnTime wakes the service late: within the grace
// a tick fires as usual; beyond it, it is missed (and skipped by default).
func TestTickWithinGraceFiresOnTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	e.apply("task_name: g\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 * * * * *'}]\n")
	e.start(trigger.Options{MisfireGrace: 2 * time.Second})
	e.clock.WaitTimers(t, 1)
	e.clock.Set(mustTime("2024-05-01T10:01:01.9Z")) // 1.9 s late: on time
	e.clock.WaitTimers(t, 1)
	e.clock.Set(mustTime("2024-05-01T10:02:02.1Z")) // 2.1 s late: missed
	e.clock.WaitTimers(t, 1)
	got := firingsOf(e.events())
	if want := []firing{{"g", 0, "2024-05-01T10:01:00Z"}}; !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
	lines := e.logs.Lines("cron ticks missed")
	if len(lines) != 1 || lines[0]["missed"] != 1.0 || lines[0]["first_skipped"] != "2024-05-01T10:02:00Z" || lines[0]["level"] != "warn" {
		t.Errorf("misfire log = %v, want one warning for the tick of 10:02", lines)
	}
	e.waitLastTick("g", 0, mustTime("2024-05-01T10:02:00Z"))
}

// TestFailedPublishIsRetried loses the stream for a while: the firing of
// that tick is published again once it is back, and the trigger's state
// claims the tick only then.
func TestFailedPublishIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	e.apply("task_name: p\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '*/10 * * * * *'}]\n")
	e.start(trigger.Options{})
	e.clock.Step(t, 1) // 10:00:10 fires
	e.clock.WaitTimers(t, 1)
	e.waitLastTick("p", 0, mustTime("2024-05-01T10:00:10Z"))

	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, e.srv.Topology.TriggersStream()); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(t, 1) // 10:00:20 fails
	// The loop wakes for the retry before the next tick.
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:00:21Z" })
	if lines := e.logs.Lines("publishing cron firings failed; trying again"); len(lines) == 0 {
		t.Error("the failure was not logged")
	}
	states, err := e.st.GetTriggerStates(ctx, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if !st.LastTick.Equal(mustTime("2024-05-01T10:00:10Z")) {
			t.Errorf("the state claims %v before the firing of 10:00:20 arrived", st.LastTick)
		}
	}

	if err := e.srv.Topology.Ensure(ctx, e.js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(t, 1) // 10:00:21: the retry
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:00:30Z" })
	got := firingsOf(e.events())
	if want := []firing{{"p", 0, "2024-05-01T10:00:20Z"}}; !slices.Equal(got, want) {
		t.Errorf("the new stream holds %v, want %v", got, want)
	}
	e.waitLastTick("p", 0, mustTime("2024-05-01T10:00:20Z"))
}
