package taskdef

import (
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// windowProblems checks what the schema cannot say of a calendar-aligned
// after entry (one with a window): its timeout parses, its on condition
// is success, and the task has a cron trigger whose ticks the window is
// counted around.
func windowProblems(t *schemas.Task, i int, a schemas.After) []schemas.Problem {
	field := func(f string) string { return fmt.Sprintf("after[%d].%s", i, f) }
	if a.Window == "" {
		var out []schemas.Problem
		for _, fv := range [][2]string{{"require", a.Require}, {"timeout", a.Timeout}, {"on_timeout", a.OnTimeout}} {
			if f, v := fv[0], fv[1]; v != "" {
				out = append(out, schemas.Problem{Field: field(f), Message: "belongs to a calendar-aligned dependency: set window (previous_hour, previous_day or same_day) or remove " + f})
			}
		}
		return out
	}
	var out []schemas.Problem
	if a.On != "" && a.On != schemas.OnSuccess {
		out = append(out, schemas.Problem{Field: field("on"), Message: "a calendar-aligned dependency waits for its parents' successes; remove on, or drop window to chain on " + string(a.On)})
	}
	if a.Timeout != "" {
		if d, err := time.ParseDuration(a.Timeout); err != nil || d <= 0 {
			out = append(out, schemas.Problem{Field: field("timeout"), Message: fmt.Sprintf("%q is not a positive Go duration such as 6h or 90m", a.Timeout)})
		}
	}
	hasCron := false
	for _, tr := range t.Triggers {
		hasCron = hasCron || tr.Type == schemas.TriggerTypeCron
	}
	if !hasCron {
		out = append(out, schemas.Problem{Field: field("window"), Message: "a calendar-aligned dependency counts its window around the task's cron ticks: give the task a cron trigger (its timezone is the window's zone)"})
	}
	return out
}
