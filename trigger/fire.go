package trigger

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

const (
	// publishChunk is the most publishes awaited together; it stays below
	// the publisher's MaxPending (streams.DefaultMaxPending).
	publishChunk = 1000
	// maxRetries bounds the firings kept for a retry while NATS is away.
	maxRetries = 100_000
)

// firing is one trigger event on its way to AX_TRIGGERS.
type firing struct {
	key     store.TriggerKey
	tick    int64
	subject string
	// msgID is the message's Nats-Msg-Id (see streams.CronMsgID).
	msgID string
	data  []byte
	// pub is the firing's place in its outbox's batch, once published.
	pub int
	err error
	// span is the span of its publish, until answered (see trace.go).
	span trace.Span
}

// outbox is a batch of firings published together, and the ticks they
// settle: a trigger's state is saved only once all its firings are acknowledged.
type outbox struct {
	firings []*firing
	// batch publishes the firings; nil before the first.
	batch *streams.AsyncBatch
	// awaited counts the firings at the front whose acks were awaited.
	awaited int
	settled map[store.TriggerKey]store.TriggerState
}

func newOutbox() *outbox {
	return &outbox{settled: make(map[store.TriggerKey]store.TriggerState)}
}

// fireDue fires every tick that is due: the ticks of the heap's triggers
// up to now, and the firings whose publish failed before. It publishes the
// ticks that are on time first, before any other work, so that they leave
// as early as possible; then it walks the missed ticks through their
// misfire policies and moves every trigger to its next tick. The publishes
// are asynchronous; their acknowledgements are awaited together (in chunks
// of publishChunk) on ctx, then the settled ticks are saved. Firings that
// failed are kept for a retry after retryDelay.
func (s *Service) fireDue(ctx context.Context) {
	now := s.now().UnixNano()
	out := newOutbox()
	if s.retry != nil && s.retryAt <= now {
		retry := s.retry
		s.retry, out.settled = nil, retry.settled
		for _, f := range retry.firings {
			f.err = nil
			s.add(ctx, out, f)
		}
	}
	s.due = s.heap.due(now, s.due[:0], 0)
	if len(s.due) == 0 {
		if len(out.firings) > 0 {
			s.finish(ctx, out, now)
		}
		return
	}
	cutoff := now - s.grace
	for _, it := range s.due {
		if it.next <= cutoff {
			continue
		}
		f := s.prepared[it.e]
		if f == nil || it.next != s.preparedAt {
			if f = s.newFiring(it.e, it.next, ""); f == nil {
				continue
			}
		}
		s.add(ctx, out, f)
	}
	clear(s.prepared)
	s.preparedAt = 0
	for _, it := range s.due {
		next := s.advance(ctx, it, now, cutoff, out)
		s.heap[it.e.index].next = next
		heap.Fix(&s.heap, int(it.e.index))
	}
	clear(s.due) // drop the pointers
	s.finish(ctx, out, now)
}

// advance fires what else is due of it's trigger up to now and returns the
// trigger's next tick after now. An on-time tick was published already; a
// tick at or before cutoff is missed and goes, with the trigger's other
// missed ticks, through its misfire policy. Every tick handled is settled
// in out.
func (s *Service) advance(ctx context.Context, it item, now, cutoff int64, out *outbox) int64 {
	e, last := it.e, it.next
	var t int64
	if it.next <= cutoff {
		m, next := collectMissed(e.sched, it.next, cutoff, e.keep())
		d := decide(e, m)
		s.logMisfire(e, m, d)
		s.recordMisfire(e, m, d)
		for _, tick := range d.fire {
			s.addNew(ctx, out, e, tick, misfireReason(e, m, len(d.fire)))
		}
		last, t = m.last, next
	} else {
		t = e.sched.next(it.next) // it.next went out in fireDue's first pass
	}
	for ; t <= now; t = e.sched.next(t) { // never is after any now
		s.addNew(ctx, out, e, t, "")
		last = t
	}
	key := store.TriggerKey{Task: e.task.name, TriggerIndex: int(e.trigger)}
	out.settled[key] = store.TriggerState{
		Task: e.task.name, TriggerIndex: int(e.trigger), Schedule: e.sched.Expr(), Timezone: e.sched.zone,
		LastTick: time.Unix(0, last).UTC(),
	}
	return t
}

// prepareMax is the most firings prepared ahead of a tick.
const prepareMax = 10_000

// prepare encodes the firings of the heap's next tick ahead of it, while
// the loop would be idle: when the tick comes, fireDue only publishes them,
// and a thousand firings of one second leave within a millisecond or two.
// A trigger that changes meanwhile is not in the heap any more, or due at
// another tick; fireDue then encodes its firing afresh.
func (s *Service) prepare(now int64) {
	if len(s.heap) == 0 {
		return
	}
	at := s.heap[0].next
	if at == never || at <= now || at == s.preparedAt {
		return
	}
	clear(s.prepared)
	s.due = s.heap.due(at, s.due[:0], prepareMax)
	for _, it := range s.due {
		if f := s.newFiring(it.e, it.next, ""); f != nil {
			s.prepared[it.e] = f
		}
	}
	clear(s.due)
	s.preparedAt = at
}

// newFiring encodes the firing of e's tick, or returns nil after logging
// why it cannot.
func (s *Service) newFiring(e *entry, tick int64, reason string) *firing {
	at := time.Unix(0, tick).UTC()
	id := schemas.CronEventID(e.task.name, int(e.trigger), at)
	data, err := encodeEvent(schemas.TriggerEvent{EventID: id, Task: e.task.name, Source: schemas.SourceCron, FiredAt: at, Reason: reason})
	if err != nil {
		// Strings and a time always encode; say so loudly if they did not.
		s.log.Error().Err(err).Str("task", e.task.name).Str("event_id", id).Msg("cron firing not encoded")
		return nil
	}
	return &firing{
		key:     store.TriggerKey{Task: e.task.name, TriggerIndex: int(e.trigger)},
		tick:    tick,
		subject: s.triggerPrefix + e.task.name,
		msgID:   streams.CronMsgID(s.msgID, e.task.name, id),
		data:    data,
	}
}

// addNew encodes and adds the firing of e's tick.
func (s *Service) addNew(ctx context.Context, out *outbox, e *entry, tick int64, reason string) {
	if f := s.newFiring(e, tick, reason); f != nil {
		s.add(ctx, out, f)
	}
}

// add publishes f into out, awaiting the acknowledgements of the firings
// before it when publishChunk of them are in flight.
func (s *Service) add(ctx context.Context, out *outbox, f *firing) {
	out.firings = append(out.firings, f)
	s.publish(out, f)
	if len(out.firings)-out.awaited >= publishChunk {
		s.await(ctx, out)
	}
}

// encodeEvent encodes a cron firing as encoding/json does. It writes the
// common case itself, five times faster than json.Marshal: at a busy second
// the time to encode a thousand firings is how late the last one leaves.
func encodeEvent(ev schemas.TriggerEvent) ([]byte, error) {
	if ev.Reason != "" || !plainJSON(ev.EventID) || !plainJSON(ev.Task) {
		return json.Marshal(ev)
	}
	b := make([]byte, 0, 64+len(ev.EventID)+len(ev.Task))
	b = append(b, `{"event_id":"`...)
	b = append(b, ev.EventID...)
	b = append(b, `","task":"`...)
	b = append(b, ev.Task...)
	b = append(b, `","source":"`...)
	b = append(b, ev.Source...)
	b = append(b, `","fired_at":"`...)
	b = ev.FiredAt.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...), nil
}

// plainJSON reports whether s is written as it is inside a JSON string.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// publish sends f in out's batch without waiting for its acknowledgement.
func (s *Service) publish(out *outbox, f *firing) {
	if s.onPublish != nil {
		s.onPublish(f.tick)
	}
	if out.batch == nil {
		out.batch = s.pub.Batch()
	}
	f.pub = out.batch.Len()
	hdr := [2]streams.Header{{Key: streams.HeaderMsgID, Value: f.msgID}}
	n := 1
	if tp, ok := streams.TraceHeader(s.startFire(f)); ok {
		hdr[1], n = tp, 2
	}
	out.batch.AddData(f.subject, f.data, hdr[:n]...)
}

// await waits for the acknowledgements of the firings not yet awaited.
func (s *Service) await(ctx context.Context, out *outbox) {
	if out.awaited == len(out.firings) {
		return
	}
	_ = out.batch.Await(ctx) // a firing not awaited has ctx's error
	for _, f := range out.firings[out.awaited:] {
		_, f.err = out.batch.Result(f.pub)
		endFire(f)
	}
	out.awaited = len(out.firings)
}

// finish awaits out's acknowledgements, saves the ticks of the triggers
// whose firings all arrived, and keeps the rest for a retry. A trigger with
// a firing waiting for its retry keeps its tick unsaved too: the state must
// not claim a tick whose firing may be lost.
func (s *Service) finish(ctx context.Context, out *outbox, now int64) {
	s.await(ctx, out)
	held := make(map[store.TriggerKey]bool)
	var (
		failed   []*firing
		firstErr error
	)
	for _, f := range out.firings {
		if f.err != nil {
			failed = append(failed, f)
			held[f.key] = true
			if firstErr == nil {
				firstErr = f.err
			}
		}
	}
	if s.retry != nil {
		for _, f := range s.retry.firings {
			held[f.key] = true
		}
	}
	if len(held) == 0 {
		for _, st := range out.settled {
			s.persist.save(st)
		}
		return
	}
	if s.retry == nil {
		s.retry, s.retryAt = newOutbox(), now+int64(retryDelay)
	}
	s.retry.firings = append(s.retry.firings, failed...)
	if n := len(s.retry.firings) - maxRetries; n > 0 {
		// NATS has been gone for long: keep the latest firings. The state of
		// their triggers stays unsaved, so a restart counts the ticks as missed.
		s.log.Error().Int("firings", n).Time("first_tick", time.Unix(0, s.retry.firings[0].tick).UTC()).
			Msg("cron firings dropped after failing to publish for too long")
		s.retry.firings = slices.Delete(s.retry.firings, 0, n)
	}
	for key, st := range out.settled {
		if held[key] {
			s.retry.settled[key] = st // out's ticks are the later ones
			continue
		}
		s.persist.save(st)
	}
	if firstErr != nil {
		s.log.Error().Err(firstErr).Int("firings", len(failed)).Msg("publishing cron firings failed; trying again")
	}
}

// logMisfire records a misfire decision: what was missed, fired and skipped.
func (s *Service) logMisfire(e *entry, m missed, d decision) {
	ev := s.log.Warn().Str("task", e.task.name).Int("trigger", int(e.trigger)).Str("misfire", e.misfire.String()).
		Int64("missed", m.count).Time("first_missed", time.Unix(0, m.first).UTC()).Time("last_missed", time.Unix(0, m.last).UTC()).
		Int("fired", len(d.fire)).Int64("skipped", d.skipped)
	if !m.exact {
		ev = ev.Bool("missed_estimated", true)
	}
	if d.skipped > 0 {
		ev = ev.Time("first_skipped", time.Unix(0, d.firstSkipped).UTC()).Time("last_skipped", time.Unix(0, d.lastSkipped).UTC())
	}
	ev.Msg("cron ticks missed")
}

// misfireReason is the reason carried by a missed tick fired late.
func misfireReason(e *entry, m missed, fired int) string {
	count := fmt.Sprint(m.count)
	if !m.exact {
		count = "about " + count
	}
	if e.misfire == misfireFireOnce {
		return fmt.Sprintf("misfire fire_once: the latest of %s missed ticks (%s to %s), fired late", count,
			time.Unix(0, m.first).UTC().Format(time.RFC3339), time.Unix(0, m.last).UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("misfire catch_up: missed tick fired late (%d of %s missed ticks fired, oldest first)", fired, count)
}
