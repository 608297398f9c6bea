package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// liveWorkers is the dispatcher's view of ax-workers: the executors that
// put a heartbeat within the bucket's TTL. A worker whose key is deleted
// (a clean stop) or expires (its limit marker) leaves the view at once;
// one whose last heartbeat is older than the TTL is not live either, in
// case a marker was missed. A worker whose lease lapsed is suspended (see
// [liveWorkers.suspend]): not live until it puts another heartbeat.
type liveWorkers struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	workers   map[string]liveWorker
	suspended map[string]time.Time // since when, by worker id
}

type liveWorker struct {
	schemas.Worker
	seenAt time.Time // when the dispatcher read the heartbeat
}

func newLiveWorkers(now func() time.Time) *liveWorkers {
	return &liveWorkers{now: now, workers: make(map[string]liveWorker), suspended: make(map[string]time.Time)}
}

// isLive reports whether w counts as live now. The caller holds v.mu.
func (v *liveWorkers) isLive(w liveWorker, now time.Time) bool {
	if v.ttl > 0 && now.Sub(w.seenAt) > v.ttl {
		return false
	}
	if since, ok := v.suspended[w.ID]; ok && !w.seenAt.After(since) {
		return false
	}
	return true
}

// suspend takes worker id off the live set until it puts a heartbeat
// after now: its lease lapsed, so it died, hung or lost its connection,
// and no retry may be routed back to it while its key still waits for its
// TTL. It reports whether the worker was live.
func (v *liveWorkers) suspend(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.workers[id]
	now := v.now()
	was := ok && v.isLive(w, now)
	v.suspended[id] = now
	return was
}

// setTTL sets the bucket's TTL: a worker whose heartbeat is older is not
// live; zero keeps every worker listed until its key goes.
func (v *liveWorkers) setTTL(ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ttl = ttl
}

// apply updates the view with one entry of the bucket. It reports whether
// the entry took a worker that was in the view out of it: its key was
// deleted or expired.
func (v *liveWorkers) apply(e jetstream.KeyValueEntry) (left bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, known := v.workers[e.Key()]
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.workers, e.Key())
		delete(v.suspended, e.Key())
		return known, nil
	}
	var w schemas.Worker
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		delete(v.workers, e.Key())
		return known, fmt.Errorf("decode worker %s: %w", e.Key(), err)
	}
	w.ID = e.Key()
	now := v.now()
	if since, ok := v.suspended[w.ID]; ok && now.After(since) {
		delete(v.suspended, w.ID)
	}
	v.workers[e.Key()] = liveWorker{Worker: w, seenAt: now}
	return false, nil
}

// all returns the live workers, by id.
func (v *liveWorkers) all() []schemas.Worker {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []schemas.Worker
	now := v.now()
	for _, w := range v.workers {
		if v.isLive(w, now) {
			out = append(out, w.Worker)
		}
	}
	slices.SortFunc(out, func(a, b schemas.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// live reports whether the worker id is live.
func (v *liveWorkers) live(id string) (schemas.Worker, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.workers[id]
	if !ok || !v.isLive(w, v.now()) {
		return schemas.Worker{}, false
	}
	return w.Worker, true
}

// eligible returns the live workers that serve pool, have handler
// registered, run minVersion or newer and speak version protocol of the
// executor protocol, by id.
func (v *liveWorkers) eligible(pool, handler, minVersion string, protocol int) []schemas.Worker {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []schemas.Worker
	now := v.now()
	for _, w := range v.workers {
		if !v.isLive(w, now) {
			continue
		}
		if eligible(w.Worker, pool, handler, minVersion) && w.Speaks(protocol) {
			out = append(out, w.Worker)
		}
	}
	slices.SortFunc(out, func(a, b schemas.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func eligible(w schemas.Worker, pool, handler, minVersion string) bool {
	return slices.Contains(w.Pools, pool) && slices.Contains(w.Handlers, handler) &&
		schemas.VersionAtLeast(w.Version, minVersion)
}

// Workers returns the workers the dispatcher routes to: those live in
// ax-workers as it last saw them, by id. It is empty until Run is ready.
func (s *Service) Workers() []schemas.Worker {
	return s.workers.all()
}

// watchWorkers starts a watch of ax-workers, fills the view with the
// bucket's current keys and returns a function that keeps it current until
// ctx ends.
func (s *Service) watchWorkers(ctx context.Context, kv jetstream.KeyValue) (func() error, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch bucket %s: %w", kv.Bucket(), err)
	}
	apply := func(e jetstream.KeyValueEntry) {
		left, err := s.workers.apply(e)
		if err != nil {
			s.log.Warn().Err(err).Msg("worker entry ignored")
		}
		if left {
			s.log.Info().Str("worker_id", e.Key()).Str("operation", e.Operation().String()).
				Msg("worker left; routing the work queued for it again")
			s.departed(e.Key())
		}
	}
	// The initial values end with a nil entry.
initial:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch bucket %s: the watch ended", kv.Bucket())
			}
			if e == nil {
				break initial
			}
			apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, ctx.Err()
		}
	}
	return func() error {
		defer func() { _ = w.Stop() }()
		check := time.NewTicker(s.workers.staleCheck())
		defer check.Stop()
		for {
			select {
			case <-check.C:
				s.departStale(ctx, kv.Bucket())
			case e, ok := <-w.Updates():
				if !ok {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("watch bucket %s: the watch ended", kv.Bucket())
				}
				if e != nil {
					apply(e)
				}
			case <-ctx.Done():
				return nil
			}
		}
	}, nil
}
