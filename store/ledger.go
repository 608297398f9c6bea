package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// The ledger: for an auditor, every instant a task's cron triggers say it
// should have fired in a range, each beside what AX recorded of it — the
// instance its firing made (in the hot tables or moved to history), how
// many attempts it took, how it ended — or why there is none: the task was
// paused or disabled then, or no trigger service fired it in time, and
// what the trigger's misfire policy did about it. A tick's instance is
// found by its event id ([schemas.CronEventID]), which is the tick's
// identity: so a tick can have at most one instance, and the summary's
// "doubled" counts cron instances of the range that are on no tick of the
// schedule (a schedule changed since, or a firing forged by hand).

// LedgerMaxTicks bounds the ticks of one ledger: narrow the range for more.
const LedgerMaxTicks = 100_000

// ErrTooManyTicks is the error of a ledger whose range holds more than
// [LedgerMaxTicks] ticks.
var ErrTooManyTicks = errors.New("too many ticks")

// ledgerDueGrace is how recent a tick may be and still be schemas.TickDue when it
// has no instance yet: the trigger's misfire grace, publishing and the
// dispatcher's batch.
const ledgerDueGrace = 30 * time.Second

// ledgerInstance is what the ledger reads of one instance.
type ledgerInstance struct {
	id                  int64
	eventID             string
	state               schemas.State
	attempt             int
	createdAt           time.Time
	startedAt, finished *time.Time
	reason              string
	moved               bool
}

// Ledger returns the ledger of the cron triggers of task over [from, to),
// as of now (a tick after now, or within a few seconds of it, is
// schemas.TickDue). It reads the task's current definition: ticks of a schedule
// changed since are not expected, and their instances count as doubled.
func (s *Store) Ledger(ctx context.Context, task string, from, to, now time.Time) (schemas.Ledger, error) {
	rec, err := s.GetTask(ctx, task)
	if err != nil {
		return schemas.Ledger{}, err
	}
	if !to.After(from) {
		return schemas.Ledger{}, fmt.Errorf("ledger of %s: the range's end %s is not after its start %s", task,
			to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	l := schemas.Ledger{Task: task, From: from.UTC(), To: to.UTC(), Triggers: []schemas.LedgerTrigger{}, Ticks: []schemas.LedgerTick{}}
	scheds, err := ledgerSchedules(&l, rec.Definition.Triggers, task)
	if err != nil {
		return schemas.Ledger{}, err
	}
	insts, err := s.ledgerInstances(ctx, task, from, to)
	if err != nil {
		return schemas.Ledger{}, err
	}
	pauses, err := s.ledgerPauses(ctx, task, to)
	if err != nil {
		return schemas.Ledger{}, err
	}
	for _, tr := range l.Triggers {
		sched := scheds[tr.Index]
		for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = sched.Next(t) {
			if len(l.Ticks) == LedgerMaxTicks {
				return schemas.Ledger{}, fmt.Errorf("ledger of %s: %w: more than %d from %s to %s; narrow the range", task, ErrTooManyTicks,
					LedgerMaxTicks, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
			}
			tick := schemas.LedgerTick{Tick: t.UTC(), Wall: t.Format("2006-01-02 15:04:05 MST"), Trigger: tr.Index,
				EventID: schemas.CronEventID(task, tr.Index, t)}
			tick.DST, tick.DSTNote = sched.WallNote(t)
			if in, ok := insts[tick.EventID]; ok {
				delete(insts, tick.EventID)
				fillTick(&tick, in)
			} else {
				tick.Status, tick.Reason = missedReason(tr, t, now, pauses)
			}
			l.Ticks = append(l.Ticks, tick)
		}
	}
	slices.SortStableFunc(l.Ticks, func(a, b schemas.LedgerTick) int {
		if c := a.Tick.Compare(b.Tick); c != 0 {
			return c
		}
		return a.Trigger - b.Trigger
	})
	l.Doubled = doubledTicks(insts)
	l.Summary = summarize(l.Ticks, len(l.Doubled))
	l.Line = l.Summary.String()
	return l, nil
}

// ledgerSchedules parses the cron triggers of triggers, puts each on l,
// and returns their schedules by trigger index.
func ledgerSchedules(l *schemas.Ledger, triggers []schemas.Trigger, task string) (map[int]*taskdef.CronSchedule, error) {
	scheds := map[int]*taskdef.CronSchedule{}
	for i, tr := range triggers {
		if tr.Type != schemas.TriggerTypeCron {
			continue
		}
		tr = tr.WithDefaults()
		sched, err := taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone)
		if err != nil {
			return nil, fmt.Errorf("ledger of %s: trigger %d: %w", task, i, err)
		}
		scheds[i] = sched
		l.Triggers = append(l.Triggers, schemas.LedgerTrigger{Index: i, Schedule: tr.Schedule, Timezone: tr.Timezone, Misfire: tr.Misfire, MaxCatchUp: tr.MaxCatchUp})
	}
	return scheds, nil
}

// doubledTicks are the ledger's rows of insts, the cron instances on no
// tick of the schedule.
func doubledTicks(insts map[string]ledgerInstance) []schemas.LedgerTick {
	var doubled []schemas.LedgerTick
	for _, in := range insts { // cron instances on no tick of the schedule
		var tick schemas.LedgerTick
		tick.EventID = in.eventID
		fillTick(&tick, in)
		tick.Status = schemas.TickDoubled
		doubled = append(doubled, tick)
	}
	return doubled
}

// fill sets the tick's instance fields from in.
func fillTick(t *schemas.LedgerTick, in ledgerInstance) {
	t.InstanceID, t.State, t.Attempts, t.Moved = in.id, in.state, in.attempt, in.moved
	created := in.createdAt.UTC()
	t.CreatedAt = &created
	if in.startedAt != nil && in.finished != nil {
		ms := in.finished.Sub(*in.startedAt).Milliseconds()
		t.DurationMS = &ms
	}
	t.Status = schemas.TickFired
	if strings.HasPrefix(in.reason, "misfire ") {
		t.Status, t.Reason = schemas.TickLate, in.reason
	}
}

func summarize(ticks []schemas.LedgerTick, doubled int) schemas.LedgerSummary {
	s := schemas.LedgerSummary{Ticks: len(ticks), Doubled: doubled}
	for _, t := range ticks {
		switch t.Status {
		case schemas.TickMissed:
			s.Missed++
		case schemas.TickDue:
			s.Due++
		case schemas.TickLate:
			s.Late++
		}
		switch t.DST {
		case taskdef.DSTGap:
			s.DSTGaps++
		case taskdef.DSTRepeat:
			s.DSTRepeat++
		}
		if t.InstanceID == 0 {
			continue
		}
		s.Instances++
		if t.Attempts > 1 {
			s.Retried++
		}
		switch t.State {
		case schemas.StateSucceeded:
			s.Succeeded++
		case schemas.StateFailed:
			s.Failed++
		case schemas.StateSkipped:
			s.Skipped++
		case schemas.StateShadow:
			s.Shadow++
		}
	}
	return s
}

// pauseSpan is a span of time during which the task was paused or
// disabled: what, from, until (zero: still).
type pauseSpan struct {
	what        string
	from, until time.Time
	// by and endedBy are the operators who paused and resumed.
	by, endedBy string
}

// missedReason says why tick t of trigger tr has no instance.
func missedReason(tr schemas.LedgerTrigger, t, now time.Time, pauses []pauseSpan) (status, reason string) {
	if t.After(now.Add(-ledgerDueGrace)) {
		return schemas.TickDue, ""
	}
	policy := "misfire " + string(tr.Misfire)
	switch tr.Misfire {
	case schemas.MisfireFireOnce:
		policy += ": only the latest tick missed in a row fires, late"
	case schemas.MisfireCatchUp:
		policy += fmt.Sprintf(": at most the latest %d ticks missed in a row fire, late", tr.MaxCatchUp)
	default:
		policy += ": a missed tick does not fire"
	}
	for _, p := range pauses {
		if !t.Before(p.from) && (p.until.IsZero() || t.Before(p.until)) {
			return schemas.TickMissed, fmt.Sprintf("the task was %s (from %s); %s", p.what, p.from.UTC().Format(time.RFC3339), policy)
		}
	}
	return schemas.TickMissed, "no trigger service fired it in time (down, stalled, or cut off from NATS); " + policy
}

// ledgerInstances returns the cron instances of task whose ticks lie in
// [from, to), by event id, from the hot tables and the history (a cron
// firing's fired_at is its tick, so the range prunes the partitions).
func (s *Store) ledgerInstances(ctx context.Context, task string, from, to time.Time) (map[string]ledgerInstance, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.id, i.event_id, i.state, i.attempt, i.created_at, i.started_at, i.finished_at,
			COALESCE((SELECT reason FROM instance_transitions t WHERE t.instance_id = i.id AND t.to_state = 'CREATED' LIMIT 1), ''), false
		FROM instances i
		WHERE i.task = $1 AND i.fired_at >= $2 AND i.fired_at < $3 AND i.event_id LIKE $4
		UNION ALL
		SELECT h.id, h.event_id, h.state, h.attempt, h.created_at, h.started_at, h.finished_at,
			COALESCE((SELECT reason FROM instance_transition_history t
				WHERE t.instance_id = h.id AND t.fired_at = h.fired_at AND t.to_state = 'CREATED' LIMIT 1), ''), true
		FROM instance_history h
		WHERE h.task = $1 AND h.fired_at >= $2 AND h.fired_at < $3 AND h.event_id LIKE $4`,
		task, from, to, schemas.CronEventIDPrefix+likeEscape(task)+":%")
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: read instances: %w", task, err)
	}
	out := map[string]ledgerInstance{}
	var in ledgerInstance
	_, err = pgx.ForEachRow(rows, []any{&in.id, &in.eventID, &in.state, &in.attempt, &in.createdAt, &in.startedAt, &in.finished, &in.reason, &in.moved},
		func() error {
			out[in.eventID] = in
			in = ledgerInstance{}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: read instances: %w", task, err)
	}
	return out, nil
}

// likeEscape escapes the wildcards of a LIKE pattern.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// ledgerPauses returns the spans during which task was paused or
// disabled, up to to, from the operator actions.
func (s *Store) ledgerPauses(ctx context.Context, task string, to time.Time) ([]pauseSpan, error) {
	rows, err := s.pool.Query(ctx, `SELECT action, at, operator FROM operator_actions
		WHERE task = $1 AND instance_id = 0 AND action = ANY($2) AND at < $3 ORDER BY at, id`,
		task, []string{string(schemas.ActionPause), string(schemas.ActionResume), string(schemas.ActionDisable), string(schemas.ActionEnable)}, to)
	if err != nil {
		return nil, fmt.Errorf("ledger of %s: read operator actions: %w", task, err)
	}
	var (
		out    []pauseSpan
		action string
		at     time.Time
		by     string
		open   = map[string]int{} // "paused"/"disabled" → index in out
	)
	_, err = pgx.ForEachRow(rows, []any{&action, &at, &by}, func() error {
		switch schemas.OperatorAction(action) {
		case schemas.ActionPause, schemas.ActionDisable:
			what := "paused"
			if action == string(schemas.ActionDisable) {
				what = "disabled"
			}
			if _, ok := open[what]; !ok {
				open[what] = len(out)
				out = append(out, pauseSpan{what: what, from: at, by: by})
			}
		case schemas.ActionResume, schemas.ActionEnable:
			what := "paused"
			if action == string(schemas.ActionEnable) {
				what = "disabled"
			}
			if i, ok := open[what]; ok {
				out[i].until, out[i].endedBy = at, by
				delete(open, what)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("ledger of %s: read operator actions: %w", task, err)
	}
	return out, nil
}
