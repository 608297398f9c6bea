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

// reap watches the leases bucket and fails every attempt whose lease
// expires. An expiry reaches the watcher as a purge marker (the bucket has
// limit markers on), so the reaper waits on events instead of polling. A
// deleted lease (the executor finished) also ages into such a marker later;
// the store's guard makes that a no-op. At start it also sweeps the running
// attempts whose lease vanished while no dispatcher was watching.
func (s *Service) reap(ctx, work context.Context, leases jetstream.KeyValue) error {
	w, err := leases.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", s.top.LeasesBucket(), err)
	}
	defer func() { _ = w.Stop() }()

	pending, err := s.sweepLeases(ctx, leases)
	if err != nil {
		return err
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		if len(pending) > 0 {
			if err := s.expireLeases(work, pending); err != nil {
				s.log.Error().Err(err).Int("leases", len(pending)).Msg("expiring leases failed; trying again")
				retry.Reset(retryDelay)
			} else {
				pending = pending[:0]
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
			continue
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", s.top.LeasesBucket())
			}
			pending = appendExpiry(pending, e, s.now())
		}
	drain:
		for len(pending) < s.opts.BatchSize {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					break drain
				}
				pending = appendExpiry(pending, e, s.now())
			default:
				break drain
			}
		}
	}
}

func appendExpiry(pending []store.LeaseExpiry, e jetstream.KeyValueEntry, now time.Time) []store.LeaseExpiry {
	if e == nil || e.Operation() != jetstream.KeyValuePurge {
		return pending
	}
	id, attempt, ok := streams.ParseLeaseKey(e.Key())
	if !ok {
		return pending
	}
	return append(pending, store.LeaseExpiry{InstanceID: id, Attempt: attempt, At: now})
}

// expireLeases fails the attempts of expired leases and fires the next
// attempt at once for those with attempts left: the worker died, the handler
// did not fail, so there is no reason to back off.
func (s *Service) expireLeases(ctx context.Context, expired []store.LeaseExpiry) error {
	outcomes, err := s.opts.Store.ExpireLeases(ctx, expired)
	if err != nil {
		return err
	}
	batch := streams.NewAsyncBatch(s.js)
	for _, o := range outcomes {
		if o.Applied {
			s.log.Warn().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Str("task", o.Task).
				Str("state", string(o.State)).Msg("lease expired")
		}
		if o.State == schemas.StateRetrying && o.CurrentAttempt == o.Attempt {
			if err := s.scheduleRetry(batch, o, 0); err != nil {
				return err
			}
		}
	}
	return batch.Wait(ctx)
}

// sweepLeases finds running attempts whose lease is gone — expired while no
// dispatcher watched, past the bucket's marker retention.
func (s *Service) sweepLeases(ctx context.Context, leases jetstream.KeyValue) ([]store.LeaseExpiry, error) {
	status, err := leases.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	running, err := s.opts.Store.RunningAttempts(ctx, s.now().Add(-status.TTL()))
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	var gone []store.LeaseExpiry
	for _, r := range running {
		_, err := leases.Get(ctx, streams.LeaseKey(r.InstanceID, r.Attempt))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			gone = append(gone, store.LeaseExpiry{InstanceID: r.InstanceID, Attempt: r.Attempt, At: s.now()})
		case err != nil:
			return nil, fmt.Errorf("sweep leases: %w", err)
		}
	}
	return gone, nil
}
