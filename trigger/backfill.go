package trigger

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"hash"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Backfills: the api stores a backfill (a task's trigger and a past range)
// in the backfills table; this service fires its ticks, because it owns
// the schedules and the key of the cron firings' message ids. A tick of a
// backfill is the very firing the schedule made or would have made at the
// time — the event id schemas.CronEventID(task, trigger, tick) and the
// Nats-Msg-Id streams.CronMsgID — so a tick that ran already makes no
// second instance, and running the same backfill again creates nothing:
// the loop looks the ticks up first and fires only those with no instance.
//
// The loop wakes every BackfillPoll (real time, not the Clock: the ticks of
// a backfill are long past) and gives each running backfill one pass,
// holding its row (FOR UPDATE SKIP LOCKED) so that replicas take turns. A
// pass fires at most what the backfill's limits allow: MaxRunning of its
// ticks in flight (with overlap skip: one, and only while no instance of
// the task is in flight) and Rate ticks a second (a token bucket per
// backfill). Its firings carry the backfill's priority (low by default),
// which executors drain after normal and urgent work, and the reason
// "backfill N", which the instance's CREATED transition keeps.

// DefaultBackfillPoll is how often the backfill loop looks at the running
// backfills by default.
const DefaultBackfillPoll = time.Second

// backfillChunk is the most ticks a pass looks up at once.
const backfillChunk = 200

// backfiller runs the backfill loop; it owns its fields.
type backfiller struct {
	s   *Service
	mac hash.Hash
	// tokens is each backfill's token bucket: its tokens and when it was
	// last filled.
	tokens map[int64]*bucket
}

type bucket struct {
	n    float64
	last time.Time
}

// runBackfills gives each running backfill a pass every BackfillPoll until
// ctx ends.
func (s *Service) runBackfills(ctx context.Context, key []byte) {
	b := &backfiller{s: s, mac: hmac.New(sha256.New, key), tokens: make(map[int64]*bucket)}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := s.opts.Store.RunningBackfills(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("backfills not read; trying again")
		}
		for _, id := range ids {
			if err := b.pass(ctx, id); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Int64("backfill", id).Msg("backfill pass failed; trying again")
			}
		}
		for id := range b.tokens {
			if !containsID(ids, id) {
				delete(b.tokens, id)
			}
		}
		t.Reset(s.opts.BackfillPoll)
	}
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// pass fires what backfill id may fire now.
func (b *backfiller) pass(ctx context.Context, id int64) error {
	st := b.s.opts.Store
	h, err := st.HoldBackfill(ctx, id)
	if err != nil || h == nil {
		return err
	}
	defer h.Close(ctx)
	bf := &h.Backfill
	sched, err := b.schedule(ctx, bf)
	if err != nil {
		// The task or its trigger is gone, or no longer a cron trigger:
		// nothing is left to fire.
		b.s.log.Warn().Err(err).Int64("backfill", id).Str("task", bf.Task).Msg("backfill cancelled")
		bf.State = schemas.BackfillCancelled
		return h.Save(ctx)
	}
	lo := schemas.CronEventID(bf.Task, bf.TriggerIndex, bf.From)
	hi := schemas.CronEventID(bf.Task, bf.TriggerIndex, bf.To)
	var allowed int
	if bf.Overlap == store.OverlapSkip {
		n, err := h.InFlight(ctx, bf.Task, "", "")
		if err != nil {
			return err
		}
		if n == 0 {
			allowed = 1
		}
	} else {
		n, err := h.InFlight(ctx, bf.Task, lo, hi)
		if err != nil {
			return err
		}
		allowed = bf.MaxRunning - n
	}
	allowed = min(allowed, b.take(bf))
	fired := 0
	for {
		ticks := nextTicks(sched, bf, backfillChunk)
		if len(ticks) == 0 {
			bf.State = schemas.BackfillDone
			break
		}
		if fired >= allowed {
			break
		}
		ids := make([]string, len(ticks))
		for i, t := range ticks {
			ids[i] = schemas.CronEventID(bf.Task, bf.TriggerIndex, t)
		}
		have, err := h.Existing(ctx, bf.Task, ids)
		if err != nil {
			return err
		}
		for i, t := range ticks {
			if have[ids[i]] {
				bf.Existing++
				bf.Cursor = t
				continue
			}
			if fired >= allowed {
				break
			}
			if err := b.fire(ctx, bf, t, ids[i]); err != nil {
				b.spend(bf, fired)
				if serr := h.Save(ctx); serr != nil {
					return serr
				}
				return err
			}
			fired++
			bf.Fired++
			bf.Cursor = t
		}
	}
	b.spend(bf, fired)
	return h.Save(ctx)
}

// nextTicks returns up to n ticks of bf's range after its cursor.
func nextTicks(sched *taskdef.CronSchedule, bf *schemas.Backfill, n int) []time.Time {
	after := bf.Cursor
	if after.IsZero() {
		after = bf.From.Add(-time.Nanosecond)
	}
	var out []time.Time
	for len(out) < n {
		t := sched.Next(after)
		if t.IsZero() || t.After(bf.To) {
			break
		}
		out = append(out, t.UTC())
		after = t
	}
	return out
}

// schedule returns the schedule of bf's trigger as its task has it now.
func (b *backfiller) schedule(ctx context.Context, bf *schemas.Backfill) (*taskdef.CronSchedule, error) {
	rec, err := b.s.opts.Store.GetTask(ctx, bf.Task)
	if err != nil {
		return nil, err
	}
	if rec.Definition == nil || bf.TriggerIndex >= len(rec.Definition.Triggers) ||
		rec.Definition.Triggers[bf.TriggerIndex].Type != schemas.TriggerTypeCron {
		return nil, fmt.Errorf("task %s has no cron trigger %d", bf.Task, bf.TriggerIndex)
	}
	tr := rec.Definition.Triggers[bf.TriggerIndex].WithDefaults()
	return taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone)
}

// take fills bf's token bucket and returns how many whole tokens it holds.
func (b *backfiller) take(bf *schemas.Backfill) int {
	now := time.Now()
	k := b.tokens[bf.ID]
	capacity := max(bf.Rate, 1)
	if k == nil {
		k = &bucket{n: capacity, last: now}
		b.tokens[bf.ID] = k
	}
	k.n = min(capacity, k.n+now.Sub(k.last).Seconds()*bf.Rate)
	k.last = now
	return int(k.n)
}

// spend takes n tokens from bf's bucket.
func (b *backfiller) spend(bf *schemas.Backfill, n int) {
	if k := b.tokens[bf.ID]; k != nil {
		k.n -= float64(n)
	}
}

// fire publishes the firing of tick t of bf, under the tick's own ids, and
// awaits its acknowledgement.
func (b *backfiller) fire(ctx context.Context, bf *schemas.Backfill, t time.Time, eventID string) error {
	ev := schemas.TriggerEvent{EventID: eventID, Task: bf.Task, Source: schemas.SourceCron, FiredAt: t,
		Priority: schemas.Priority(bf.Priority), Reason: fmt.Sprintf("backfill %d (%s to %s)", bf.ID,
			bf.From.Format(time.RFC3339), bf.To.Format(time.RFC3339))}
	data, err := schemas.MarshalTriggerEvent(ev)
	if err != nil {
		return fmt.Errorf("encode tick %s: %w", t.Format(time.RFC3339), err)
	}
	m := nats.NewMsg(b.s.triggerPrefix + bf.Task)
	m.Data = data
	m.Header.Set(streams.HeaderMsgID, streams.CronMsgID(b.mac, bf.Task, eventID))
	span := b.s.startBackfillFire(bf, t, m)
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if _, err = b.s.js.PublishMsg(pctx, m); err != nil {
		err = fmt.Errorf("publish tick %s: %w", t.Format(time.RFC3339), err)
	}
	endSpan(span, err)
	return err
}
