package trigger_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/trigger"
)

// TestMisfireAfterDowntime fires a per-minute trigger until 10:03, stops
// the service, and starts a new one at 10:10:30: the ticks of 10:04 to 10:10
// were missed, and each policy does its own thing with them. Without the
// policy all seven would fire, or none.
func TestMisfireAfterDowntime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy string
		fired        []string // missed ticks fired late
		reason       string
		skipped      float64
		lastSkipped  string
	}{
		{"skip", "misfire: skip", nil, "", 7, "2024-05-01T10:10:00Z"},
		{"default is skip", "", nil, "", 7, "2024-05-01T10:10:00Z"},
		{"fire_once", "misfire: fire_once",
			[]string{"2024-05-01T10:10:00Z"},
			"misfire fire_once: the latest of 7 missed ticks (2024-05-01T10:04:00Z to 2024-05-01T10:10:00Z), fired late",
			6, "2024-05-01T10:09:00Z"},
		{"catch_up bounded", "misfire: catch_up, max_catch_up: 3",
			[]string{"2024-05-01T10:08:00Z", "2024-05-01T10:09:00Z", "2024-05-01T10:10:00Z"},
			"misfire catch_up: missed tick fired late (3 of 7 missed ticks fired, oldest first)",
			4, "2024-05-01T10:07:00Z"},
		{"catch_up all", "misfire: catch_up",
			[]string{"2024-05-01T10:04:00Z", "2024-05-01T10:05:00Z", "2024-05-01T10:06:00Z", "2024-05-01T10:07:00Z",
				"2024-05-01T10:08:00Z", "2024-05-01T10:09:00Z", "2024-05-01T10:10:00Z"},
			"misfire catch_up: missed tick fired late (7 of 7 missed ticks fired, oldest first)",
			0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
			policy := ""
			if tc.policy != "" {
				policy = ", " + tc.policy
			}
			e.apply(fmt.Sprintf("task_name: m\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 * * * * *'%s}]\n", policy))
			stop := e.start(trigger.Options{})
			for range 3 {
				e.clock.Step(t, 1)
			}
			e.clock.WaitTimers(t, 1)
			stop()
			e.waitLastTick("m", 0, mustTime("2024-05-01T10:03:00Z"))

			e.clock.Set(mustTime("2024-05-01T10:10:30Z"))
			e.start(trigger.Options{})
			if d := e.clock.WaitTimers(t, 1); rfc(d[0]) != "2024-05-01T10:11:00Z" {
				t.Errorf("next wake at %v, want 10:11", d)
			}
			evs := e.events()
			if len(evs) < 3 {
				t.Fatalf("%d events, want the 3 before the downtime first", len(evs))
			}
			var fired []string
			for _, ev := range evs[3:] {
				fired = append(fired, rfc(ev.FiredAt))
				if ev.Reason != tc.reason || ev.Source != schemas.SourceCron {
					t.Errorf("event %s has source %q and reason %q, want cron and %q", ev.EventID, ev.Source, ev.Reason, tc.reason)
				}
			}
			if !slices.Equal(fired, tc.fired) {
				t.Errorf("fired late %v, want %v", fired, tc.fired)
			}
			lines := e.logs.Lines("cron ticks missed")
			if len(lines) != 1 {
				t.Fatalf("%d misfire log lines, want 1: %v", len(lines), lines)
			}
			l := lines[0]
			want := map[string]any{
				"level": "warn", "task": "m", "trigger": 0.0, "missed": 7.0, "fired": float64(len(tc.fired)), "skipped": tc.skipped,
				"first_missed": "2024-05-01T10:04:00Z", "last_missed": "2024-05-01T10:10:00Z",
			}
			if tc.skipped > 0 {
				want["first_skipped"], want["last_skipped"] = "2024-05-01T10:04:00Z", tc.lastSkipped
			}
			for k, v := range want {
				if l[k] != v {
					t.Errorf("log field %s = %v, want %v (line %v)", k, l[k], v, l)
				}
			}
			if _, ok := l["first_skipped"]; ok && tc.skipped == 0 {
				t.Errorf("log line names skipped ticks when none were: %v", l)
			}
			// Every missed tick is settled, fired or not; the next fires on time.
			e.waitLastTick("m", 0, mustTime("2024-05-01T10:10:00Z"))
			e.clock.Step(t, 1)
			e.clock.WaitTimers(t, 1)
			if evs := e.events(); rfc(evs[len(evs)-1].FiredAt) != "2024-05-01T10:11:00Z" || evs[len(evs)-1].Reason != "" {
				t.Errorf("last event %+v, want the tick of 10:11 on time", evs[len(evs)-1])
			}
		})
	}
}

// TestMisfireAfterReenable disables a task for a while: when it is enabled
// again, the ticks it missed follow its policy.
func TestMisfireAfterReenable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	e.apply("task_name: r\nexecution: {handler: h}\ntriggers: [{type: event}, {type: cron, schedule: '0 * * * * *', misfire: catch_up}]\n")
	e.start(trigger.Options{})
	e.clock.Step(t, 1) // 10:01
	e.clock.WaitTimers(t, 1)
	e.setEnabled("r", false)
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 0 })
	e.waitLastTick("r", 1, mustTime("2024-05-01T10:01:00Z"))
	e.clock.Set(mustTime("2024-05-01T10:04:30Z"))
	e.setEnabled("r", true)
	e.clock.WaitFor(t, func(_ time.Time, d []time.Time) bool { return len(d) == 1 && rfc(d[0]) == "2024-05-01T10:05:00Z" })

	var got []string
	for _, ev := range e.events() {
		got = append(got, rfc(ev.FiredAt)+" "+ev.Reason)
	}
	const late = " misfire catch_up: missed tick fired late (3 of 3 missed ticks fired, oldest first)"
	want := []string{"2024-05-01T10:01:00Z ", "2024-05-01T10:02:00Z" + late, "2024-05-01T10:03:00Z" + late, "2024-05-01T10:04:00Z" + late}
	if !slices.Equal(got, want) {
		t.Errorf("fired\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNewTriggerNeverFiresTicksFromBeforeItExisted starts the service
// after a catch_up trigger was created: the ticks since its creation are
// missed ticks, none before it.
func TestNewTriggerNeverFiresTicksFromBeforeItExisted(t *testing.T) {
	t.Parallel()
	// The task's updated_at is the database's now; the simulated clock
	// starts 20 minutes later.
	start := time.Now().Add(20 * time.Minute).Truncate(time.Minute).Add(30 * time.Second)
	e := newEnv(t, start)
	rec := e.apply("task_name: newtask\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 * * * * *', misfire: catch_up, max_catch_up: 1000}]\n")
	e.start(trigger.Options{})
	e.clock.WaitTimers(t, 1)
	var want []string
	for tick := rec.UpdatedAt.Truncate(time.Minute).Add(time.Minute); !tick.After(start); tick = tick.Add(time.Minute) {
		want = append(want, rfc(tick))
	}
	var got []string
	for _, ev := range e.events() {
		got = append(got, rfc(ev.FiredAt))
	}
	if !slices.Equal(got, want) || len(want) < 19 {
		t.Errorf("fired %v, want the ticks after %v: %v", got, rfc(rec.UpdatedAt), want)
	}
}

// TestChangedScheduleStartsAfresh changes a trigger's schedule while no
// service runs: the new schedule's ticks before the change are not missed.
func TestChangedScheduleStartsAfresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustTime("2024-05-01T10:00:00Z"))
	e.apply("task_name: c\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 * * * * *', misfire: catch_up}]\n")
	stop := e.start(trigger.Options{})
	e.clock.Step(t, 1)
	e.clock.WaitTimers(t, 1)
	stop()
	e.apply("task_name: c\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '30 * * * * *', misfire: catch_up}]\n")
	e.clock.Set(mustTime("2024-05-01T10:05:45Z"))
	e.start(trigger.Options{})
	if d := e.clock.WaitTimers(t, 1); rfc(d[0]) != "2024-05-01T10:06:30Z" {
		t.Errorf("next wake at %v, want 10:06:30", d)
	}
	if n := len(e.events()); n != 1 {
		t.Errorf("%d events, want only the one before the change", n)
	}
	if lines := e.logs.Lines("cron ticks missed"); len(lines) != 0 {
		t.Errorf("misfires logged: %v", lines)
	}
}
