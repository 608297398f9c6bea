package dispatcher

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
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
func (s *Service) handleTriggers(ctx context.Context, msgs []jetstream.Msg, t *turn) {
	var now, later []firing
	at := s.now()
	for _, m := range msgs {
		for _, f := range s.readFirings(m) {
			switch due := f.due(); {
			case !due.After(at):
				now = append(now, f)
			case due.Sub(at) <= holdWindow:
				s.held.add(f)
			default:
				later = append(later, f)
			}
		}
	}
	fired := s.fire(ctx, now, t)
	scheduled := s.schedule(ctx, later, t)
	t.pass()
	for _, rest := range []func(){fired, scheduled} {
		if rest != nil {
			rest()
		}
	}
}

// fire turns firings that are due into instances and attempts: one
// statement creates the new instances, one starts the retries, then every
// attempt is published. It returns then, with the rest of the batch, which
// awaits the acknowledgements together and only then acknowledges the
// trigger messages; nil when the batch failed and is redelivered.
//
// Batches run side by side (see [consumeBatches]), each in its turn t
// where the order of the batches matters: a batch of fresh firings of
// tasks without max_running_instances inserts its instances at once, since
// nothing orders them against another batch's but the unique key (whose
// conflicts wait in key order, and the batch that loses leaves the key to
// the one that inserted it); a batch that creates instances of a limited
// task, starts retries or cancels waits for its turn before it writes, so
// that a task's slots go to its firings in the order they came. Every
// batch publishes in its turn, so attempts reach their queues in the order
// of the batches. A crash between a commit and the trigger messages'
// acknowledgement leaves them to be redelivered: the instances they find
// committed are returned by CreateInstances (or StartRetries) and
// published again, which their message ids make a no-op for those the
// server took.
func (s *Service) fire(ctx context.Context, firings []firing, t *turn) func() {
	if len(firings) == 0 {
		return nil
	}
	var (
		fresh   []firing
		retries []store.RetryStart
		cancels []store.CancelRequest
		names   []string
	)
	seen := make(map[string]bool)
	for _, f := range firings {
		if f.event.Retry != nil {
			retries = append(retries, store.RetryStart{InstanceID: f.event.Retry.InstanceID, Attempt: f.event.Retry.Attempt})
			continue
		}
		if c := f.event.Cancel; c != nil {
			cancels = append(cancels, store.CancelRequest{InstanceID: c.InstanceID, Operator: f.event.Operator, Reason: c.Reason})
			continue
		}
		fresh = append(fresh, f)
		if !seen[f.task] {
			seen[f.task] = true
			names = append(names, f.task)
		}
	}

	tasks, err := s.opts.Store.GetTasks(ctx, names)
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	// Each task's definition with its defaults, once a batch.
	defs := make(map[string]*schemas.Task, len(tasks))
	for name, rec := range tasks {
		defs[name] = rec.Definition.WithDefaults()
	}
	create := make([]store.NewInstance, 0, len(fresh))
	limitedCreate := make(map[string][]store.NewInstance)    // by task, for tasks with max_running_instances
	byKey := make(map[[2]string][]jetstream.Msg, len(fresh)) // the messages of each (task, event id)
	// A key's first message is its slice of one in firstMsgs (capacity
	// one: a second message of the key copies it out).
	firstMsgs := make([]jetstream.Msg, len(fresh))
	for i, f := range fresh {
		rec, ok := tasks[f.task]
		if !ok {
			// Without a task there is no instance to record the firing on.
			s.log.Warn().Str("task", f.task).Str("event_id", f.event.EventID).
				Msg("firing of an unknown task dropped; apply the task first")
			continue
		}
		if f.from == streams.FromOutside && f.problem == "" && f.event.Source == schemas.SourceCron && !s.signedCron(ctx, f) {
			if problem := s.checkCron(f, defs[f.task]); problem != "" {
				s.refuse(&f, problem)
			}
		}
		key := [2]string{f.task, f.event.EventID}
		if msgs, ok := byKey[key]; ok {
			byKey[key] = append(msgs, f.msg)
			continue
		}
		firstMsgs[i] = f.msg
		byKey[key] = firstMsgs[i : i+1 : i+1]
		if f.problem != "" {
			s.metrics.refused.WithLabelValues("validate", "skipped").Inc()
		}
		in, err := s.newInstance(f, rec, defs[f.task])
		if err != nil {
			s.retryLater(msgsOf(firings), err)
			return nil
		}
		if n, _ := limited(rec.Definition); n > 0 {
			limitedCreate[f.task] = append(limitedCreate[f.task], in)
			continue
		}
		create = append(create, in)
	}

	if len(limitedCreate) > 0 || len(retries) > 0 || len(cancels) > 0 {
		call(s.hooks.waitsTurn, firings)
		if err := t.wait(ctx); err != nil {
			s.retryLater(msgsOf(firings), err)
			return nil
		}
	}
	call(s.hooks.beforeWrites, firings)
	// A firing PostgreSQL refuses is split off and recorded (refused.go).
	attempts, victims, refused, err := createIsolating(ctx, create,
		func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error) {
			a, err := s.opts.Store.CreateInstances(ctx, in)
			return a, nil, err
		})
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	for _, task := range slices.Sorted(maps.Keys(limitedCreate)) {
		n, strategy := limited(tasks[task].Definition)
		a, v, r, err := createIsolating(ctx, limitedCreate[task],
			func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error) {
				return s.opts.Store.CreateLimitedInstances(ctx, task, n, strategy, in)
			})
		if err != nil {
			s.retryLater(msgsOf(firings), err)
			return nil
		}
		attempts, victims, refused = append(attempts, a...), append(victims, v...), append(refused, r...)
	}
	skipped, termed, err := s.recordRefused(ctx, refused, byKey)
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	attempts = append(attempts, skipped...)
	cancelled, err := s.opts.Store.CancelInstances(ctx, cancels)
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	victims = append(victims, cancelled...)
	retried, err := s.opts.Store.StartRetries(ctx, retries)
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	// What follows publishes, and starts waiting instances: in turn.
	if err := t.wait(ctx); err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	// A SKIPPED or cancelled instance ends its run's branch: the tasks
	// chained after it fire (or are SKIPPED in turn), and its task's
	// waiting instances may start.
	batch := s.pub.Batch()
	promoted, err := s.afterEnds(ctx, batch, append(attemptEnds(attempts), s.stopVictims(victims)...))
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	attempts = append(append(attempts, retried...), promoted...)
	sent, err := s.sendAttempts(ctx, batch, attempts)
	if err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	return func() {
		call(s.hooks.beforeAcks, firings)
		if err := sent.await(ctx); err != nil {
			s.retryLater(msgsOf(firings), err)
			return
		}
		for _, f := range firings {
			if !termed[f.msg] {
				_ = f.msg.Ack()
			}
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
func (s *Service) schedule(ctx context.Context, firings []firing, t *turn) func() {
	if len(firings) == 0 {
		return nil
	}
	if err := t.wait(ctx); err != nil {
		s.retryLater(msgsOf(firings), err)
		return nil
	}
	batch := s.pub.Batch()
	for _, f := range firings {
		ev := f.event
		ev.IdempotencyKey, ev.Delay = "", ""
		// It comes back as AX's own, in the stream of the schedule
		// (the schedule's target must be one of its subjects): as read
		// now, so an outside firing was already held to what the bus
		// proves; an API's comes back as the API's, operator and all.
		target := s.top.AXTrigger(f.task)
		if f.from == streams.FromAPI {
			target = s.top.APITrigger(f.task)
		}
		m, err := streams.NewScheduleMsg(s.top.SchedFiring(f.task, ev.EventID), target, "",
			s.scheduleAt(ev.RunAt), ev)
		if err != nil {
			s.retryLater(msgsOf(firings), err)
			return nil
		}
		batch.Add(m)
	}
	return func() {
		if err := batch.Wait(ctx); err != nil {
			s.retryLater(msgsOf(firings), err)
			return
		}
		for _, f := range firings {
			s.log.Debug().Str("task", f.task).Str("event_id", f.event.EventID).Time("run_at", f.event.RunAt).
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
func (s *Service) scheduleAt(due time.Time) time.Time {
	at := due.Add(-scheduleLead)
	maxAge := s.opts.Streams.TriggersMaxAge
	if maxAge <= 0 {
		maxAge = streams.DefaultTriggersMaxAge
	}
	if limit := s.now().Add(maxAge / 2); at.After(limit) {
		at = limit
	}
	return at
}

// readFirings decodes a trigger message: one firing, or the firings of a
// batch (a JSON array, see taskdef.SplitTriggerBatch), which share the
// message (see [sharedMsg]). A message that names no task is terminated;
// one whose body is malformed still fires, as a SKIPPED instance that says
// what was wrong, so the sender can see it: a bad firing of a batch makes
// its own, and a batch that cannot be split (not valid JSON, more than
// schemas.MaxTriggerBatch firings) one for the whole message.
func (s *Service) readFirings(m jetstream.Msg) []firing {
	task, from, ok := s.top.TriggerFrom(m.Subject())
	if !ok || task == "" || !schemas.ValidText(task) {
		// No task of that name can exist: there is nothing to record it on.
		s.log.Warn().Str("subject", storableText(m.Subject())).Msg("trigger on an unexpected subject dropped")
		s.metrics.refused.WithLabelValues("validate", "terminated").Inc()
		_ = m.Term()
		return nil
	}
	data := m.Data()
	if !schemas.IsTriggerBatch(data) {
		if f, ok := s.readFiring(m, task, from, data, -1); ok {
			return []firing{f}
		}
		return nil
	}
	items, err := taskdef.SplitTriggerBatch(data)
	if err != nil {
		f, ok := s.readFiring(m, task, from, nil, -1)
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
		f, ok := s.readFiring(shared, task, from, item, i)
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
func (s *Service) readFiring(m jetstream.Msg, task string, from streams.Origin, data []byte, index int) (firing, bool) {
	f := firing{msg: m, task: task, from: from}
	ev, err := taskdef.ParseTriggerEvent(data)
	if err == nil && from == streams.FromOutside {
		ev = s.unproven(m, task, ev)
	}
	// bySeq records the firing under its stream sequence: its own id
	// cannot be trusted, or is AX's to use.
	bySeq := false
	switch {
	case err != nil:
		f.problem = fmt.Sprintf("malformed trigger event: %v", err)
	case ev.Cancel != nil && from == streams.FromOutside:
		f.problem = fmt.Sprintf("a cancel order is taken only from the API (POST /v1/instances/%d/cancel, ax instance cancel), not on %s",
			ev.Cancel.InstanceID, m.Subject())
	case ev.Task != "" && ev.Task != task:
		f.problem = fmt.Sprintf("trigger event names task %q but was published to %s", ev.Task, m.Subject())
	case from == streams.FromAX && axOwn(streams.FromAPI, ev) != "" && s.top.IsSchedFiring(m.Headers().Get(streams.HeaderScheduler)):
		// The schedule of a delayed firing, which the api may write too:
		// the dispatcher schedules none of its own kinds there.
		f.problem, bySeq = fmt.Sprintf("%s is a firing AX makes itself, never from the schedule of a delayed firing (%s)",
			axOwn(streams.FromAPI, ev), m.Headers().Get(streams.HeaderScheduler)), true
	case from != streams.FromAX && axOwn(from, ev) != "":
		// Under its own id, or under one it may not hold: either way the
		// true firing of that id must still find it free.
		f.problem, bySeq = fmt.Sprintf("%s is a firing AX makes itself, taken only from AX's own services (on %s), not on %s",
			axOwn(from, ev), s.top.AXTrigger(task), m.Subject()), true
	case !s.ownsEventID(m, task, ev) || strings.Contains(ev.IdempotencyKey, schemas.ShardEventIDMark):
		f.problem, bySeq = "reserved id: "+problemsText(ev.UserIDProblems()), true
	case ev.Source == schemas.SourceCron && from == streams.FromOutside:
		// The trigger service's, or anyone's who may fire: only its id
		// counts, checked against the schedule when the task is read
		// unless the message id is the trigger service's (signedCron).
		if _, tick, ok := cronTick(task, ev.EventID); ok {
			firedAt := tick
			if ev.FiredAt.Truncate(time.Second).Equal(tick) {
				firedAt = ev.FiredAt
			}
			ev = schemas.TriggerEvent{EventID: ev.EventID, Task: task, Source: schemas.SourceCron, FiredAt: firedAt, Reason: ev.Reason}
		} else {
			f.problem, bySeq = fmt.Sprintf("a cron firing must carry the event id of a cron tick of %s (%s…), not %q",
				task, schemas.CronEventIDPrefix+task+":", storableText(ev.EventID)), true
		}
	default:
		f.problem = s.oversize(ev)
	}
	if f.problem == "" {
		f.event = ev
	} else {
		f.event = schemas.TriggerEvent{}
	}
	if f.event.IdempotencyKey != "" {
		f.event.EventID = schemas.IdempotencyEventIDPrefix + f.event.IdempotencyKey
	}
	if f.event.EventID == "" && !bySeq {
		// An outside publisher scopes its Nats-Msg-Id by the task
		// (streams.TriggerMsgID); the event id is what follows.
		id := strings.TrimPrefix(m.Headers().Get(streams.HeaderMsgID), task+"/")
		switch {
		case !schemas.ValidText(id):
			if f.problem == "" {
				f.problem = "the Nats-Msg-Id header is not UTF-8 text without NUL characters, so it cannot be the event id; " +
					"set event_id in the body, or a header of plain text"
			}
			f.event, bySeq = schemas.TriggerEvent{}, true
		case id != "" && schemas.EventIDProblem(id) != "":
			// The body's event_id rules, which the schema applies there.
			if f.problem == "" {
				f.problem = "the Nats-Msg-Id header cannot be the event id: it " + schemas.EventIDProblem(id) +
					"; set event_id in the body, or a header of at most " + strconv.Itoa(schemas.MaxEventIDLength) + " characters without spaces"
			}
			f.event, bySeq = schemas.TriggerEvent{}, true
		case schemas.ReservedEventID(id) != "":
			if f.problem == "" {
				f.problem = "reserved id: " + problemsText(schemas.TriggerEvent{EventID: id}.UserIDProblems()) +
					" (the event id came from the Nats-Msg-Id header)"
			}
			f.event, bySeq = schemas.TriggerEvent{}, true
		case id != "" && index >= 0:
			f.event.EventID = id + "/" + strconv.Itoa(index)
		default:
			f.event.EventID = id
		}
	}
	var meta *jetstream.MsgMetadata
	if f.event.EventID == "" || (f.event.Delay != "" && f.event.FiredAt.IsZero()) {
		if meta, err = m.Metadata(); err != nil {
			s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("trigger without metadata dropped")
			_ = m.Term()
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
		f.event.FiredAt = s.now()
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
func (s *Service) checkCron(f firing, def *schemas.Task) string {
	i, tick, _ := cronTick(f.task, f.event.EventID)
	if i >= len(def.Triggers) || def.Triggers[i].Type != schemas.TriggerTypeCron {
		return fmt.Sprintf("a cron firing of trigger %d, which is no cron trigger of %s", i, f.task)
	}
	t := def.Triggers[i].WithDefaults()
	sched, err := taskdef.ParseCronSchedule(t.Schedule, t.Timezone)
	if err != nil || !sched.Next(tick.Add(-time.Nanosecond)).Equal(tick) {
		return fmt.Sprintf("a cron firing of %s, which is no tick of trigger %d (%s)", tick.Format(time.RFC3339), i, t.Schedule)
	}
	if tick.After(s.now().Add(cronLead)) {
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
func (s *Service) signedCron(ctx context.Context, f firing) bool {
	id := f.msg.Headers().Get(streams.HeaderMsgID)
	if len(id) != len(f.task)+1+streams.CronMsgIDLen {
		return false
	}
	k := &s.cronKey
	k.mu.Lock()
	if k.key == nil {
		key, err := s.opts.Store.CronMsgIDKey(ctx)
		if err != nil {
			k.mu.Unlock()
			s.log.Warn().Err(err).Msg("cron firings checked against their schedules: the key of their message ids is not readable")
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
func (s *Service) refuse(f *firing, problem string) {
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
// schedule instead (see [Service.checkCron]); from the API it is refused.
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
func (s *Service) unproven(m jetstream.Msg, task string, ev schemas.TriggerEvent) schemas.TriggerEvent {
	if ev.Operator == "" && ev.Source != schemas.SourceManual {
		return ev
	}
	s.log.Warn().Str("task", task).Str("subject", m.Subject()).Str("source", string(ev.Source)).
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
func (s *Service) ownsEventID(m jetstream.Msg, task string, ev schemas.TriggerEvent) bool {
	return ev.OwnsEventID(task) || m.Headers().Get(streams.HeaderScheduler) == s.top.SchedFiring(task, ev.EventID)
}

// problemsText joins problems as a reason: "event_id: …; idempotency_key: …".
func problemsText(problems []schemas.Problem) string {
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// newInstance fills an instance from a firing and its task's current
// version. A firing the task cannot take (disabled, another payload
// version, a payload its payload_schema refuses, a chain firing whose
// parent did not end as the task's after asks) makes a SKIPPED instance
// that says why; the error is for a payload_schema that does not compile,
// which the API never stores.
func (s *Service) newInstance(f firing, rec store.TaskRecord, def *schemas.Task) (store.NewInstance, error) {
	ev := f.event
	in := store.NewInstance{
		Task:          f.task,
		TaskVersion:   rec.Version,
		EventID:       ev.EventID,
		Source:        ev.Source,
		Operator:      ev.Operator,
		Priority:      def.Priority,
		Pool:          def.Dispatch.Pool(),
		Handler:       def.Execution.Handler,
		TimeoutMS:     def.TimeoutDuration().Milliseconds(),
		MutexTemplate: def.Concurrency.MutexKey,
		MaxAttempts:   def.Execution.Retry.MaxAttempts,
		RetryPolicy:   def.Execution.Retry,
		Payload:       ev.Payload,
		FiredAt:       ev.FiredAt,
		State:         schemas.StateDispatched,
		CreatedReason: ev.Reason,
		RunID:         ev.RunID,
		Parents:       ev.Parents,
		Route: store.Route{
			Strategy:         def.Dispatch.Strategy,
			MinWorkerVersion: def.MinWorkerVersion,
		},
		Shard: store.Shard{ShardCount: def.Execution.Shards},
	}
	switch def.Dispatch.Strategy {
	case schemas.DispatchHash:
		in.Route.Key = def.Dispatch.HashKey
	case schemas.DispatchWorker:
		in.Route.Key = def.Dispatch.Worker
	}
	if !ev.RunAt.IsZero() {
		// A delayed firing's instance is the one due at RunAt.
		in.FiredAt = ev.RunAt
	}
	if ev.Priority != "" {
		in.Priority = ev.Priority
	}
	version := max(ev.PayloadVersion, schemas.DefaultSchemaVersion)
	var skip string
	if ev.Source == schemas.SourceChain {
		// A chain firing carries no payload, so no version can be wrong.
		version = def.SchemaVersion
		skip = chainSkip(def.After, ev.Parents)
	}
	encoded := schemas.EncodedPayloadProblems(def, ev.Payload)
	switch {
	case f.problem != "":
		in.State, in.Reason = schemas.StateSkipped, f.problem
	case !rec.Enabled:
		in.State, in.Reason = schemas.StateSkipped, "task is disabled"
	case rec.Paused:
		in.State, in.Reason = schemas.StateSkipped, "task is paused"
	case skip != "":
		in.State, in.Reason = schemas.StateSkipped, skip
	case version != def.SchemaVersion:
		in.State, in.Reason = schemas.StateSkipped, fmt.Sprintf(
			"payload_version %d does not match the task's schema_version %d", version, def.SchemaVersion)
	case len(encoded) > 0:
		// As the API refuses it: the scheduler cannot read an encoded payload.
		in.State, in.Reason = schemas.StateSkipped, problemsText(encoded)
	default:
		// The API checks this before it publishes; a plain NATS publish
		// is checked here, where it can only be recorded.
		err := taskdef.ValidatePayload(def.PayloadSchema, ev.Payload)
		if ve, ok := errors.AsType[*schemas.ValidationError](err); ok {
			in.State, in.Reason = schemas.StateSkipped, ve.Error()
		} else if err != nil {
			return in, fmt.Errorf("check the payload of task %s version %d: %w", f.task, rec.Version, err)
		}
	}
	return in, nil
}

// publishAttempts sends the attempts (see [Service.sendAttempts]) and
// awaits them with whatever batch holds already.
func (s *Service) publishAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) error {
	sent, err := s.sendAttempts(ctx, batch, attempts)
	if err != nil {
		return err
	}
	return sent.await(ctx)
}

// sentAttempts is a batch of attempts sent and not yet acknowledged.
type sentAttempts struct {
	s     *Service
	batch *streams.AsyncBatch
	rings map[string]bool
}

// await awaits the acknowledgements of everything the batch holds
// together, then rings each doorbell of the attempts' queues once: an
// executor that the ring wakes finds the attempt stored.
func (sa sentAttempts) await(ctx context.Context) error {
	n := sa.batch.Len()
	if err := sa.batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts and firings: %w", n, err)
	}
	for ring := range sa.rings {
		// The doorbell is a hint: an idle executor that misses it polls anyway.
		_ = sa.s.opts.Conn.Publish(ring, nil)
	}
	return nil
}

// sendAttempts fans out the firings of sharded and broadcast tasks into
// their children (see [Service.fanOut]), routes every DISPATCHED attempt
// (see [Service.route]) and publishes it into batch without awaiting the
// acknowledgement, which the sentAttempts it returns awaits.
// Re-publishing an attempt is harmless: its message id dedupes it. An attempt that no
// live worker may take now is routed again after rerouteDelay, with a
// warning naming its pool and min_worker_version.
func (s *Service) sendAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) (sentAttempts, error) {
	var parents, routed []store.Attempt
	for _, a := range attempts {
		switch {
		case a.Coordinates() && (a.State == schemas.StateDispatched || a.State == schemas.StateRunning):
			// A RUNNING parent comes back when its batch is retried:
			// its children may not have been published.
			parents = append(parents, a)
		case a.State == schemas.StateDispatched && !a.Coordinates():
			routed = append(routed, a)
		}
	}
	children, err := s.fanOut(ctx, batch, parents)
	if err != nil {
		return sentAttempts{}, fmt.Errorf("fan out %d firings: %w", len(parents), err)
	}
	rings := make(map[string]bool)
	rs := newRouting()
	// Headers (the message id, a route) ride in the same max payload.
	limit := s.opts.Conn.MaxPayload() - 1<<10
	var tooLarge []store.Failure
	for _, a := range append(routed, children...) {
		if a.State != schemas.StateDispatched {
			continue
		}
		r, err := s.route(a, rs)
		if err != nil {
			s.noteNoWorker(a, err) // logged once per change of reason
			if err := s.addReroute(batch, a); err != nil {
				return sentAttempts{}, err
			}
			continue
		}
		s.noteRouted(a, r)
		d := schemas.Dispatch{
			InstanceID:    a.ID,
			Task:          a.Task,
			TaskVersion:   a.TaskVersion,
			Handler:       a.Handler,
			Attempt:       a.Attempt,
			MaxAttempts:   a.MaxAttempts,
			EventID:       a.EventID,
			Priority:      a.Priority,
			Pool:          a.Pool,
			Payload:       a.Payload,
			TimeoutMS:     a.TimeoutMS,
			MutexTemplate: a.MutexTemplate,
			FiredAt:       a.FiredAt,
			DispatchedAt:  a.DispatchedAt,
			RunID:         a.RunID,
			Parents:       a.Parents,
			ShardIndex:    a.ShardIndex,
			ShardCount:    a.ShardCount,
			Protocol:      s.opts.Protocol,
			ReportBatches: !s.opts.SingleReports,
			Republished:   a.Republished,
		}
		if err := addDispatch(batch, r, d, limit); err != nil {
			if tl, ok := errors.AsType[errTooLarge](err); ok {
				// It would fail the batch on every try: it fails alone.
				tooLarge = append(tooLarge, store.Failure{InstanceID: a.ID, Attempt: a.Attempt, Reason: tl.Error(), At: s.now(), Permanent: true})
				continue
			}
			return sentAttempts{}, err
		}
		rings[r.ring] = true
	}
	s.flushWaits()
	if len(tooLarge) > 0 {
		if err := s.failAttempts(ctx, tooLarge, nil, nil, nil, "dispatch message too large"); err != nil {
			return sentAttempts{}, fmt.Errorf("fail %d attempts too large to dispatch: %w", len(tooLarge), err)
		}
	}
	return sentAttempts{s: s, batch: batch, rings: rings}, nil
}

// dispatchHeadroom is what a dispatch message adds to its firing's payload
// and parents' outputs (ids, names, the mutex template, headers) at most:
// a firing whose payload leaves less under the NATS max payload could be
// stored but never dispatched.
const dispatchHeadroom = 4 << 10

// oversize says why ev's dispatch message would exceed the NATS max
// payload, or "" when it fits: a firing published straight to NATS may
// come within a few bytes of the limit, and its attempt then could never
// be published (issue 24: an instance stayed DISPATCHED for ever, the
// batch failing each 2 s).
func (s *Service) oversize(ev schemas.TriggerEvent) string {
	size := len(ev.Payload)
	for _, p := range ev.Parents {
		size += len(p.Output)
	}
	if limit := s.opts.Conn.MaxPayload() - dispatchHeadroom; int64(size) > limit {
		return fmt.Sprintf("the payload (and parents' outputs) has %d bytes, over the %d a dispatch message may carry "+
			"(the NATS max_payload of %d bytes less %d for the envelope); send a smaller payload, such as a reference to the data",
			size, limit, s.opts.Conn.MaxPayload(), dispatchHeadroom)
	}
	return ""
}

func dispatchMsgID(id int64, attempt int) string {
	var b [41]byte
	return string(strconv.AppendInt(append(strconv.AppendInt(b[:0], id, 10), '-'), int64(attempt), 10))
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

// sharedMsg is a trigger message that carries a batch of firings, as each
// of its firings sees it. The firings of a batch may end apart (one held
// until its run_at, the others fired at once; in two dispatcher batches),
// so the message is acknowledged once every one of them has acknowledged
// it, and a Nak or Term of any of them returns (or ends) the whole message
// at once and makes the acknowledgements that follow no-ops: a batch
// redelivered is read again whole, and the firings already made find
// their instances (one per event id) and make nothing new.
type sharedMsg struct {
	jetstream.Msg
	mu     sync.Mutex
	left   int  // the firings yet to acknowledge
	failed bool // a firing returned or ended the message
}

// Ack acknowledges the message once every firing has.
func (m *sharedMsg) Ack() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.left <= 0 {
		return nil
	}
	if m.left--; m.left > 0 {
		return nil
	}
	return m.Msg.Ack()
}

// fail runs the first Nak or Term of any firing.
func (m *sharedMsg) fail(do func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failed || m.left <= 0 {
		return nil
	}
	m.failed = true
	return do()
}

func (m *sharedMsg) Nak() error { return m.fail(m.Msg.Nak) }

func (m *sharedMsg) NakWithDelay(d time.Duration) error {
	return m.fail(func() error { return m.Msg.NakWithDelay(d) })
}

func (m *sharedMsg) Term() error { return m.fail(m.Msg.Term) }

func (m *sharedMsg) TermWithReason(reason string) error {
	return m.fail(func() error { return m.Msg.TermWithReason(reason) })
}
