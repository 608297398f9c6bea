package taskdef

import (
	"fmt"
	"strings"
	"time"
)

// DST marks of a tick, as [CronSchedule.WallNote] tells them.
const (
	// DSTGap marks a tick at the end of a spring-forward gap that fires
	// the local times of the schedule the gap skipped.
	DSTGap = "gap"
	// DSTRepeat marks a tick whose local time occurs twice (the clocks
	// fall back over it): it fires at its first occurrence only.
	DSTRepeat = "repeat"
)

// WallNote tells how daylight saving time shaped tick, one of the
// schedule's ticks ([CronSchedule.Next]): kind is [DSTGap], [DSTRepeat]
// or "" (nothing to tell), and note says it in words, with the local
// times. A schedule that keeps a cadence (its hour field matches every
// hour, or "@every") has nothing to tell.
func (s *CronSchedule) WallNote(tick time.Time) (kind, note string) {
	if s.every > 0 || !s.fixedHours {
		return "", ""
	}
	t := tick.In(s.loc)
	if start, _ := t.ZoneBounds(); start.Equal(t) {
		_, before := t.Add(-time.Second).Zone()
		_, after := t.Zone()
		if after > before {
			gapTo := wallUTC(t)
			gapFrom := gapTo.Add(-time.Duration(after-before) * time.Second)
			var skipped []string
			for m := s.wall.Next(gapFrom.Add(-time.Second)); !m.IsZero() && m.Before(gapTo); m = s.wall.Next(m) {
				if len(skipped) == 3 {
					skipped = append(skipped, "…")
					break
				}
				skipped = append(skipped, m.Format("15:04:05"))
			}
			if len(skipped) > 0 {
				return DSTGap, fmt.Sprintf("local %s did not exist (the clocks sprang forward from %s to %s): fired once at %s",
					strings.Join(skipped, ", "), gapFrom.Format("15:04"), gapTo.Format("15:04"), t.Format("15:04 MST"))
			}
		}
	}
	if _, end := t.ZoneBounds(); !end.IsZero() {
		_, now := t.Zone()
		_, later := end.Zone()
		if back := time.Duration(now-later) * time.Second; back > 0 && end.Sub(t) <= back {
			again := t.Add(back)
			return DSTRepeat, fmt.Sprintf("local %s occurred twice (the clocks fell back): fired at %s, not again at %s",
				t.Format("15:04:05"), t.Format("15:04 MST"), again.Format("15:04 MST"))
		}
	}
	return "", ""
}

// wallUTC returns t's local wall-clock time read as UTC.
func wallUTC(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}
