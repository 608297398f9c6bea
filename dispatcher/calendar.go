package dispatcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// Calendar-aligned dependencies: a task whose after names a parent with a
// window (previous_hour, previous_day, same_day) does not chain on it. A
// firing of such a task is created WAITING (calendarHold); the calendar
// loop looks at those instances every CalendarPoll and, for each entry,
// lists the parent's cron ticks in the window around the firing's tick,
// in the task's zone — so a previous_day of an hourly parent holds 23 or
// 25 ticks on a DST day — and reads the instances of those ticks by their
// identity (schemas.CronEventID). When every tick has SUCCEEDED the
// instance is DISPATCHED; until then its wait reason (calendar_waits)
// names the parents and ticks missing; at its timeout (default 24h after
// the tick, or after the instance was made when that is later: a backfill)
// on_timeout fails, skips or runs it.

// DefaultCalendarPoll is how often the calendar loop looks by default.
const DefaultCalendarPoll = time.Second

// defaultWindowTimeout bounds a calendar wait by default.
const defaultWindowTimeout = 24 * time.Hour

// calendarHold returns the reason a new firing of def waits for its
// calendar-aligned parents, "" when def has none.
func calendarHold(def *schemas.Task) string {
	var names []string
	for _, a := range def.After {
		if a.Window != "" {
			names = append(names, fmt.Sprintf("%s (%s)", a.Task, a.Window))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "waiting for the ticks of its calendar-aligned parents: " + strings.Join(names, ", ")
}

// runCalendar runs the calendar loop until ctx ends.
func (s *Service) runCalendar(ctx context.Context) error {
	poll := s.opts.CalendarPoll
	if poll <= 0 {
		poll = DefaultCalendarPoll
	}
	return s.every(ctx, poll, "calendar dependencies not checked; trying again", s.calendarPass)
}

// calendarPass checks every instance waiting for calendar-aligned parents.
func (s *Service) calendarPass(ctx context.Context) error {
	waits, err := s.opts.Store.CalendarWaiting(ctx, 1000)
	if err != nil {
		return err
	}
	for _, w := range waits {
		missing, n, err := s.missingParents(ctx, w)
		if err != nil {
			return err
		}
		to, reason := schemas.StateDispatched, "its calendar-aligned parents all succeeded"
		if n > 0 {
			// The wait counts from the tick, or from the instance's
			// creation when that came later (a backfill of past ticks).
			deadline, policy := windowTimeout(w.Definition, latest(w.FiredAt, w.CreatedAt))
			if !s.now().After(deadline) {
				if missing != w.Reason {
					if err := s.opts.Store.SetCalendarReason(ctx, w.InstanceID, w.Task, missing, n); err != nil {
						return err
					}
				}
				continue
			}
			reason = fmt.Sprintf("calendar-aligned parents did not all succeed by %s (on_timeout %s): %s",
				deadline.UTC().Format(time.RFC3339), policy, missing)
			switch policy {
			case "skip":
				to = schemas.StateSkipped
			case "run":
				to = schemas.StateDispatched
			default:
				to = schemas.StateFailed
			}
		}
		attempts, err := s.opts.Store.ReleaseCalendar(ctx, w.InstanceID, to, reason)
		if err != nil {
			return err
		}
		if err := s.publishAttempts(ctx, s.pub.Batch(), attempts); err != nil {
			return err
		}
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// windowTimeout returns when w's wait ends and what it then does: the
// earliest timeout of its windowed entries after the tick.
func windowTimeout(def *schemas.Task, tick time.Time) (time.Time, string) {
	var at time.Time
	policy := "fail"
	for _, a := range def.After {
		if a.Window == "" {
			continue
		}
		d := defaultWindowTimeout
		if v, err := time.ParseDuration(a.Timeout); err == nil && v > 0 {
			d = v
		}
		if t := tick.Add(d); at.IsZero() || t.Before(at) {
			at = t
			if a.OnTimeout != "" {
				policy = a.OnTimeout
			}
		}
	}
	return at, policy
}

// missingParents returns the parent ticks of w's windows that have not
// succeeded, as a wait reason, and how many they are.
func (s *Service) missingParents(ctx context.Context, w store.CalendarWait) (string, int, error) {
	loc := taskZone(w.Definition)
	var parts []string
	total := 0
	for _, a := range w.Definition.After {
		if a.Window == "" {
			continue
		}
		from, to, label := window(a.Window, w.FiredAt, loc)
		parent, err := s.opts.Store.GetTask(ctx, a.Task)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: the task does not exist (%v)", a.Task, err))
			total++
			continue
		}
		index, sched := parentSchedule(parent.Definition)
		if sched == nil {
			parts = append(parts, fmt.Sprintf("%s: the task has no cron trigger whose ticks count", a.Task))
			total++
			continue
		}
		var ticks []time.Time
		var ids []string
		for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = sched.Next(t) {
			ticks = append(ticks, t)
			ids = append(ids, schemas.CronEventID(a.Task, index, t))
		}
		states, err := s.opts.Store.TickStates(ctx, a.Task, ids)
		if err != nil {
			return "", 0, err
		}
		var miss []string
		for i, t := range ticks {
			st, ok := states[ids[i]]
			switch {
			case !ok:
				miss = append(miss, t.In(loc).Format("15:04")+" not run")
			case st != schemas.StateSucceeded:
				miss = append(miss, t.In(loc).Format("15:04")+" "+string(st))
			}
		}
		if len(miss) == 0 {
			continue
		}
		total += len(miss)
		shown := miss
		if len(shown) > 6 {
			shown = append(shown[:6:6], fmt.Sprintf("and %d more", len(miss)-6))
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d ticks of %s not succeeded (%s)", a.Task, len(miss), len(ticks), label, strings.Join(shown, ", ")))
	}
	if total == 0 {
		return "", 0, nil
	}
	return "waiting for " + strings.Join(parts, "; "), total, nil
}

// window returns the span [from, to) of a window around tick in loc and
// how to name it.
func window(w schemas.AfterWindow, tick time.Time, loc *time.Location) (time.Time, time.Time, string) {
	t := tick.In(loc)
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
	switch w {
	case schemas.WindowPreviousHour:
		hour := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, loc)
		from := hour.Add(-time.Hour)
		return from, hour, fmt.Sprintf("the hour from %s (%s)", from.Format("2006-01-02 15:04"), loc)
	case schemas.WindowSameDay:
		return day, t.Add(time.Nanosecond), fmt.Sprintf("%s up to %s (%s)", day.Format(time.DateOnly), t.Format("15:04"), loc)
	}
	prev := time.Date(t.Year(), t.Month(), t.Day()-1, 0, 0, 0, 0, loc)
	return prev, day, fmt.Sprintf("%s (%s)", prev.Format(time.DateOnly), loc)
}

// taskZone is the zone of def's first cron trigger, UTC without one.
func taskZone(def *schemas.Task) *time.Location {
	for _, tr := range def.Triggers {
		if tr.Type == schemas.TriggerTypeCron {
			if loc, err := time.LoadLocation(tr.WithDefaults().Timezone); err == nil {
				return loc
			}
		}
	}
	return time.UTC
}

// parentSchedule returns the index and schedule of def's first cron
// trigger, nil without one.
func parentSchedule(def *schemas.Task) (int, *taskdef.CronSchedule) {
	if def == nil {
		return 0, nil
	}
	for i, tr := range def.Triggers {
		if tr.Type != schemas.TriggerTypeCron {
			continue
		}
		tr = tr.WithDefaults()
		if sc, err := taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone); err == nil {
			return i, sc
		}
	}
	return 0, nil
}
