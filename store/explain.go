package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// Explain: "why did (or didn't) it run?", answered from what AX recorded.
// For a tick of a task: which trigger schedules it (and how daylight
// saving time shaped it), the pauses and disables around it (operator
// actions), the trigger's misfire decisions about it (table decisions),
// and the instance its firing made, if any; for an instance: its
// transitions and events in words, the routing, the waits (a mutex key
// held by another instance, a max_running_instances slot), the retries
// and their backoff, the reports refused as stale.

// ExplainTick explains the tick at of task: see [schemas.Explanation].
// now tells a tick not yet due from one missed. The error wraps
// [ErrNotFound] for an unknown task.
func (s *Store) ExplainTick(ctx context.Context, task string, at, now time.Time) (schemas.Explanation, error) {
	rec, err := s.GetTask(ctx, task)
	if err != nil {
		return schemas.Explanation{}, err
	}
	at = at.UTC()
	x := schemas.Explanation{Subject: task + "@" + at.Format(time.RFC3339), Task: task, Steps: []schemas.ExplainStep{}}
	tr, index, err := explainSchedule(&x, rec.Definition.Triggers, task, at)
	if err != nil {
		return schemas.Explanation{}, err
	}
	if index < 0 {
		return x, nil
	}
	x.Tick, x.EventID = &at, schemas.CronEventID(task, index, at)

	pauses, err := s.ledgerPauses(ctx, task, at.Add(365*24*time.Hour))
	if err != nil {
		return schemas.Explanation{}, err
	}
	during := explainPauses(&x, pauses, at)
	decisions, err := s.DecisionsAbout(ctx, task, at)
	if err != nil {
		return schemas.Explanation{}, err
	}
	for _, d := range decisions {
		if d.TriggerIndex == index {
			x.Steps = append(x.Steps, schemas.ExplainStep{At: d.At, Kind: d.Kind, Actor: d.Actor, Text: d.Reason})
		}
	}

	in, err := s.InstanceByEvent(ctx, task, x.EventID)
	switch {
	case errors.Is(err, ErrNotFound):
		sortSteps(x.Steps)
		x.Steps = append(x.Steps, schemas.ExplainStep{Kind: "no_instance",
			Text: fmt.Sprintf("no instance was made for the tick's firing (event id %s)", x.EventID)})
		x.Verdict = tickVerdict(tr, at, now, during, decisions)
		return x, nil
	case err != nil:
		return schemas.Explanation{}, err
	}
	ix, err := s.ExplainInstance(ctx, in.ID)
	if err != nil {
		return schemas.Explanation{}, err
	}
	x.InstanceID, x.Verdict = in.ID, ix.Verdict
	x.Steps = append(x.Steps, ix.Steps...)
	sortSteps(x.Steps)
	return x, nil
}

// explainSchedule finds the cron trigger of triggers that schedules a tick
// of task at at, and puts the schedule's step on x; when none does (index
// -1), x's verdict says so, with the triggers' next ticks.
func explainSchedule(x *schemas.Explanation, triggers []schemas.Trigger, task string, at time.Time) (tr schemas.Trigger, index int, err error) {
	index = -1
	var nextTix []string
	for i, t := range triggers {
		if t.Type != schemas.TriggerTypeCron {
			continue
		}
		t = t.WithDefaults()
		sched, err := taskdef.ParseCronSchedule(t.Schedule, t.Timezone)
		if err != nil {
			return tr, -1, fmt.Errorf("explain %s: trigger %d: %w", x.Subject, i, err)
		}
		tick := sched.Next(at.Add(-time.Nanosecond))
		if !tick.Equal(at) {
			if !tick.IsZero() {
				nextTix = append(nextTix, fmt.Sprintf("trigger %d's next tick is %s (%s)", i, tick.UTC().Format(time.RFC3339), tick.Format("15:04:05 MST")))
			}
			continue
		}
		tr, index = t, i
		text := fmt.Sprintf("trigger %d (%q in %s, misfire %s) schedules a tick at %s, %s local time", i, t.Schedule, t.Timezone,
			t.Misfire, at.Format(time.RFC3339), tick.Format("2006-01-02 15:04:05 MST"))
		if kind, note := sched.WallNote(tick); kind != "" {
			text += "; daylight saving time: " + note
		}
		x.Steps = append(x.Steps, schemas.ExplainStep{Kind: "schedule", Text: text})
		break
	}
	if index < 0 {
		x.Verdict = fmt.Sprintf("no cron trigger of %s schedules a tick at %s, so nothing was due then", task, at.Format(time.RFC3339))
		if len(nextTix) > 0 {
			x.Verdict += ": " + strings.Join(nextTix, "; ")
		}
	}
	return tr, index, nil
}

// explainPauses puts on x the pauses (and disables) of the task around
// at, and returns the one at was in, if any.
func explainPauses(x *schemas.Explanation, pauses []pauseSpan, at time.Time) *pauseSpan {
	var during *pauseSpan
	for i, p := range pauses {
		if !at.Before(p.from) && (p.until.IsZero() || at.Before(p.until)) {
			during = &pauses[i]
			x.Steps = append(x.Steps, schemas.ExplainStep{At: p.from, Kind: p.what, Actor: p.by,
				Text: fmt.Sprintf("the task was %s by %s", p.what, orSomeone(p.by))})
			if !p.until.IsZero() {
				kind := map[string]string{"paused": "resumed", "disabled": "enabled"}[p.what]
				x.Steps = append(x.Steps, schemas.ExplainStep{At: p.until, Kind: kind, Actor: p.endedBy,
					Text: fmt.Sprintf("the task was %s by %s", kind, orSomeone(p.endedBy))})
			}
		}
	}
	return during
}

// tickVerdict says why a tick has no instance.
func tickVerdict(tr schemas.Trigger, at, now time.Time, during *pauseSpan, decisions []Decision) string {
	if at.After(now.Add(-ledgerDueGrace)) {
		return "not yet due (or due too recently to judge): its firing has not been recorded yet"
	}
	policy := fmt.Sprintf("misfire %s", tr.Misfire)
	var decided string
	for _, d := range decisions {
		decided = "; the trigger then decided: " + d.Reason
	}
	if during != nil {
		return fmt.Sprintf("did not run: the task was %s from %s%s, and the trigger fires no tick of a %s task; "+
			"the ticks it missed follow its %s%s", during.what, during.from.UTC().Format(time.RFC3339), untilText(during.until),
			during.what, policy, decided)
	}
	if decided != "" {
		return "did not run: the trigger did not fire it in time" + decided
	}
	return "did not run: no trigger service fired it and none recorded a decision about it (was a trigger service running then?)"
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return " (still)"
	}
	return " until " + t.UTC().Format(time.RFC3339)
}

func orSomeone(op string) string { return cmp.Or(op, "an operator") }

// sortSteps orders steps by time; steps without one (the schedule) first.
func sortSteps(steps []schemas.ExplainStep) {
	slices.SortStableFunc(steps, func(a, b schemas.ExplainStep) int { return a.At.Compare(b.At) })
}

// mutexWaitMin is how long an attempt waits between its dispatch and its
// start before explain looks for what held its mutex key.
const mutexWaitMin = time.Second

// ExplainInstance explains the instance id: see [schemas.Explanation].
// The error wraps [ErrNotFound] for an unknown instance.
func (s *Store) ExplainInstance(ctx context.Context, id int64) (schemas.Explanation, error) {
	in, err := s.GetInstance(ctx, id)
	if err != nil {
		return schemas.Explanation{}, err
	}
	x := schemas.Explanation{Subject: fmt.Sprintf("instance %d", id), Task: in.Task, EventID: in.EventID, InstanceID: id,
		Steps: []schemas.ExplainStep{}}
	var mutexKey string
	if rec, err := s.GetTask(ctx, in.Task); err == nil {
		mutexKey = rec.Definition.Concurrency.MutexKey
	}
	var dispatchedAt time.Time
	for _, t := range in.Transitions {
		st := transitionStep(in, t, id)
		switch t.To {
		case schemas.StateDispatched:
			dispatchedAt = t.At
		case schemas.StateRunning:
			if mutexKey != "" && !dispatchedAt.IsZero() && t.At.Sub(dispatchedAt) >= mutexWaitMin {
				w, err := s.mutexWait(ctx, in, mutexKey, dispatchedAt, t)
				if err != nil {
					return schemas.Explanation{}, err
				}
				x.Steps = append(x.Steps, w)
			}
		}
		x.Steps = append(x.Steps, st)
	}
	for _, e := range in.Events {
		x.Steps = append(x.Steps, eventStep(e))
	}
	if st, held, err := s.fairWait(ctx, in); err != nil || held {
		x.Steps = append(x.Steps, st)
		if err != nil {
			return schemas.Explanation{}, err
		}
	}
	sortSteps(x.Steps)
	x.Verdict = instanceVerdict(in)
	return x, nil
}

// transitionStep is the step of transition t of instance in (id).
func transitionStep(in schemas.Instance, t schemas.Transition, id int64) schemas.ExplainStep {
	st := schemas.ExplainStep{At: t.At, Actor: t.Operator, Kind: strings.ToLower(string(t.To))}
	switch {
	case t.To == schemas.StateCreated:
		st.Text = fmt.Sprintf("the firing %s (source %s, fired at %s) made instance %d", in.EventID, in.Source,
			in.FiredAt.UTC().Format(time.RFC3339), id)
		if t.Reason != "" {
			st.Text += ": " + t.Reason
		}
	case t.To == schemas.StateDispatched:
		st.Text = fmt.Sprintf("attempt %d was routed to pool %s and dispatched", t.Attempt, in.Pool)
		switch t.From {
		case schemas.StateRetrying:
			st.Text += fmt.Sprintf(", after the retry backoff (%s since attempt %d ended)", backoffSince(in.Transitions, t), t.Attempt-1)
		case schemas.StateWaiting:
			st.Text += ": a slot of max_running_instances freed"
		}
	case t.To == schemas.StateWaiting:
		st.Text = "held WAITING: " + cmp.Or(t.Reason, "max_running_instances is reached")
	case t.To == schemas.StateRunning:
		st.Text = fmt.Sprintf("attempt %d started on %s (it took its lease: its fencing token is that lease's revision)",
			t.Attempt, cmp.Or(t.Operator, "a worker"))
	case t.To == schemas.StateRetrying:
		st.Text = fmt.Sprintf("attempt %d ended without success: %s; the next attempt follows the retry policy", t.Attempt, cmp.Or(t.Reason, "failed"))
		if t.Operator == "reaper" {
			st.Text = fmt.Sprintf("attempt %d's lease expired unrenewed: its worker was presumed gone (%s); a new attempt, with a higher fence, follows",
				t.Attempt, cmp.Or(t.Reason, "lost"))
		}
	case t.To == schemas.StateSkipped:
		st.Text = "skipped, never run: " + cmp.Or(t.Reason, "by the task's policy")
	case t.To == schemas.StateShadow:
		st.Text = "recorded in shadow mode, never run: " + cmp.Or(t.Reason, "the task is in shadow mode")
	default:
		st.Text = fmt.Sprintf("attempt %d %s", t.Attempt, strings.ToLower(string(t.To)))
		if t.Reason != "" {
			st.Text += ": " + t.Reason
		}
	}
	return st
}

// eventStep is the step of instance event e.
func eventStep(e schemas.InstanceEvent) schemas.ExplainStep {
	st := schemas.ExplainStep{At: e.At, Actor: e.Operator, Kind: e.Kind}
	switch {
	case strings.HasPrefix(e.Kind, "stale_"):
		st.Kind = "stale_report"
		st.Text = fmt.Sprintf("a %s report of attempt %d from %s was refused as stale: %s (a newer attempt had fenced it out)",
			strings.TrimPrefix(e.Kind, "stale_"), e.Attempt, cmp.Or(e.Operator, "a worker"), e.Reason)
	case strings.HasPrefix(e.Kind, "refused_"):
		st.Kind = "refused_report"
		st.Text = fmt.Sprintf("a %s report of attempt %d from %s was refused: %s", strings.TrimPrefix(e.Kind, "refused_"), e.Attempt,
			cmp.Or(e.Operator, "a worker"), e.Reason)
	default:
		st.Text = fmt.Sprintf("%s (attempt %d): %s", e.Kind, e.Attempt, e.Reason)
	}
	return st
}

// backoffSince is how long before t the attempt before it ended.
func backoffSince(ts []schemas.Transition, t schemas.Transition) string {
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].To == schemas.StateRetrying && ts[i].Attempt == t.Attempt-1 {
			return t.At.Sub(ts[i].At).Round(time.Millisecond).String()
		}
	}
	return "?"
}

// mutexWait explains the wait of an attempt between its dispatch and its
// start (run) for the task's mutex key: the instances of the task that
// ran meanwhile held it, as far as the records tell.
func (s *Store) mutexWait(ctx context.Context, in schemas.Instance, key string, dispatched time.Time, run schemas.Transition) (schemas.ExplainStep, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, started_at, finished_at FROM instances
		WHERE task = $1 AND id <> $2 AND started_at IS NOT NULL AND started_at < $4 AND COALESCE(finished_at, now()) > $3
		ORDER BY started_at LIMIT 5`, in.Task, in.ID, dispatched, run.At)
	if err != nil {
		return schemas.ExplainStep{}, fmt.Errorf("explain instance %d: read the mutex's holders: %w", in.ID, err)
	}
	var holders []string
	for rows.Next() {
		var (
			id       int64
			start    time.Time
			finished *time.Time
		)
		if err := rows.Scan(&id, &start, &finished); err != nil {
			rows.Close()
			return schemas.ExplainStep{}, err
		}
		h := fmt.Sprintf("instance %d (running from %s", id, start.UTC().Format(time.RFC3339Nano))
		if finished != nil {
			h += " to " + finished.UTC().Format(time.RFC3339Nano)
		}
		holders = append(holders, h+")")
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return schemas.ExplainStep{}, err
	}
	text := fmt.Sprintf("attempt %d waited %s between its dispatch and its start for the task's mutex_key %q", run.Attempt,
		run.At.Sub(dispatched).Round(time.Millisecond), key)
	if len(holders) > 0 {
		text += ", held meanwhile by " + strings.Join(holders, ", ")
	} else {
		text += " (no other instance of this task ran meanwhile: one of another task with the same key held it, or the workers were busy)"
	}
	return schemas.ExplainStep{At: dispatched, Kind: "mutex_wait", Actor: "executor", Text: text}, nil
}

// instanceVerdict says in one sentence how the instance fared.
func instanceVerdict(in schemas.Instance) string {
	switch in.State {
	case schemas.StateSucceeded:
		v := fmt.Sprintf("ran: instance %d succeeded at attempt %d", in.ID, in.Attempt)
		if in.StartedAt != nil && in.FinishedAt != nil {
			v += fmt.Sprintf(", %s after its first start", in.FinishedAt.Sub(*in.StartedAt).Round(time.Millisecond))
		}
		return v
	case schemas.StateFailed:
		return fmt.Sprintf("ran and failed: instance %d failed at attempt %d: %s", in.ID, in.Attempt, in.Error)
	case schemas.StateSkipped:
		return fmt.Sprintf("did not run: instance %d was skipped: %s", in.ID, cmp.Or(in.Error, lastReason(in)))
	case schemas.StateShadow:
		return fmt.Sprintf("recorded, not run: instance %d is a firing of the task in shadow mode (ax shadow, docs/migrate.md)", in.ID)
	case schemas.StateCancelled:
		return fmt.Sprintf("cancelled: instance %d was cancelled at attempt %d: %s", in.ID, in.Attempt, cmp.Or(in.Error, lastReason(in)))
	}
	return fmt.Sprintf("not ended: instance %d is %s at attempt %d", in.ID, in.State, in.Attempt)
}

func lastReason(in schemas.Instance) string {
	if n := len(in.Transitions); n > 0 {
		return in.Transitions[n-1].Reason
	}
	return ""
}
