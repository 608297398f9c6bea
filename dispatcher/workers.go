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
// case a marker was missed.
type liveWorkers struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	workers map[string]liveWorker
}

type liveWorker struct {
	schemas.Worker
	seenAt time.Time // when the dispatcher read the heartbeat
}

func newLiveWorkers(now func() time.Time) *liveWorkers {
	return &liveWorkers{now: now, workers: make(map[string]liveWorker)}
}

// setTTL sets the bucket's TTL: a worker whose heartbeat is older is not
// live; zero keeps every worker listed until its key goes.
func (v *liveWorkers) setTTL(ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ttl = ttl
}

// apply updates the view with one entry of the bucket.
func (v *liveWorkers) apply(e jetstream.KeyValueEntry) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.workers, e.Key())
		return nil
	}
	var w schemas.Worker
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		delete(v.workers, e.Key())
		return fmt.Errorf("decode worker %s: %w", e.Key(), err)
	}
	w.ID = e.Key()
	v.workers[e.Key()] = liveWorker{Worker: w, seenAt: v.now()}
	return nil
}

// all returns the live workers, by id.
func (v *liveWorkers) all() []schemas.Worker {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []schemas.Worker
	now := v.now()
	for _, w := range v.workers {
		if v.ttl <= 0 || now.Sub(w.seenAt) <= v.ttl {
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
	if !ok || (v.ttl > 0 && v.now().Sub(w.seenAt) > v.ttl) {
		return schemas.Worker{}, false
	}
	return w.Worker, true
}

// eligible returns the live workers that serve pool, have handler
// registered and run minVersion or newer, by id.
func (v *liveWorkers) eligible(pool, handler, minVersion string) []schemas.Worker {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []schemas.Worker
	now := v.now()
	for _, w := range v.workers {
		if v.ttl > 0 && now.Sub(w.seenAt) > v.ttl {
			continue
		}
		if eligible(w.Worker, pool, handler, minVersion) {
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
		if err := s.workers.apply(e); err != nil {
			s.log.Warn().Err(err).Msg("worker entry ignored")
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
		for {
			select {
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
