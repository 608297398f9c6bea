package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
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
				s.log.Warn("heartbeat", "error", err)
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
	// The grant keys first, on the same connection: the server stores
	// them before the heartbeat, so the dispatcher never reads a
	// heartbeat of this round without its grants.
	if err := s.putGrants(nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.workers.Put(ctx, w.ID, data); err != nil {
		return fmt.Errorf("put worker %s in %s: %w", w.ID, s.opts.Topology.WorkersBucket(), err)
	}
	return nil
}

// putGrants writes (or, with hdr, deletes) the worker's grant keys in
// ax-workers, one per pool and handler it serves (streams.GrantKey): the
// dispatcher routes to a worker only the pools and handlers whose keys are
// there, and NATS lets a credential write only the keys of what it
// grants. They are plain publishes, renewed with every heartbeat so that
// the bucket's TTL keeps them only while the worker lives; a key the
// credential does not grant is refused by the server (and that handler's
// consumers could not be made either).
func (s *Service) putGrants(hdr nats.Header) error {
	for _, pool := range s.opts.Pools {
		for _, h := range s.opts.Mux.Names() {
			subject := s.opts.Topology.GrantSubject(s.opts.WorkerID, pool, h)
			if err := s.opts.Conn.PublishMsg(&nats.Msg{Subject: subject, Header: hdr}); err != nil {
				return fmt.Errorf("put grant %s in %s: %w", streams.GrantKey(s.opts.WorkerID, pool, h), s.opts.Topology.WorkersBucket(), err)
			}
		}
	}
	return nil
}

// deleteWorker takes the worker and its grant keys off ax-workers.
func (s *Service) deleteWorker() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.putGrants(nats.Header{"KV-Operation": []string{"DEL"}}); err != nil {
		s.log.Warn("delete grant keys from the list; they drop off when their TTL passes", "error", err)
	}
	if err := s.workers.Delete(ctx, s.opts.WorkerID); err != nil {
		s.log.Warn("delete worker from the list; it drops off when its TTL passes", "error", err)
	}
}
