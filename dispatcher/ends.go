package dispatcher

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// afterEnds acts on instances that ended, after their ends were committed:
// it ends the parents of sharded and broadcast firings whose children have
// all ended (see [store.Store.EndParents]), adds to batch the firings of
// the tasks chained after them, and starts the WAITING instances of their
// tasks that a freed slot of max_running_instances lets run, adding those
// attempts to batch too (and to the pools whose doorbell publishAttempts
// rings), and pokes the limiter when instances wait for named limits. What
// is due is found in one round trip ([store.Store.DueAfterEnds]). Both are
// idempotent, so a batch retried after a crash does no harm.
func (s *Service) afterEnds(ctx context.Context, batch *streams.AsyncBatch, ended []store.RunEnd) ([]store.Attempt, error) {
	if len(ended) == 0 {
		return nil, nil
	}
	// A shard's end may end its parent, whose end counts as any other's;
	// the ends of instances known to be no shards are left out (a burst
	// of plain instances then costs no statement here).
	var runs []string
	for _, e := range ended {
		if !e.NoParent {
			runs = append(runs, e.RunID)
		}
	}
	parents, err := s.opts.Store.EndParents(ctx, runs)
	if err != nil {
		return nil, err
	}
	ended = append(ended, parents...)
	due, err := s.opts.Store.DueAfterEnds(ctx, ended)
	if err != nil {
		return nil, err
	}
	for _, f := range due.Firings {
		if err := s.addChainFiring(batch, f); err != nil {
			return nil, err
		}
	}
	if due.Limited {
		s.limiter.poke() // a slot of a named limit may have freed
	}
	return s.opts.Store.StartWaiting(ctx, due.Waiting)
}

// stopVictims tells the workers of cancelled instances that were running to
// stop them, and returns the victims' ends.
func (s *Service) stopVictims(victims []store.Victim) []store.RunEnd {
	ends := make([]store.RunEnd, len(victims))
	for i, v := range victims {
		ends[i] = store.RunEnd{Task: v.Task, RunID: v.RunID}
		if v.WasRunning {
			s.cancelAttempt(v.WorkerID, store.Outcome{InstanceID: v.InstanceID, Attempt: v.Attempt}, "the instance was cancelled")
		}
	}
	return ends
}

// limited returns a task's concurrency limit and strategy, or 0 when its
// instances may run without limit.
func limited(def *schemas.Task) (int, schemas.BlockingStrategy) {
	n := def.Concurrency.MaxRunningInstances
	if n <= 0 {
		return 0, ""
	}
	strategy := def.Concurrency.BlockingStrategy
	if strategy == "" {
		strategy = schemas.DefaultBlockingStrategy
	}
	return n, strategy
}

// retryAfter fires the next attempt of o after wait: at once (wait ≤ 0),
// by a message schedule, or, when hold, published now with its run_at
// wait ahead, which the dispatcher that takes it holds in memory until
// then (precise to the millisecond, where a schedule fires 0–250 ms late;
// for waits within holdWindow only).
func (s *Service) retryAfter(batch *streams.AsyncBatch, o store.Outcome, wait time.Duration, hold bool) error {
	next := o.Attempt + 1
	eventID := retryEventID(o.InstanceID, next)
	ev := schemas.TriggerEvent{
		EventID: eventID,
		Task:    o.Task,
		Source:  schemas.SourceRetry,
		FiredAt: s.now().Add(wait),
		Retry:   &schemas.RetryOf{InstanceID: o.InstanceID, Attempt: next},
	}
	if hold && wait > 0 && wait < holdWindow {
		ev.RunAt = ev.FiredAt
	}
	if wait <= 0 || !ev.RunAt.IsZero() {
		msg, err := streams.NewMsg(s.top.AXTrigger(o.Task), streams.TriggerMsgID(o.Task, eventID), ev)
		if err != nil {
			return err
		}
		batch.Add(msg)
		return nil
	}
	msg, err := streams.NewScheduleMsg(s.top.Sched(eventID), s.top.AXTrigger(o.Task), streams.TriggerMsgID(o.Task, eventID), ev.FiredAt, ev)
	if err != nil {
		return err
	}
	batch.Add(msg)
	return nil
}

// retryEventID is the event id of the firing of attempt of an instance,
// a retry: retry-<instance>-<attempt>.
func retryEventID(instanceID int64, attempt int) string {
	return schemas.RetryEventIDPrefix + strconv.FormatInt(instanceID, 10) + "-" + strconv.Itoa(attempt)
}

// cancelAttempt tells a worker to stop an attempt (core NATS: if the worker
// is gone there is nothing to stop).
func (s *Service) cancelAttempt(workerID string, o store.Outcome, reason string) {
	if workerID == "" {
		return
	}
	data, err := json.Marshal(schemas.Control{
		Action: schemas.ControlCancel, InstanceID: o.InstanceID, Attempt: o.Attempt, Reason: reason,
	})
	if err != nil {
		return
	}
	if err := s.opts.Conn.Publish(s.top.Control(workerID), data); err != nil {
		s.log.Warn().Err(err).Str("worker_id", workerID).Int64("instance_id", o.InstanceID).Msg("cancel not sent")
	}
}

// newBatch starts a batch of asynchronous publishes.
func (s *Service) newBatch() *streams.AsyncBatch { return s.pub.Batch() }
