package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// leaseLost is the reason recorded on an attempt whose lease expired.
const leaseLost = "lease expired: the worker stopped renewing it (it died, hung or lost its connection)"

// reap fails the attempts whose worker is gone or that outlived their timeout.
//
// Lost workers: the reaper watches the leases bucket, where an expiry reaches
// the watcher as a purge marker (the bucket has limit markers on), so it waits
// on events instead of polling. A deleted lease (the executor finished) also
// ages into such a marker later; the store's guard makes that a no-op. At
// start it also sweeps the running attempts whose lease vanished while no
// dispatcher was watching.
//
// Timeouts: the executor ends a handler's context at its deadline and reports
// the failure itself. An attempt still RUNNING TimeoutGrace after its
// deadline is one whose executor did not (it hangs but renews its lease): once
// a TimeoutCheck the reaper looks for such attempts with one indexed query,
// fails them and tells their worker to stop, so the old run cannot go on
// beside a retry.
func (s *Service) reap(ctx, work context.Context, leases jetstream.KeyValue) error {
	w, err := leases.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", s.top.LeasesBucket(), err)
	}
	defer func() { _ = w.Stop() }()

	lost, err := s.sweepLeases(ctx, leases)
	if err != nil {
		return err
	}
	if err := s.promoteLeftovers(work); err != nil {
		return err
	}
	timeouts := time.NewTicker(s.opts.TimeoutCheck)
	defer timeouts.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		if len(lost) > 0 {
			if err := s.failAttempts(work, lost, nil, "lease expired"); err != nil {
				s.log.Error().Err(err).Int("leases", len(lost)).Msg("expiring leases failed; trying again")
				retry.Reset(retryDelay)
			} else {
				lost = lost[:0]
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
			continue
		case <-timeouts.C:
			if err := s.failOverdue(work); err != nil {
				s.log.Error().Err(err).Msg("failing overdue attempts failed; trying again")
			}
			continue
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", s.top.LeasesBucket())
			}
			lost = s.appendExpiry(lost, e)
		}
	drain:
		for len(lost) < s.opts.BatchSize {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					break drain
				}
				lost = s.appendExpiry(lost, e)
			default:
				break drain
			}
		}
	}
}

func (s *Service) appendExpiry(lost []store.Failure, e jetstream.KeyValueEntry) []store.Failure {
	if e == nil || e.Operation() != jetstream.KeyValuePurge {
		return lost
	}
	id, attempt, ok := streams.ParseLeaseKey(e.Key())
	if !ok {
		return lost
	}
	return append(lost, store.Failure{InstanceID: id, Attempt: attempt, Reason: leaseLost, At: s.now()})
}

// failOverdue fails the attempts that outlived their timeout and tells their
// workers to stop them.
func (s *Service) failOverdue(ctx context.Context) error {
	overdue, err := s.opts.Store.OverdueAttempts(ctx, s.opts.TimeoutGrace)
	if err != nil || len(overdue) == 0 {
		return err
	}
	failures := make([]store.Failure, len(overdue))
	workers := make(map[[2]int64]string, len(overdue))
	for i, o := range overdue {
		failures[i] = store.Failure{InstanceID: o.InstanceID, Attempt: o.Attempt, At: s.now(),
			Reason: fmt.Sprintf("timeout: the attempt outlived its timeout of %v and its executor did not stop it", o.Timeout)}
		workers[[2]int64{o.InstanceID, int64(o.Attempt)}] = o.WorkerID
	}
	return s.failAttempts(ctx, failures, workers, "timeout")
}

// failAttempts fails attempts as the reaper, fires the next attempt of
// those with attempts left and the tasks chained after those that ended. A lost worker's next attempt starts at once —
// the handler did not fail, so there is no reason to back off — while an
// overdue one waits by the task's backoff. workers, when set, names the
// worker of each attempt to tell to stop; cause is why, in a word.
func (s *Service) failAttempts(ctx context.Context, failures []store.Failure, workers map[[2]int64]string, cause string) error {
	outcomes, err := s.opts.Store.FailAttempts(ctx, failures)
	if err != nil {
		return err
	}
	batch := streams.NewAsyncBatch(s.js)
	var ended []store.RunEnd
	for _, o := range outcomes {
		if e, ok := outcomeEnd(o); ok {
			ended = append(ended, e)
		}
		if o.Applied {
			s.log.Warn().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Str("task", o.Task).
				Str("state", string(o.State)).Str("cause", cause).Msg("attempt failed by the reaper")
			if w := workers[[2]int64{o.InstanceID, int64(o.Attempt)}]; w != "" {
				s.cancelAttempt(w, o, cause)
			}
		}
		if o.State == schemas.StateRetrying && o.CurrentAttempt == o.Attempt {
			var wait time.Duration
			if workers != nil {
				wait = backoff(o.RetryPolicy, o.Attempt, s.opts.RandFunc)
			}
			if err := s.scheduleRetry(batch, o, wait); err != nil {
				return err
			}
		}
	}
	promoted, err := s.afterEnds(ctx, batch, ended)
	if err != nil {
		return err
	}
	return s.publishAttempts(ctx, batch, promoted)
}

// promoteLeftovers starts the waiting instances that a slot freed for while
// no dispatcher ran (or whose promotion a crash lost).
func (s *Service) promoteLeftovers(ctx context.Context) error {
	tasks, err := s.opts.Store.WaitingTasks(ctx)
	if err != nil || len(tasks) == 0 {
		return err
	}
	promoted, err := s.opts.Store.PromoteWaiting(ctx, tasks)
	if err != nil {
		return err
	}
	return s.publishAttempts(ctx, streams.NewAsyncBatch(s.js), promoted)
}

// sweepLeases finds running attempts whose lease is gone — expired while no
// dispatcher watched, past the bucket's marker retention.
func (s *Service) sweepLeases(ctx context.Context, leases jetstream.KeyValue) ([]store.Failure, error) {
	status, err := leases.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	running, err := s.opts.Store.RunningAttempts(ctx, s.now().Add(-status.TTL()))
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	var gone []store.Failure
	for _, r := range running {
		_, err := leases.Get(ctx, streams.LeaseKey(r.InstanceID, r.Attempt))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			gone = append(gone, store.Failure{InstanceID: r.InstanceID, Attempt: r.Attempt, Reason: leaseLost, At: s.now()})
		case err != nil:
			return nil, fmt.Errorf("sweep leases: %w", err)
		}
	}
	return gone, nil
}
