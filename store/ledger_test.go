package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestLedgerTellsPausesAndDueTicks: of an hourly task with no instances,
// the ticks while it was paused are missed for the pause, the others
// before for no trigger service, with the misfire policy each; a tick
// after now is due; a cron instance on no tick of the schedule is doubled.
func TestLedgerTellsPausesAndDueTicks(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	st := store.New(db.Pool)
	if _, _, err := st.ApplyTask(t.Context(), parseTask(t,
		"task_name: hourly\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '0 * * * *', misfire: catch_up, max_catch_up: 2}]\n"), "test"); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	// Paused from 02:30 to 04:30: the ticks of 03:00 and 04:00.
	for _, a := range []struct {
		action string
		at     time.Time
	}{{"pause", base.Add(150 * time.Minute)}, {"resume", base.Add(270 * time.Minute)}} {
		if _, err := db.Pool.Exec(t.Context(), `INSERT INTO operator_actions (action, task, operator, at) VALUES ($1, 'hourly', 'test', $2)`,
			a.action, a.at); err != nil {
			t.Fatal(err)
		}
	}
	stray := newRunInstance("hourly", schemas.CronEventID("hourly", 0, base.Add(90*time.Minute)), "", schemas.StateSkipped)
	stray.FiredAt = base.Add(90 * time.Minute)
	create(t, st, stray)

	l, err := st.Ledger(t.Context(), "hourly", base, base.Add(6*time.Hour), base.Add(5*time.Hour+10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range l.Ticks {
		why := tk.Reason
		switch {
		case strings.HasPrefix(why, "the task was paused (from 2025-06-01T02:30:00Z)"):
			why = "paused"
		case strings.HasPrefix(why, "no trigger service fired it in time"):
			why = "down"
		}
		if tk.Status == schemas.TickMissed && !strings.HasSuffix(tk.Reason, "misfire catch_up: at most the latest 2 ticks missed in a row fire, late") {
			t.Errorf("tick %v: reason %q does not name the policy", tk.Tick, tk.Reason)
		}
		got = append(got, tk.Tick.Format("15:04")+" "+tk.Status+" "+why)
	}
	want := []string{"00:00 missed down", "01:00 missed down", "02:00 missed down", "03:00 missed paused", "04:00 missed paused", "05:00 due "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("ticks\n got %q\nwant %q", got, want)
	}
	if len(l.Doubled) != 1 || l.Doubled[0].Status != schemas.TickDoubled {
		t.Errorf("doubled %+v, want the instance of 01:30", l.Doubled)
	}
	if want := "6 ticks, 0 instances, 5 missed, 1 doubled, 0 retried, 1 not yet due"; l.Line != want {
		t.Errorf("summary %q, want %q", l.Line, want)
	}
}
