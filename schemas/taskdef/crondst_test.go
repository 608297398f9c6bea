package taskdef_test

import (
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// TestWallNoteMarksBothChangesInBerlin walks "30 2 * * *" and "0 * * * *"
// through 2025's changes in Europe/Berlin: the spring night's tick says
// 02:30 did not exist, the autumn night's that 02:30 occurred twice; a
// cadence and an ordinary night say nothing.
func TestWallNoteMarksBothChangesInBerlin(t *testing.T) {
	t.Parallel()
	daily, err := taskdef.ParseCronSchedule("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	hourly, err := taskdef.ParseCronSchedule("0 * * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, tc := range []struct {
		s          *taskdef.CronSchedule
		after      time.Time
		tick, kind string
		note       string
	}{
		{daily, time.Date(2025, 3, 30, 0, 0, 0, 0, berlin), "2025-03-30T03:00:00+02:00", taskdef.DSTGap,
			"local 02:30:00 did not exist (the clocks sprang forward from 02:00 to 03:00): fired once at 03:00 CEST"},
		{daily, time.Date(2025, 10, 26, 0, 0, 0, 0, berlin), "2025-10-26T02:30:00+02:00", taskdef.DSTRepeat,
			"local 02:30:00 occurred twice (the clocks fell back): fired at 02:30 CEST, not again at 02:30 CET"},
		{daily, time.Date(2025, 3, 31, 0, 0, 0, 0, berlin), "2025-03-31T02:30:00+02:00", "", ""},
		{hourly, time.Date(2025, 10, 26, 1, 30, 0, 0, berlin), "2025-10-26T02:00:00+02:00", "", ""},
	} {
		tick := tc.s.Next(tc.after)
		if got := tick.Format(time.RFC3339); got != tc.tick {
			t.Errorf("%s after %v: tick %s, want %s", tc.s, tc.after, got, tc.tick)
			continue
		}
		kind, note := tc.s.WallNote(tick)
		if kind != tc.kind || note != tc.note {
			t.Errorf("%s at %s: (%q, %q), want (%q, %q)", tc.s, tc.tick, kind, note, tc.kind, tc.note)
		}
	}
}
