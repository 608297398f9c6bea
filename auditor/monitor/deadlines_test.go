package monitor

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/streams"
)

// TestDeadlineAlert runs the default deadline_missed rule on a test clock
// over a task whose runs must be done by 06:00 in its zone: a run still
// WAITING for its calendar-aligned parent at the deadline fires an alert
// that names the missing parent tick; a run that finished in time fires
// none.
func TestDeadlineAlert(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	ctx := context.Background()
	def := `
task_name: report
execution: {handler: h}
deadline: "06:00"
triggers:
  - {type: cron, schedule: "0 2 * * *", timezone: Europe/Berlin}
`
	e.apply(def)
	task, err := taskdef.ParseTask([]byte(def))
	if err != nil {
		t.Fatal(err)
	}
	hook := newReceiver(t)
	e.channel(schemas.ChannelWebhook, hook.URL)

	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := time.Now().In(berlin)
	tick := time.Date(now.Year(), now.Month(), now.Day(), 2, 0, 0, 0, berlin).AddDate(0, 0, -1)
	deadline, ok := taskdef.Deadline(task, tick)
	if !ok || !deadline.Equal(tick.Add(4*time.Hour)) {
		t.Fatalf("deadline of the tick %v = %v", tick, deadline)
	}
	waiting := e.instance("report", tick,
		tr{"", schemas.StateCreated, 1, "cron", "", tick},
		tr{schemas.StateCreated, schemas.StateWaiting, 1, "dispatcher", "waiting for the ticks of its calendar-aligned parents", tick})
	const reason = "waiting for hourly-load: 1 of 24 ticks of the day before (Europe/Berlin) not succeeded (05:00 FAILED)"
	if err := e.st.SetCalendarReason(ctx, waiting, "report", reason, 1); err != nil {
		t.Fatal(err)
	}
	done := e.instance("report", tick,
		tr{"", schemas.StateCreated, 1, "cron", "", tick},
		tr{schemas.StateCreated, schemas.StateDispatched, 1, "dispatcher", "", tick},
		tr{schemas.StateDispatched, schemas.StateRunning, 1, "worker:w1", "", tick.Add(time.Minute)},
		tr{schemas.StateRunning, schemas.StateSucceeded, 1, "worker:w1", "", tick.Add(time.Hour)})

	// The clock stands one minute past the deadline.
	var c clock
	c.advance(time.Until(deadline.Add(time.Minute)))
	e.monitored(&c)
	key := "report/" + strconv.FormatInt(waiting, 10)
	var got Notification
	waitUntil(t, "the deadline alert of the waiting run", func() bool {
		for _, b := range hook.received() {
			if n := decodeNotification(t, b); n.Rule == "deadline_missed" && n.Status == "firing" {
				if n.Key != key {
					t.Fatalf("deadline alert for %s, want only %s (instance %d finished in time)", n.Key, key, done)
				}
				got = n
				return true
			}
		}
		return false
	})
	if got.InstanceID != waiting || !strings.Contains(got.Reason, "not done by its deadline") || !strings.Contains(got.Reason, "05:00 FAILED") {
		t.Errorf("deadline alert = %+v, want it to name the missing parent tick", got)
	}
	alerts, err := e.st.OpenAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Rule == "deadline_missed" && a.InstanceID == done {
			t.Errorf("an alert for instance %d, which finished in time: %+v", done, a)
		}
	}
}
