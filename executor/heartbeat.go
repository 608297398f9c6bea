package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// heartbeat puts the worker in ax-workers every HeartbeatInterval until ctx ends.
func (s *Service) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(s.opts.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := s.putWorker(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("heartbeat")
			}
		}
	}
}

// putWorker puts the worker's current record in ax-workers.
func (s *Service) putWorker(ctx context.Context) error {
	w := schemas.Worker{
		ID:          s.opts.WorkerID,
		Hostname:    s.hostname,
		Version:     s.opts.Version,
		Pools:       s.opts.Pools,
		Handlers:    s.opts.Mux.Names(),
		Slots:       s.opts.Slots,
		Busy:        s.Busy(),
		StartedAt:   s.startedAt,
		HeartbeatAt: s.opts.NowFunc(),
		Protocol:    schemas.ExecutorProtocol,
	}
	data, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode worker %s: %w", w.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.workers.Put(ctx, w.ID, data); err != nil {
		return fmt.Errorf("put worker %s in %s: %w", w.ID, s.opts.Topology.WorkersBucket(), err)
	}
	return nil
}

// deleteWorker takes the worker off ax-workers.
func (s *Service) deleteWorker() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.workers.Delete(ctx, s.opts.WorkerID); err != nil {
		s.log.Warn().Err(err).Msg("delete worker from the list; it drops off when its TTL passes")
	}
}
