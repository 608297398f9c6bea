package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// registration is the worker's entry in ax-workers: its record, put every
// HeartbeatInterval, and its grant keys, put before each record. Its
// inputs are the options and how many slots are busy; it knows nothing of
// attempts.
type registration struct {
	o        Options
	hostname string
	busy     func() int // the worker's busy slots (Service.Busy)
	log      *slog.Logger

	// Set by the worker's start, before the first put.
	kv        jetstream.KeyValue
	startedAt time.Time
}

// heartbeat puts the worker in ax-workers every HeartbeatInterval until ctx ends.
func (r *registration) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(r.o.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := r.put(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("heartbeat", "error", err)
			}
		}
	}
}

// put puts the worker's current record in ax-workers.
func (r *registration) put(ctx context.Context) error {
	w := schemas.Worker{
		ID:          r.o.WorkerID,
		Hostname:    r.hostname,
		Version:     r.o.Version,
		Pools:       r.o.Pools,
		Handlers:    r.o.Mux.Names(),
		Slots:       r.o.Slots,
		Busy:        r.busy(),
		StartedAt:   r.startedAt,
		HeartbeatAt: r.o.NowFunc(),
		Protocol:    schemas.ExecutorProtocol,
	}
	data, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode worker %s: %w", w.ID, err)
	}
	// The grant keys first, on the same connection: the server stores
	// them before the heartbeat, so the dispatcher never reads a
	// heartbeat of this round without its grants.
	if err := r.putGrants(nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := r.kv.Put(ctx, w.ID, data); err != nil {
		return fmt.Errorf("put worker %s in %s: %w", w.ID, r.o.Topology.WorkersBucket(), err)
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
func (r *registration) putGrants(hdr nats.Header) error {
	for _, pool := range r.o.Pools {
		for _, h := range r.o.Mux.Names() {
			subject := r.o.Topology.GrantSubject(r.o.WorkerID, pool, h)
			if err := r.o.Conn.PublishMsg(&nats.Msg{Subject: subject, Header: hdr}); err != nil {
				return fmt.Errorf("put grant %s in %s: %w", streams.GrantKey(r.o.WorkerID, pool, h), r.o.Topology.WorkersBucket(), err)
			}
		}
	}
	return nil
}

// delete takes the worker and its grant keys off ax-workers.
func (r *registration) delete() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := r.putGrants(nats.Header{"KV-Operation": []string{"DEL"}}); err != nil {
		r.log.Warn("delete grant keys from the list; they drop off when their TTL passes", "error", err)
	}
	if err := r.kv.Delete(ctx, r.o.WorkerID); err != nil {
		r.log.Warn("delete worker from the list; it drops off when its TTL passes", "error", err)
	}
}
