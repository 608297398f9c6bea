package dispatcher

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// firing is one trigger message and what it asks for.
type firing struct {
	msg   jetstream.Msg
	task  string
	event schemas.TriggerEvent
	// problem is why the message cannot fire its task as it is; such a
	// firing makes a SKIPPED instance with the problem as reason.
	problem string
}

// handleTriggers turns a batch of trigger messages into instances and
// attempts: one statement creates the new instances, one starts the retries,
// then every attempt is published and the acknowledgements awaited together
// before the trigger messages are acknowledged.
func (s *Service) handleTriggers(ctx context.Context, msgs []jetstream.Msg) {
	var (
		firings []firing
		retries []store.RetryStart
		names   []string
	)
	seen := make(map[string]bool)
	for _, m := range msgs {
		f, ok := s.readFiring(m)
		if !ok {
			continue
		}
		if f.event.Retry != nil {
			retries = append(retries, store.RetryStart{InstanceID: f.event.Retry.InstanceID, Attempt: f.event.Retry.Attempt})
			continue
		}
		firings = append(firings, f)
		if !seen[f.task] {
			seen[f.task] = true
			names = append(names, f.task)
		}
	}

	tasks, err := s.opts.Store.GetTasks(ctx, names)
	if err != nil {
		s.retryLater(msgs, err)
		return
	}
	var create []store.NewInstance
	unique := make(map[[2]string]bool)
	for _, f := range firings {
		rec, ok := tasks[f.task]
		if !ok {
			// Without a task there is no instance to record the firing on.
			s.log.Warn().Str("task", f.task).Str("event_id", f.event.EventID).
				Msg("firing of an unknown task dropped; apply the task first")
			continue
		}
		key := [2]string{f.task, f.event.EventID}
		if unique[key] {
			continue
		}
		unique[key] = true
		create = append(create, s.newInstance(f, rec))
	}

	attempts, err := s.opts.Store.CreateInstances(ctx, create)
	if err != nil {
		s.retryLater(msgs, err)
		return
	}
	retried, err := s.opts.Store.StartRetries(ctx, retries)
	if err != nil {
		s.retryLater(msgs, err)
		return
	}
	if err := s.publishAttempts(ctx, append(attempts, retried...)); err != nil {
		s.retryLater(msgs, err)
		return
	}
	for _, m := range msgs {
		_ = m.Ack()
	}
}

// readFiring decodes a trigger message. A message that names no task is
// terminated; one whose body is malformed still fires, as a SKIPPED instance
// that says what was wrong, so the sender can see it.
func (s *Service) readFiring(m jetstream.Msg) (firing, bool) {
	task, ok := s.top.TriggerTask(m.Subject())
	if !ok || task == "" {
		s.log.Warn().Str("subject", m.Subject()).Msg("trigger on an unexpected subject dropped")
		_ = m.Term()
		return firing{}, false
	}
	f := firing{msg: m, task: task}
	ev, err := schemas.ParseTriggerEvent(m.Data())
	if err != nil {
		f.problem = fmt.Sprintf("malformed trigger event: %v", err)
	} else if ev.Task != "" && ev.Task != task {
		f.problem = fmt.Sprintf("trigger event names task %q but was published to %s", ev.Task, m.Subject())
	}
	if f.problem == "" {
		f.event = ev
	} else {
		f.event = schemas.TriggerEvent{}
	}
	if f.event.EventID == "" {
		f.event.EventID = m.Headers().Get(streams.HeaderMsgID)
	}
	if f.event.EventID == "" {
		meta, err := m.Metadata()
		if err != nil {
			s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("trigger without metadata dropped")
			_ = m.Term()
			return firing{}, false
		}
		f.event.EventID = "seq-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	if f.event.Source == "" {
		f.event.Source = schemas.SourceEvent
	}
	if f.event.FiredAt.IsZero() {
		f.event.FiredAt = s.now()
	}
	return f, true
}

// newInstance fills an instance from a firing and its task's current version.
func (s *Service) newInstance(f firing, rec store.TaskRecord) store.NewInstance {
	def := rec.Definition.WithDefaults()
	ev := f.event
	in := store.NewInstance{
		Task:        f.task,
		TaskVersion: rec.Version,
		EventID:     ev.EventID,
		Source:      ev.Source,
		Operator:    ev.Operator,
		Priority:    def.Priority,
		Pool:        def.Dispatch.Pool(),
		Handler:     def.Execution.Handler,
		TimeoutMS:   def.TimeoutDuration().Milliseconds(),
		MaxAttempts: def.Execution.Retry.MaxAttempts,
		RetryPolicy: def.Execution.Retry,
		Payload:     ev.Payload,
		FiredAt:     ev.FiredAt,
		State:       schemas.StateDispatched,
	}
	if ev.Priority != "" {
		in.Priority = ev.Priority
	}
	version := max(ev.PayloadVersion, schemas.DefaultSchemaVersion)
	switch {
	case f.problem != "":
		in.State, in.Reason = schemas.StateSkipped, f.problem
	case !rec.Enabled:
		in.State, in.Reason = schemas.StateSkipped, "task is disabled"
	case version != def.SchemaVersion:
		in.State, in.Reason = schemas.StateSkipped, fmt.Sprintf(
			"payload_version %d does not match the task's schema_version %d", version, def.SchemaVersion)
	}
	return in
}

// publishAttempts publishes every DISPATCHED attempt to its pool and awaits
// the acknowledgements together, then rings each pool's doorbell once.
// Re-publishing an attempt is harmless: its message id dedupes it.
func (s *Service) publishAttempts(ctx context.Context, attempts []store.Attempt) error {
	batch := streams.NewAsyncBatch(s.js)
	pools := make(map[string]bool)
	for _, a := range attempts {
		if a.State != schemas.StateDispatched {
			continue
		}
		d := schemas.Dispatch{
			InstanceID:   a.ID,
			Task:         a.Task,
			TaskVersion:  a.TaskVersion,
			Handler:      a.Handler,
			Attempt:      a.Attempt,
			MaxAttempts:  a.MaxAttempts,
			EventID:      a.EventID,
			Priority:     a.Priority,
			Payload:      a.Payload,
			TimeoutMS:    a.TimeoutMS,
			FiredAt:      a.FiredAt,
			DispatchedAt: a.DispatchedAt,
		}
		m, err := streams.NewMsg(s.top.Dispatch(a.Pool, a.Priority), dispatchMsgID(a.ID, a.Attempt), d)
		if err != nil {
			return err
		}
		batch.Add(m)
		pools[a.Pool] = true
	}
	n := batch.Len()
	if err := batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts: %w", n, err)
	}
	for pool := range pools {
		// The doorbell is a hint: an idle executor that misses it polls anyway.
		_ = s.opts.Conn.Publish(s.top.Ready(pool), nil)
	}
	return nil
}

func dispatchMsgID(id int64, attempt int) string {
	return strconv.FormatInt(id, 10) + "-" + strconv.Itoa(attempt)
}

// retryLater returns a batch to JetStream for redelivery after a short
// delay: every step of it is idempotent, so the next try completes it.
func (s *Service) retryLater(msgs []jetstream.Msg, err error) {
	s.log.Error().Err(err).Int("messages", len(msgs)).Msg("batch failed; redelivering it")
	for _, m := range msgs {
		_ = m.NakWithDelay(retryDelay)
	}
}
