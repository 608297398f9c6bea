package dispatcher

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// readFirings decodes a trigger message: one firing, or the firings of a
// batch (a JSON array, see taskdef.SplitTriggerBatch), which share the
// message (see [sharedMsg]). A message that names no task is terminated;
// one whose body is malformed still fires, as a SKIPPED instance that says
// what was wrong, so the sender can see it: a bad firing of a batch makes
// its own, and a batch that cannot be split (not valid JSON, more than
// schemas.MaxTriggerBatch firings) one for the whole message.
func (it *intake) readFirings(m jetstream.Msg) []firing {
	task, from, ok := it.top.TriggerFrom(m.Subject())
	if !ok || task == "" || !schemas.ValidText(task) {
		// No task of that name can exist: there is nothing to record it on.
		it.log.Warn().Str("subject", storableText(m.Subject())).Msg("trigger on an unexpected subject dropped")
		it.metrics.refused.WithLabelValues("validate", "terminated").Inc()
		_ = m.Term()
		return nil
	}
	data := m.Data()
	if !schemas.IsTriggerBatch(data) {
		if f, ok := it.readFiring(m, task, from, data, -1); ok {
			return []firing{f}
		}
		return nil
	}
	items, err := taskdef.SplitTriggerBatch(data)
	if err != nil {
		f, ok := it.readFiring(m, task, from, nil, -1)
		if !ok {
			return nil
		}
		f.problem, f.event = fmt.Sprintf("refused batch of firings: %v", err), schemas.TriggerEvent{
			EventID: f.event.EventID, Source: schemas.SourceEvent, FiredAt: f.event.FiredAt}
		return []firing{f}
	}
	if len(items) == 0 {
		_ = m.Ack() // a batch of no firings fires nothing
		return nil
	}
	shared := &sharedMsg{Msg: m, left: len(items)}
	out := make([]firing, 0, len(items))
	for i, item := range items {
		f, ok := it.readFiring(shared, task, from, item, i)
		if !ok {
			return nil // terminated: the message has no metadata
		}
		out = append(out, f)
	}
	return out
}

// readFiring decodes the firing data of m, a message on task's subject:
// its body, or the firing at index of the batch it holds (index -1 for a
// message of one firing).
//
// The event comes back complete: its event id is the body's, idem-<key> for
// an idempotency key, the Nats-Msg-Id header, or "seq-<stream sequence>", in
// that order (a firing of a batch without an id of its own: the header
// followed by /<index>, or seq-<stream sequence>-<index>); a delay is
// resolved to run_at (after fired_at, or after the message reached the
// stream); source and fired_at have their defaults.
func (it *intake) readFiring(m jetstream.Msg, task string, from streams.Origin, data []byte, index int) (firing, bool) {
	f := firing{msg: m, task: task, from: from}
	if h := m.Headers(); len(h) > 0 {
		f.trace = store.Trace{Parent: streams.TraceParent(h), State: streams.TraceState(h)}
	}
	ev, err := taskdef.ParseTriggerEvent(data)
	if err == nil && from == streams.FromOutside {
		ev = it.unproven(m, task, ev)
	}
	// bySeq records the firing under its stream sequence: its own id
	// cannot be trusted, or is AX's to use.
	var bySeq bool
	if err != nil {
		f.problem = fmt.Sprintf("malformed trigger event: %v", err)
	} else {
		ev, f.problem, bySeq = it.checkFiring(m, task, from, ev)
	}
	if f.problem == "" {
		f.event = ev
	}
	if f.event.IdempotencyKey != "" {
		f.event.EventID = schemas.IdempotencyEventIDPrefix + f.event.IdempotencyKey
	}
	if f.event.EventID == "" && !bySeq {
		headerEventID(&f, index)
	}
	return it.completeFiring(f, index)
}

// checkFiring returns ev, a firing that parsed, on m on task's subject,
// as it may fire (a cron firing from outside keeps only its tick's id,
// fired_at and reason), or the problem that keeps it from firing as it
// is, and whether it is then recorded under its stream sequence (bySeq).
func (it *intake) checkFiring(m jetstream.Msg, task string, from streams.Origin, ev schemas.TriggerEvent) (_ schemas.TriggerEvent, problem string, bySeq bool) {
	switch {
	case ev.Cancel != nil && from == streams.FromOutside:
		problem = fmt.Sprintf("a cancel order is taken only from the API (POST /v1/instances/%d/cancel, ax instance cancel), not on %s",
			ev.Cancel.InstanceID, m.Subject())
	case ev.Task != "" && ev.Task != task:
		problem = fmt.Sprintf("trigger event names task %q but was published to %s", ev.Task, m.Subject())
	case from == streams.FromAX && axOwn(streams.FromAPI, ev) != "" && it.top.IsSchedFiring(m.Headers().Get(streams.HeaderScheduler)):
		// The schedule of a delayed firing, which the api may write too:
		// the dispatcher schedules none of its own kinds there.
		problem, bySeq = fmt.Sprintf("%s is a firing AX makes itself, never from the schedule of a delayed firing (%s)",
			axOwn(streams.FromAPI, ev), m.Headers().Get(streams.HeaderScheduler)), true
	case from != streams.FromAX && axOwn(from, ev) != "":
		// Under its own id, or under one it may not hold: either way the
		// true firing of that id must still find it free.
		problem, bySeq = fmt.Sprintf("%s is a firing AX makes itself, taken only from AX's own services (on %s), not on %s",
			axOwn(from, ev), it.top.AXTrigger(task), m.Subject()), true
	case !it.ownsEventID(m, task, ev) || strings.Contains(ev.IdempotencyKey, schemas.ShardEventIDMark):
		problem, bySeq = "reserved id: "+problemsText(ev.UserIDProblems()), true
	case ev.Source == schemas.SourceCron && from == streams.FromOutside:
		// The trigger service's, or anyone's who may fire: only its id
		// counts, checked against the schedule when the task is read
		// unless the message id is the trigger service's (signedCron).
		if _, tick, ok := cronTick(task, ev.EventID); ok {
			firedAt := tick
			if ev.FiredAt.Truncate(time.Second).Equal(tick) {
				firedAt = ev.FiredAt
			}
			// A backfill's tick keeps its priority (trigger/backfill.go).
			ev = schemas.TriggerEvent{EventID: ev.EventID, Task: task, Source: schemas.SourceCron, FiredAt: firedAt, Reason: ev.Reason,
				Priority: ev.Priority}
		} else {
			problem, bySeq = fmt.Sprintf("a cron firing must carry the event id of a cron tick of %s (%s…), not %q",
				task, schemas.CronEventIDPrefix+task+":", storableText(ev.EventID)), true
		}
	default:
		problem = it.oversize(ev)
	}
	return ev, problem, bySeq
}

// headerEventID gives f, a firing without an event id of its own, the
// one its message's Nats-Msg-Id header holds: an outside publisher scopes
// it by the task (streams.TriggerMsgID), and the event id is what follows
// (with /<index> for a firing of a batch). A header that cannot be an
// event id leaves none (the stream sequence's follows) and, unless f has
// a problem already, says why.
func headerEventID(f *firing, index int) {
	id := strings.TrimPrefix(f.msg.Headers().Get(streams.HeaderMsgID), f.task+"/")
	var problem string
	switch {
	case !schemas.ValidText(id):
		problem = "the Nats-Msg-Id header is not UTF-8 text without NUL characters, so it cannot be the event id; " +
			"set event_id in the body, or a header of plain text"
	case id != "" && schemas.EventIDProblem(id) != "":
		// The body's event_id rules, which the schema applies there.
		problem = "the Nats-Msg-Id header cannot be the event id: it " + schemas.EventIDProblem(id) +
			"; set event_id in the body, or a header of at most " + strconv.Itoa(schemas.MaxEventIDLength) + " characters without spaces"
	case schemas.ReservedEventID(id) != "":
		problem = "reserved id: " + problemsText(schemas.TriggerEvent{EventID: id}.UserIDProblems()) +
			" (the event id came from the Nats-Msg-Id header)"
	case id != "" && index >= 0:
		f.event.EventID = id + "/" + strconv.Itoa(index)
		return
	default:
		f.event.EventID = id
		return
	}
	if f.problem == "" {
		f.problem = problem
	}
	f.event = schemas.TriggerEvent{}
}

// completeFiring fills what f's event leaves out: an event id from its
// message's stream sequence (with -<index> for a firing of a batch), a
// delay resolved to run_at, the default source and fired_at. A message
// whose metadata it needs and cannot read is terminated (false).
func (it *intake) completeFiring(f firing, index int) (firing, bool) {
	var meta *jetstream.MsgMetadata
	if f.event.EventID == "" || (f.event.Delay != "" && f.event.FiredAt.IsZero()) {
		var err error
		if meta, err = f.msg.Metadata(); err != nil {
			it.log.Warn().Err(err).Str("subject", f.msg.Subject()).Msg("trigger without metadata dropped")
			_ = f.msg.Term()
			return firing{}, false
		}
	}
	if f.event.EventID == "" {
		f.event.EventID = schemas.SeqEventIDPrefix + strconv.FormatUint(meta.Sequence.Stream, 10)
		if index >= 0 {
			f.event.EventID += "-" + strconv.Itoa(index)
		}
	}
	if f.event.Delay != "" {
		// ParseTriggerEvent checked that it parses.
		d, _ := time.ParseDuration(f.event.Delay)
		base := f.event.FiredAt
		if base.IsZero() {
			base = meta.Timestamp
		}
		f.event.RunAt, f.event.Delay = base.Add(d), ""
	}
	if f.event.Source == "" {
		f.event.Source = schemas.SourceEvent
	}
	if f.event.FiredAt.IsZero() {
		f.event.FiredAt = it.now()
	}
	return f, true
}

// cronLead is how far ahead of the dispatcher's clock a cron tick fired
// from outside may be: the trigger service fires at the tick, on a clock
// of its own.
const cronLead = 5 * time.Second

// cronTick returns the trigger index and the tick of id, the event id of
// a cron tick of task (see schemas.CronEventID), false for any other id.
func cronTick(task, id string) (int, time.Time, bool) {
	rest, ok := strings.CutPrefix(id, schemas.CronEventIDPrefix+task+":")
	if !ok {
		return 0, time.Time{}, false
	}
	index, at, _ := strings.Cut(rest, ":")
	i, err1 := strconv.Atoi(index)
	tick, err2 := time.Parse(time.RFC3339, at)
	if err1 != nil || err2 != nil || i < 0 || schemas.CronEventID(task, i, tick) != id {
		return 0, time.Time{}, false
	}
	return i, tick, true
}

// checkCron returns why f, a cron firing published outside AX's own
// subjects, is not a tick its task's trigger service would fire: its
// trigger is no cron trigger of the task, the tick is not on its
// schedule, or it is due more than cronLead from now. Such a firing
// proves nothing, whoever sent it; one that passes is the very firing the
// trigger service makes (readFiring kept only its id, fired_at and
// reason), so whoever sends it first, the tick makes one instance, the
// same.
func (it *intake) checkCron(f firing, def *schemas.Task) string {
	i, tick, _ := cronTick(f.task, f.event.EventID)
	if i >= len(def.Triggers) || def.Triggers[i].Type != schemas.TriggerTypeCron {
		return fmt.Sprintf("a cron firing of trigger %d, which is no cron trigger of %s", i, f.task)
	}
	t := def.Triggers[i].WithDefaults()
	sched, err := taskdef.ParseCronSchedule(t.Schedule, t.Timezone)
	if err != nil || !sched.Next(tick.Add(-time.Nanosecond)).Equal(tick) {
		return fmt.Sprintf("a cron firing of %s, which is no tick of trigger %d (%s)", tick.Format(time.RFC3339), i, t.Schedule)
	}
	if tick.After(it.now().Add(cronLead)) {
		return fmt.Sprintf("a cron firing of the tick %s, which is not due yet", tick.Format(time.RFC3339))
	}
	return ""
}

// cronKey holds the key of the cron firings' Nats-Msg-Id, read once.
type cronKey struct {
	mu  sync.Mutex
	key []byte
}

// signedCron reports whether f, a cron firing on an outside subject,
// carries the Nats-Msg-Id the trigger service gives it
// ([streams.CronMsgID]), which only a holder of the store's key can
// compute: the trigger service fired the tick from its plan, and it
// counts without checkCron. A tick fired just before its trigger changed
// or went away then still makes its instance, and so does one fired by a
// trigger whose clock runs ahead. While the key cannot be read (logged),
// every cron firing is checked.
func (it *intake) signedCron(ctx context.Context, f firing) bool {
	id := f.msg.Headers().Get(streams.HeaderMsgID)
	if len(id) != len(f.task)+1+streams.CronMsgIDLen {
		return false
	}
	k := &it.cronKey
	k.mu.Lock()
	if k.key == nil {
		key, err := it.store.CronMsgIDKey(ctx)
		if err != nil {
			k.mu.Unlock()
			it.log.Warn().Err(err).Msg("cron firings checked against their schedules: the key of their message ids is not readable")
			return false
		}
		k.key = key
	}
	key := k.key
	k.mu.Unlock()
	return hmac.Equal([]byte(id), []byte(streams.CronMsgID(hmac.New(sha256.New, key), f.task, f.event.EventID)))
}

// refuse makes f a firing of the problem, under the event id of its
// message's stream sequence: the id it claimed stays free for the true
// firing.
func (it *intake) refuse(f *firing, problem string) {
	firedAt := f.event.FiredAt
	id := schemas.SeqEventIDPrefix + "unknown"
	if meta, err := f.msg.Metadata(); err == nil {
		id = schemas.SeqEventIDPrefix + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	f.problem, f.event = problem, schemas.TriggerEvent{EventID: id, Source: schemas.SourceEvent, FiredAt: firedAt}
}

// axOwn names what makes ev one of the firings only AX's own services
// make, "" if nothing does: a retry or reroute (its retry field), a chain
// firing or its parents' outputs, a shard's id, and on an outside subject
// a cancel order (refused apart). A cron firing is the trigger service's,
// whose NATS user may be an outside publisher's too (`ax dev` hands out
// the trigger user): from outside it is checked against its task's
// schedule instead (see [intake.checkCron]); from the API it is refused.
func axOwn(from streams.Origin, ev schemas.TriggerEvent) string {
	switch {
	case ev.Retry != nil || ev.Source == schemas.SourceRetry:
		return "a retry (source retry, or a retry field)"
	case ev.Source == schemas.SourceChain || len(ev.Parents) > 0:
		return "a chain firing (source chain, or parents)"
	case ev.Source == schemas.SourceCron && from != streams.FromOutside:
		return "a cron firing"
	case strings.Contains(ev.EventID, schemas.ShardEventIDMark):
		return "a shard (" + schemas.ShardEventIDMark + " in its event id)"
	}
	return ""
}

// unproven returns ev, a firing that did not come on the API's subject, as
// the bus can prove it: no operator, and no manual source. A firing that
// claims either is recorded as an event of operator "nats"
// (store.OperatorNATS), and logged: only the api's NATS user may publish a
// firing that names who fired it.
func (it *intake) unproven(m jetstream.Msg, task string, ev schemas.TriggerEvent) schemas.TriggerEvent {
	if ev.Operator == "" && ev.Source != schemas.SourceManual {
		return ev
	}
	it.log.Warn().Str("task", task).Str("subject", m.Subject()).Str("source", string(ev.Source)).
		Str("operator", storableText(ev.Operator)).
		Msg("a firing not published by the API claims an operator or a manual source; recorded as an event of operator nats")
	if ev.Source == schemas.SourceManual {
		ev.Source = schemas.SourceEvent
	}
	ev.Operator = store.OperatorNATS
	return ev
}

// ownsEventID reports whether the firing ev of task may carry its event id:
// one outside AX's namespace, one that AX's own kind of firing makes (see
// [schemas.TriggerEvent.OwnsEventID]), or one that the dispatcher spelt
// out in the schedule of a delayed firing (seq-…, idem-…), which the
// message says by its Nats-Scheduler header (no client can set it).
func (it *intake) ownsEventID(m jetstream.Msg, task string, ev schemas.TriggerEvent) bool {
	return ev.OwnsEventID(task) || m.Headers().Get(streams.HeaderScheduler) == it.top.SchedFiring(task, ev.EventID)
}

// problemsText joins problems as a reason: "event_id: …; idempotency_key: …".
func problemsText(problems []schemas.Problem) string {
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}
