package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// intake is the part of the dispatcher that turns firings into instances
// and attempts (see [intake.handleTriggers]): it reads the trigger
// messages, holds or schedules the firings due later, creates the
// instances of those due through the store, and hands their attempts to
// next to publish.
type intake struct {
	store *store.Store
	top   streams.Topology
	// conn tells the NATS max_payload a dispatch message must fit.
	conn *nats.Conn
	// triggersMaxAge is the triggers stream's MaxAge as the dispatcher
	// follows it (0: the default).
	triggersMaxAge func() time.Duration
	now            func() time.Time
	log            zerolog.Logger
	metrics        *metrics
	// held keeps the firings due within holdWindow until their time.
	held *holder
	// cronKey is the key of the trigger service's message ids, read from
	// the store on first use (see intake.signedCron).
	cronKey cronKey
	next    completer
	tracing tracing
	// tasks keeps the tasks the batches read (see taskCache).
	tasks *taskCache
	// at, nil in production, is called at each firingPoint of a batch of
	// firings with its firings: tests set it (export_test.go), before Run.
	at func(firingPoint, []firing)
}

// firing is one trigger message and what it asks for.
type firing struct {
	msg   jetstream.Msg
	task  string
	event schemas.TriggerEvent
	// from says who may have published the firing, by its subject: only
	// the API's keep their source and operator, only AX's own are taken
	// for AX's kinds (chain, retry, cancel of the API's); an outside cron
	// firing must name a tick of its task's schedule (see
	// streams.Topology.Trigger).
	from streams.Origin
	// problem is why the message cannot fire its task as it is; such a
	// firing makes a SKIPPED instance with the problem as reason.
	problem string
	// trace is the trace context of the message's headers (see trace.go).
	trace store.Trace
}

// due returns when the firing's instance may be created: its run_at, or
// the zero time for a firing that is due now (malformed messages never
// wait; nor do retries, but for the run_at a dispatcher gives the retry
// of a worker death's attempt, a moment ahead: see deathWait).
func (f firing) due() time.Time {
	if f.problem != "" {
		return time.Time{}
	}
	return f.event.RunAt
}

// handleTriggers sorts a batch of trigger messages by when they are due:
// those due now are fired at once, those due within holdWindow are held in
// memory until their time, and those due later are re-published as one-shot
// message schedules (and acknowledged), so that no client has to schedule
// its own delayed firings. It passes its turn (see [turn]) once the
// batch's publishes are sent, and then awaits their acknowledgements.
func (it *intake) handleTriggers(ctx context.Context, msgs []jetstream.Msg, t *turn) {
	// Read first, so that the list of those due now (most, and a
	// message may carry a thousand) is made once.
	read, n := make([][]firing, len(msgs)), 0
	for i, m := range msgs {
		read[i] = it.readFirings(m)
		n += len(read[i])
	}
	now := make([]firing, 0, n)
	var later []firing
	at := it.now()
	for _, fs := range read {
		for _, f := range fs {
			switch due := f.due(); {
			case !due.After(at):
				now = append(now, f)
			case due.Sub(at) <= holdWindow:
				it.held.add(f)
			default:
				later = append(later, f)
			}
		}
	}
	fired := it.fire(ctx, now, t)
	scheduled := it.schedule(ctx, later, t)
	t.pass()
	for _, rest := range []func(){fired, scheduled} {
		if rest != nil {
			rest()
		}
	}
}

// schedule re-publishes firings that are due later than holdWindow as
// one-shot message schedules on their own ax.sched subject, due scheduleLead
// before their run_at, in the batch's turn t; the rest it returns awaits
// the acknowledgements and then acknowledges the firings (nil when the
// batch failed and is redelivered). The schedule carries the
// event with its event id spelt out and its delay resolved to run_at, so the
// firing it publishes is the same one. It has no message id: a schedule
// published twice replaces itself on its subject.
func (it *intake) schedule(ctx context.Context, firings []firing, t *turn) func() {
	if len(firings) == 0 {
		return nil
	}
	if err := t.wait(ctx); err != nil {
		it.next.retryLater(msgsOf(firings), err)
		return nil
	}
	batch := it.next.newBatch()
	for _, f := range firings {
		ev := f.event
		ev.IdempotencyKey, ev.Delay = "", ""
		// It comes back as AX's own, in the stream of the schedule
		// (the schedule's target must be one of its subjects): as read
		// now, so an outside firing was already held to what the bus
		// proves; an API's comes back as the API's, operator and all.
		target := it.top.AXTrigger(f.task)
		if f.from == streams.FromAPI {
			target = it.top.APITrigger(f.task)
		}
		m, err := streams.NewScheduleMsg(it.top.SchedFiring(f.task, ev.EventID), target, "",
			it.scheduleAt(ev.RunAt), ev)
		if err != nil {
			it.next.retryLater(msgsOf(firings), err)
			return nil
		}
		if f.trace.Parent != "" {
			// The server publishes the schedule with its headers.
			m.Header.Set(streams.HeaderTraceParent, f.trace.Parent)
		}
		batch.Add(m)
	}
	return func() {
		if err := batch.Wait(ctx); err != nil {
			it.next.retryLater(msgsOf(firings), err)
			return
		}
		for _, f := range firings {
			it.log.Debug().Str("task", f.task).Str("event_id", f.event.EventID).Time("run_at", f.event.RunAt).
				Msg("delayed firing scheduled")
			_ = f.msg.Ack()
		}
	}
}

// scheduleAt returns when a schedule of a firing due at due should publish
// it: scheduleLead early, since the server publishes a schedule up to 250 ms
// after its time and the dispatcher holds the remainder; and no later than
// half the triggers stream's MaxAge from now, since the stream would drop a
// schedule older than that. A firing due later comes back early and is
// scheduled again.
func (it *intake) scheduleAt(due time.Time) time.Time {
	at := due.Add(-scheduleLead)
	maxAge := it.triggersMaxAge()
	if maxAge <= 0 {
		maxAge = streams.DefaultTriggersMaxAge
	}
	if limit := it.now().Add(maxAge / 2); at.After(limit) {
		at = limit
	}
	return at
}

// retryLater returns a batch to JetStream for redelivery after a short
// delay: every step of it is idempotent, so the next try completes it.
func (s *Service) retryLater(msgs []jetstream.Msg, err error) {
	stage := "triggers"
	if len(msgs) > 0 {
		if md, mdErr := msgs[0].Metadata(); mdErr == nil && md.Stream == s.top.ReportsStream() {
			stage = "reports"
		}
	}
	s.metrics.batchFailures.WithLabelValues(stage).Inc()
	s.log.Error().Err(err).Int("messages", len(msgs)).Str("stage", stage).Msg("batch failed; redelivering it")
	for _, m := range msgs {
		_ = m.NakWithDelay(retryDelay)
	}
}

// msgsOf returns the messages of firings, each once (the firings of a
// batch share theirs).
func msgsOf(firings []firing) []jetstream.Msg {
	msgs := make([]jetstream.Msg, 0, len(firings))
	for i, f := range firings {
		if i > 0 && f.msg == firings[i-1].msg {
			continue
		}
		msgs = append(msgs, f.msg)
	}
	return msgs
}
