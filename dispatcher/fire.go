package dispatcher

import (
	"context"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

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
func (it *intake) fire(ctx context.Context, firings []firing, t *turn) func() {
	if len(firings) == 0 {
		return nil
	}
	b := it.newFiringBatch(firings, t)
	sent, err := b.run(ctx)
	if err != nil {
		it.next.retryLater(msgsOf(firings), err)
		return nil
	}
	return func() {
		it.reached(pointAcks, firings)
		if err := sent.await(ctx); err != nil {
			it.next.retryLater(msgsOf(firings), err)
			return
		}
		for _, f := range firings {
			if !b.termed[f.msg] {
				_ = f.msg.Ack()
			}
		}
	}
}

// firingBatch is one batch of firings on its way to instances and attempts
// (see [intake.fire]): the firings sorted by what they ask, the tasks
// they name, the instances to create, and what the writes return. Each
// step of [firingBatch.run] fills a part of it; the first error ends the run.
type firingBatch struct {
	it      *intake
	firings []firing
	t       *turn

	// By what they ask: fresh firings, retries, cancels, and the tasks
	// the fresh ones name.
	fresh   []firing
	retries []store.RetryStart
	cancels []store.CancelRequest
	names   []string

	// The named tasks, and each one's definition with its defaults.
	tasks map[string]store.TaskRecord
	defs  map[string]*schemas.Task
	// problems counts the firings whose problem makes them SKIPPED, for
	// the refusals metric once the batch is written.
	problems int
	// The instances to create: of tasks without max_running_instances,
	// and by task of those with it.
	create  []store.NewInstance
	limited map[string][]store.NewInstance
	// byKey holds the messages of each (task, event id); spans the span
	// of the instance each makes (see trace.go).
	byKey map[[2]string][]jetstream.Msg
	spans map[[2]string]trace.Span

	// What the writes made: the attempts of the instances created (some
	// SKIPPED) and of the retries started, the instances that ended
	// (victims of a strategy, cancelled), the refused firings, and the
	// messages recorded as refused and terminated.
	attempts []store.Attempt
	retried  []store.Attempt
	victims  []store.Victim
	refused  []refusal
	termed   map[jetstream.Msg]bool
}

// newFiringBatch sorts firings by what they ask for.
func (it *intake) newFiringBatch(firings []firing, t *turn) *firingBatch {
	b := &firingBatch{it: it, firings: firings, t: t}
	seen := make(map[string]bool)
	for _, f := range firings {
		if f.event.Retry != nil {
			b.retries = append(b.retries, store.RetryStart{InstanceID: f.event.Retry.InstanceID, Attempt: f.event.Retry.Attempt})
			continue
		}
		if c := f.event.Cancel; c != nil {
			b.cancels = append(b.cancels, store.CancelRequest{InstanceID: c.InstanceID, Operator: f.event.Operator, Reason: c.Reason})
			continue
		}
		b.fresh = append(b.fresh, f)
		if !seen[f.task] {
			seen[f.task] = true
			b.names = append(b.names, f.task)
		}
	}
	return b
}

// run reads the batch's tasks, fills its instances, writes them and
// publishes the attempts, returning what awaits their acknowledgements. A
// write refused because a task changed since it was read (the cache's
// record, or one changed right after its read) wrote nothing: the batch
// reads its tasks anew and makes its instances again, up to
// maxTaskRereads times before it is left to be redelivered.
func (b *firingBatch) run(ctx context.Context) (_ sentAttempts, err error) {
	defer func() { b.endSpans(err) }()
	for reread := 0; ; reread++ {
		if err := b.readTasks(ctx, reread > 0); err != nil {
			return sentAttempts{}, err
		}
		if err := b.instances(ctx); err != nil {
			return sentAttempts{}, err
		}
		err := b.write(ctx)
		if store.IsTaskChanged(err) && reread < maxTaskRereads {
			b.endSpans(err)
			continue
		}
		if err != nil {
			return sentAttempts{}, err
		}
		break
	}
	if b.problems > 0 {
		b.it.metrics.refused.WithLabelValues("validate", "skipped").Add(float64(b.problems))
	}
	return b.publish(ctx)
}

// maxTaskRereads bounds the times a batch of firings reads its tasks anew
// because one changed between its read and the batch's write.
const maxTaskRereads = 3

// readTasks finds the tasks the fresh firings name: those the dispatcher
// has not met (or all of them, again) read in one query.
func (b *firingBatch) readTasks(ctx context.Context, again bool) error {
	cache := b.it.tasks
	if again {
		cache.drop(b.names)
	}
	b.tasks = make(map[string]store.TaskRecord, len(b.names))
	b.defs = make(map[string]*schemas.Task, len(b.names))
	missing := cache.get(b.names, b.tasks, b.defs)
	if len(missing) == 0 {
		return nil
	}
	read, err := b.it.store.GetTasks(ctx, missing)
	if err != nil {
		return err
	}
	cache.put(read, b.tasks, b.defs)
	return nil
}

// instances fills the instances of the fresh firings, one a (task, event
// id), and notes the messages of each key. A firing of an unknown task is
// dropped with a warning: there is no instance to record it on.
func (b *firingBatch) instances(ctx context.Context) error {
	it := b.it
	b.problems = 0
	b.create = make([]store.NewInstance, 0, len(b.fresh))
	b.limited = make(map[string][]store.NewInstance)
	b.byKey = make(map[[2]string][]jetstream.Msg, len(b.fresh))
	b.spans = make(map[[2]string]trace.Span, len(b.fresh))
	// A key's first message is its slice of one in firstMsgs (capacity
	// one: a second message of the key copies it out).
	firstMsgs := make([]jetstream.Msg, len(b.fresh))
	for i, f := range b.fresh {
		rec, ok := b.tasks[f.task]
		if !ok {
			it.log.Warn().Str("task", f.task).Str("event_id", f.event.EventID).
				Msg("firing of an unknown task dropped; apply the task first")
			continue
		}
		if f.from == streams.FromOutside && f.problem == "" && f.event.Source == schemas.SourceCron && !it.signedCron(ctx, f) {
			if problem := it.checkCron(f, b.defs[f.task]); problem != "" {
				it.refuse(&f, problem)
			}
		}
		key := [2]string{f.task, f.event.EventID}
		if msgs, ok := b.byKey[key]; ok {
			b.byKey[key] = append(msgs, f.msg)
			continue
		}
		firstMsgs[i] = f.msg
		b.byKey[key] = firstMsgs[i : i+1 : i+1]
		if f.problem != "" {
			b.problems++
		}
		in, err := it.newInstance(f, rec, b.defs[f.task])
		if err != nil {
			return err
		}
		in.TaskStamp = rec.Stamp
		span := it.tracing.startCreate(&f)
		in.Trace = traceOf(span)
		b.spans[key] = span
		if n, _ := limited(rec.Definition); n > 0 || len(rec.Definition.Limits) > 0 {
			b.limited[f.task] = append(b.limited[f.task], in)
			continue
		}
		b.create = append(b.create, in)
	}
	return nil
}

// write creates the instances, records the firings PostgreSQL refused
// (refused.go), cancels and starts the retries: a batch whose order
// matters in its turn (see [intake.fire]).
func (b *firingBatch) write(ctx context.Context) error {
	it := b.it
	if len(b.limited) > 0 || len(b.retries) > 0 || len(b.cancels) > 0 {
		it.reached(pointTurn, b.firings)
		if err := b.t.wait(ctx); err != nil {
			return err
		}
	}
	it.reached(pointWrites, b.firings)
	if err := b.createInstances(ctx); err != nil {
		return err
	}
	skipped, termed, err := it.recordRefused(ctx, b.refused, b.byKey)
	if err != nil {
		return err
	}
	b.attempts, b.termed = append(b.attempts, skipped...), termed
	cancelled, err := it.store.CancelInstances(ctx, b.cancels)
	if err != nil {
		return err
	}
	b.victims = append(b.victims, cancelled...)
	retried, err := it.store.StartRetries(ctx, b.retries)
	if err != nil {
		return err
	}
	b.retried = retried
	return nil
}

// createInstances creates the instances of the batch, a firing that
// PostgreSQL refuses split off (see [createIsolating]): those of tasks
// without max_running_instances in one statement, then those of each
// limited task, by name.
func (b *firingBatch) createInstances(ctx context.Context) error {
	st := b.it.store
	attempts, victims, refused, err := createIsolating(ctx, b.create,
		func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error) {
			a, err := st.CreateInstances(ctx, in)
			return a, nil, err
		})
	if err != nil {
		return err
	}
	for _, task := range slices.Sorted(maps.Keys(b.limited)) {
		n, strategy := limited(b.tasks[task].Definition)
		a, v, r, err := createIsolating(ctx, b.limited[task],
			func(ctx context.Context, in []store.NewInstance) ([]store.Attempt, []store.Victim, error) {
				if limits := b.tasks[task].Definition.Limits; len(limits) > 0 {
					a, err := st.CreateAdmittedInstances(ctx, task, limits, in)
					return a, nil, err
				}
				return st.CreateLimitedInstances(ctx, task, n, strategy, in)
			})
		if err != nil {
			return err
		}
		attempts, victims, refused = append(attempts, a...), append(victims, v...), append(refused, r...)
	}
	b.attempts, b.victims, b.refused = attempts, victims, refused
	return nil
}

// publish, in the batch's turn, sets going what the instances that ended
// start (a SKIPPED or cancelled instance ends its run's branch: the tasks
// chained after it fire, or are SKIPPED in turn, and its task's waiting
// instances may start) and sends every attempt.
func (b *firingBatch) publish(ctx context.Context) (sentAttempts, error) {
	it := b.it
	if err := b.t.wait(ctx); err != nil {
		return sentAttempts{}, err
	}
	batch := it.next.newBatch()
	promoted, err := it.next.afterEnds(ctx, batch, append(attemptEnds(b.attempts), it.next.stopVictims(b.victims)...))
	if err != nil {
		return sentAttempts{}, err
	}
	return it.next.sendAttempts(ctx, batch, append(append(b.attempts, b.retried...), promoted...))
}

// endSpans ends the spans of the batch's instances: each with the
// instance it made, or with err when the batch failed.
func (b *firingBatch) endSpans(err error) {
	for i := range b.attempts {
		a := &b.attempts[i]
		key := [2]string{a.Task, a.EventID}
		if span, ok := b.spans[key]; ok {
			endCreate(span, a, nil)
			delete(b.spans, key)
		}
	}
	for _, span := range b.spans {
		endCreate(span, nil, err)
	}
}

// firingPoint names a point of a batch of firings' way (see
// [intake.fire]) where a test may hold it.
type firingPoint int

const (
	// pointWrites is before the batch's first statement that writes.
	pointWrites firingPoint = iota
	// pointTurn is where the batch, holding firings whose order matters,
	// waits for the batch before it to pass its turn before it writes.
	pointTurn
	// pointAcks is before the batch awaits its publishes'
	// acknowledgements.
	pointAcks
)

// reached calls it.at, when set, at point p of the batch of firings.
func (it *intake) reached(p firingPoint, firings []firing) {
	if it.at != nil {
		it.at(p, firings)
	}
}
