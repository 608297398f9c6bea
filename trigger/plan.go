package trigger

import (
	"container/heap"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// applyTask (re)plans the cron triggers of rec: a trigger whose schedule and
// zone did not change keeps its place in the heap; a new or changed one is
// planned from its trigger state (see since); a disabled task leaves the
// heap. states holds the stored trigger states, at least those of rec,
// read since mark (see persister.reading).
func (s *Service) applyTask(rec *store.TaskRecord, states map[store.TriggerKey]store.TriggerState, mark uint64, now int64) {
	old := s.tasks[rec.Name]
	var triggers []schemas.Trigger
	if rec.Definition != nil {
		triggers = rec.Definition.Triggers
	}
	t := old
	if t == nil {
		t = &task{name: rec.Name}
	}
	var keep []*entry
	for i, tr := range triggers {
		if tr.Type != schemas.TriggerTypeCron || !rec.Enabled || rec.Paused || i > 255 {
			continue
		}
		tr = tr.WithDefaults()
		if e := t.entry(i); e != nil && e.sched.key == scheduleKey(tr) {
			e.misfire, e.maxCatchUp = toMisfire(tr.Misfire), uint16(min(tr.MaxCatchUp, schemas.MaxMaxCatchUp))
			keep = append(keep, e)
			continue
		}
		sc, err := s.acquire(tr)
		if err != nil {
			// ParseTask rejects such a trigger: the definition in the
			// store was written by something else.
			s.log.Error().Err(err).Str("task", rec.Name).Int("trigger", i).Msg("cron trigger not planned")
			continue
		}
		since := s.since(rec, i, sc, states, mark, now)
		next := sc.next(since)
		if next == never {
			s.log.Warn().Str("task", rec.Name).Int("trigger", i).Str("schedule", sc.String()).
				Msg("cron trigger has no tick within five years; it waits for its task to change")
		}
		e := &entry{
			task:       t,
			sched:      sc,
			trigger:    uint8(i),
			misfire:    toMisfire(tr.Misfire),
			maxCatchUp: uint16(min(tr.MaxCatchUp, schemas.MaxMaxCatchUp)),
		}
		heap.Push(&s.heap, item{next: next, e: e})
		keep = append(keep, e)
	}
	for _, e := range t.entries {
		if !containsEntry(keep, e) {
			s.removeEntry(e)
			if !isCron(triggers, int(e.trigger)) {
				s.persist.drop(store.TriggerKey{Task: rec.Name, TriggerIndex: int(e.trigger)})
			}
		}
	}
	t.entries = keep
	if len(keep) == 0 {
		delete(s.tasks, rec.Name)
	} else {
		s.tasks[rec.Name] = t
	}
}

// since returns the instant after which the ticks of trigger i of rec count:
// those after it that are due are missed ticks, for the misfire policy.
//
//   - A trigger with state of the same schedule and zone goes on from its
//     last tick (also after the task was disabled: the policy decides).
//   - A new trigger never fires ticks from before it existed: it starts at
//     the time its definition (or enabling) took effect, the task's
//     UpdatedAt, or now when that is in the future of this service's clock.
//   - A trigger whose schedule changed starts at the later of the two.
//
// A new or changed trigger's state is saved at once, so that a restart
// knows when it came into being.
//
// The states read from the store may lag what this service saved (the
// persister writes in the background): the state it saved since mark
// counts too, so that a task disabled and enabled again goes on from the
// tick it fired last.
func (s *Service) since(rec *store.TaskRecord, i int, sc *schedule, states map[store.TriggerKey]store.TriggerState, mark uint64, now int64) int64 {
	key := store.TriggerKey{Task: rec.Name, TriggerIndex: i}
	st, ok := states[key]
	if p, pending := s.persist.unsaved(key, mark); pending && (!ok || p.LastTick.After(st.LastTick)) {
		st, ok = p, true // saved by this service, not in states
	}
	if ok && st.Schedule == sc.Expr() && st.Timezone == sc.zone {
		return st.LastTick.UnixNano()
	}
	since := min(rec.UpdatedAt.UnixNano(), now)
	if ok {
		since = max(since, st.LastTick.UnixNano())
	}
	s.persist.save(store.TriggerState{
		Task: rec.Name, TriggerIndex: i, Schedule: sc.Expr(), Timezone: sc.zone, LastTick: time.Unix(0, since).UTC(),
	})
	return since
}

// removeTask takes every trigger of the task called name out of the heap.
func (s *Service) removeTask(name string) {
	t := s.tasks[name]
	if t == nil {
		return
	}
	for _, e := range t.entries {
		s.removeEntry(e)
	}
	delete(s.tasks, name)
}

// applyReload applies the tasks reloaded after their entries in the tasks
// bucket changed: a task that is gone from the store leaves the heap.
func (s *Service) applyReload(r reload) {
	defer s.persist.doneReading(r.mark)
	now := s.now().UnixNano()
	for _, name := range r.names {
		rec, ok := r.tasks[name]
		if !ok {
			s.removeTask(name)
			continue
		}
		s.applyTask(&rec, r.states, r.mark, now)
	}
	byName := make(map[string]*store.TaskRecord, len(r.tasks))
	for name, rec := range r.tasks {
		byName[name] = &rec
	}
	s.dropStale(r.states, byName)
}

// dropStale deletes the states of triggers that are no longer cron
// triggers of their task (of the tasks in recs).
func (s *Service) dropStale(states map[store.TriggerKey]store.TriggerState, recs map[string]*store.TaskRecord) {
	for key := range states {
		rec, ok := recs[key.Task]
		if !ok || rec.Definition == nil {
			continue
		}
		if !isCron(rec.Definition.Triggers, key.TriggerIndex) {
			s.persist.drop(key)
		}
	}
}

func (t *task) entry(i int) *entry {
	for _, e := range t.entries {
		if int(e.trigger) == i {
			return e
		}
	}
	return nil
}

func containsEntry(es []*entry, e *entry) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

func isCron(triggers []schemas.Trigger, i int) bool {
	return i >= 0 && i < len(triggers) && triggers[i].Type == schemas.TriggerTypeCron
}
