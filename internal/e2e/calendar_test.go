package e2e_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestCalendarDependencyOnYesterdaysHours runs a daily task that waits for
// the previous day's hourly runs of another task (in Europe/Berlin), with
// the dispatcher on a test clock: on an ordinary day it waits through 23
// successes and starts when the 24th succeeds; on the day the clocks fall
// back it counts 25 hours, on the day they spring forward 23; while one
// hour failed it waits with a reason naming that hour, and at its timeout
// it fails, saying so.
func TestCalendarDependencyOnYesterdaysHours(t *testing.T) {
	t.Parallel()
	// The dispatcher's clock: real time plus an offset the test moves.
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s := newSystem(t, func(o *dispatcher.Options) {
		o.NowFunc = now
		o.CalendarPoll = 50 * time.Millisecond
	})
	s.apply(`
task_name: hourly-load
execution:
  handler: test.hourly
  retry:
    max_attempts: 1
triggers:
  - type: cron
    schedule: "0 * * * *"
    timezone: Europe/Berlin
`)
	s.apply(`
task_name: daily-report
execution:
  handler: test.hourly
triggers:
  - type: cron
    schedule: "0 6 * * *"
    timezone: Europe/Berlin
after:
  - task: hourly-load
    window: previous_day
    timeout: 2h
`)
	var failing sync.Map // event ids the handler fails
	mux := builtinsMux()
	mux.HandleFunc("test.hourly", func(_ context.Context, j *executor.Job) (any, error) {
		if _, bad := failing.Load(j.EventID); bad {
			return nil, executor.Permanent(errString("the load of this hour failed"))
		}
		return nil, nil
	})
	s.executor("w1", mux, 16)
	ctx := context.Background()
	berlin, _ := time.LoadLocation("Europe/Berlin")

	fire := func(task string, tick time.Time) {
		t.Helper()
		ev := schemas.TriggerEvent{EventID: schemas.CronEventID(task, 0, tick), Source: schemas.SourceCron, FiredAt: tick.UTC()}
		if _, err := streams.Publish(ctx, s.js, s.srv.Topology.Trigger(task), ev.EventID, ev); err != nil {
			t.Fatal(err)
		}
	}
	stateOf := func(task string, tick time.Time) (string, string) {
		var state, reason string
		err := s.pool.QueryRow(ctx, `SELECT i.state, COALESCE(c.reason, '') FROM instances i
			LEFT JOIN calendar_waits c ON c.instance_id = i.id WHERE i.task = $1 AND i.event_id = $2`,
			task, schemas.CronEventID(task, 0, tick)).Scan(&state, &reason)
		if err != nil {
			return "", err.Error()
		}
		return state, reason
	}
	hours := func(day time.Time) []time.Time {
		var out []time.Time
		next := day.AddDate(0, 0, 1)
		for h := day; h.Before(next); h = h.Add(time.Hour) {
			out = append(out, h)
		}
		return out
	}
	awaitEnded := func(ticks []time.Time) {
		t.Helper()
		waitFor(t, "the hourly runs to end", 60*time.Second, func() (bool, error) {
			for _, h := range ticks {
				if st, _ := stateOf("hourly-load", h); st != "SUCCEEDED" && st != "FAILED" {
					return false, nil
				}
			}
			return true, nil
		})
	}
	awaitWait := func(daily time.Time, want string) {
		t.Helper()
		waitFor(t, "the daily run to wait with "+want, 30*time.Second, func() (bool, error) {
			st, reason := stateOf("daily-report", daily)
			return st == "WAITING" && strings.Contains(reason, want), nil
		})
	}

	for _, tc := range []struct {
		name string
		day  time.Time // the day of the hourly parents
	}{
		{"ordinary day", time.Date(2026, 3, 10, 0, 0, 0, 0, berlin)},
		{"25-hour day", time.Date(2026, 10, 25, 0, 0, 0, 0, berlin)},
	} {
		ticks := hours(tc.day)
		daily := time.Date(tc.day.Year(), tc.day.Month(), tc.day.Day()+1, 6, 0, 0, 0, berlin)
		fire("daily-report", daily)
		awaitWait(daily, "of "+strconv.Itoa(len(ticks))+" ticks of "+tc.day.Format(time.DateOnly))
		for _, h := range ticks[:len(ticks)-1] {
			fire("hourly-load", h)
		}
		awaitEnded(ticks[:len(ticks)-1])
		last := ticks[len(ticks)-1].In(berlin).Format("15:04")
		// "hourly-load: " anchors the count: "21 of 24" holds "1 of 24" too.
		awaitWait(daily, "hourly-load: 1 of "+strconv.Itoa(len(ticks))+" ticks")
		if _, reason := stateOf("daily-report", daily); !strings.Contains(reason, last+" not run") {
			t.Errorf("%s: the wait reason %q does not name the missing hour %s", tc.name, reason, last)
		}
		// The operator reads the same reason on the instance.
		if w := s.waitOf("daily-report", schemas.CronEventID("daily-report", 0, daily)); w == nil ||
			w.Kind != schemas.WaitCalendarParents || !strings.Contains(w.Reason, last+" not run") {
			t.Errorf("%s: GET /v1/instances/{id} says it waits %+v; want %s naming %s", tc.name, w, schemas.WaitCalendarParents, last)
		}
		fire("hourly-load", ticks[len(ticks)-1])
		waitFor(t, tc.name+": the daily run to succeed", 30*time.Second, func() (bool, error) {
			st, _ := stateOf("daily-report", daily)
			return st == "SUCCEEDED", nil
		})
		t.Logf("%s: %d hourly parents, the daily run started after the last", tc.name, len(ticks))
	}

	// The day the clocks spring forward: 23 hours, one of them failed.
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin)
	ticks := hours(day)
	if len(ticks) != 23 {
		t.Fatalf("2026-03-29 in Berlin has %d hours", len(ticks))
	}
	daily := time.Date(2026, 3, 30, 6, 0, 0, 0, berlin)
	failed := time.Date(2026, 3, 29, 5, 0, 0, 0, berlin)
	failing.Store(schemas.CronEventID("hourly-load", 0, failed), true)
	fire("daily-report", daily)
	for _, h := range ticks {
		fire("hourly-load", h)
	}
	awaitEnded(ticks)
	awaitWait(daily, "hourly-load: 1 of 23 ticks of 2026-03-29 (Europe/Berlin) not succeeded (05:00 FAILED)")
	// The ticks are long past: the wait counts from the instance's
	// creation, now; two hours on, it times out.
	offset.Store(int64(2*time.Hour + time.Minute))
	waitFor(t, "the daily run to fail at its timeout", 30*time.Second, func() (bool, error) {
		st, _ := stateOf("daily-report", daily)
		return st == "FAILED", nil
	})
	var reason string
	if err := s.pool.QueryRow(ctx, `SELECT t.reason FROM instance_transitions t JOIN instances i ON i.id = t.instance_id
		WHERE i.task = 'daily-report' AND t.to_state = 'FAILED'`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "on_timeout fail") || !strings.Contains(reason, "05:00 FAILED") {
		t.Errorf("the timeout's reason %q does not say what never arrived", reason)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// waitOf returns the wait the API shows on the instance of task's firing
// eventID.
func (s *system) waitOf(task, eventID string) *schemas.Wait {
	s.t.Helper()
	var id int64
	if err := s.pool.QueryRow(context.Background(), `SELECT id FROM instances WHERE task = $1 AND event_id = $2`,
		task, eventID).Scan(&id); err != nil {
		s.t.Fatal(err)
	}
	resp, err := apitest.HTTPClient(nil, s.admin).Get(s.apiURL + "/v1/instances/" + strconv.FormatInt(id, 10))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var in schemas.Instance
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		s.t.Fatalf("GET instance %d answered %d: %v", id, resp.StatusCode, err)
	}
	return in.Wait
}
