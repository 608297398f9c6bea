package taskdef

import (
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// Deadline returns when a run of def fired at tick must have finished, by
// def's deadline (see [schemas.Task.Deadline]), and false when def has
// none or it does not parse. A local time HH:MM is the first such time
// after the tick in the zone of def's first cron trigger (UTC without
// one); on a day the clocks skip it, the time after the gap.
func Deadline(def *schemas.Task, tick time.Time) (time.Time, bool) {
	if def == nil || def.Deadline == "" {
		return time.Time{}, false
	}
	if d, err := time.ParseDuration(def.Deadline); err == nil && d > 0 {
		return tick.Add(d), true
	}
	at, err := time.Parse("15:04", def.Deadline)
	if err != nil {
		return time.Time{}, false
	}
	loc := time.UTC
	for _, tr := range def.Triggers {
		if tr.Type == schemas.TriggerTypeCron {
			if l, err := time.LoadLocation(tr.WithDefaults().Timezone); err == nil {
				loc = l
			}
			break
		}
	}
	t := tick.In(loc)
	d := time.Date(t.Year(), t.Month(), t.Day(), at.Hour(), at.Minute(), 0, 0, loc)
	if !d.After(tick) {
		d = time.Date(t.Year(), t.Month(), t.Day()+1, at.Hour(), at.Minute(), 0, 0, loc)
	}
	return d, true
}

// deadlineProblems checks a task's deadline.
func deadlineProblems(t *schemas.Task) []schemas.Problem {
	if t.Deadline == "" {
		return nil
	}
	if d, err := time.ParseDuration(t.Deadline); err == nil && d > 0 {
		return nil
	}
	if _, err := time.Parse("15:04", t.Deadline); err == nil {
		return nil
	}
	return []schemas.Problem{{Field: "deadline", Message: fmt.Sprintf("%q is neither a local time HH:MM (06:00) nor a positive Go duration after the tick (90m, 6h)", t.Deadline)}}
}
