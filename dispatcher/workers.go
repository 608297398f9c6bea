package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
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
	// grants are the grant keys (streams.GrantKey) by worker id: the pools
	// and handlers its credential lets it serve. A worker serves a pool and
	// a handler only when its heartbeat says so and the grant is live: a
	// heartbeat is the worker's word, a grant key is its credential's (NATS
	// lets it write only its scope's keys). A grant whose key went is
	// remembered for grantMemory, for the reports its worker sent before
	// it left, which the dispatcher may record later.
	grants map[string]map[grant]grantSeen
	pruned time.Time // when grants were last pruned
	// bucket is ax-workers, where grantedHandlers looks up the grant keys
	// the watch has not delivered yet (nil until the watch starts), and
	// lookedUp when it last found none for a worker and pool.
	bucket   jetstream.KeyValue
	lookedUp map[[2]string]time.Time
	// lookups counts the look-ups begun in the second from lookupSecond.
	lookups      int
	lookupSecond time.Time
}

// grant is one pool and handler a worker's credential grants.
type grant struct{ pool, handler string }

// grantSeen is when the dispatcher last read a grant key, and whether and
// when the key went since (deleted, or expired).
type grantSeen struct {
	at, goneAt time.Time
	gone       bool
}

// grantMemory is how long the dispatcher remembers a grant whose key
// went, for the reports on attempts that its worker ran (see
// [liveWorkers.grantedHandlers]).
const grantMemory = time.Hour

// grantLookupTimeout bounds a look-up of a worker's grant keys in the
// bucket, and grantLookupEvery spaces the look-ups that found none for
// one worker and pool: reports that keep naming a worker without grants
// (a forged worker id) cost one look-up a second, not one a batch.
// grantLookupsPerSecond caps the look-ups of all workers together, so that
// reports naming ever new worker ids (a hostile worker's) cannot hold the
// recording of everyone's reports on look-ups: beyond it a report of a
// worker the view has not seen is judged as before the look-ups existed.
const (
	grantLookupTimeout    = 2 * time.Second
	grantLookupEvery      = time.Second
	grantLookupsPerSecond = 20
)

type liveWorker struct {
	schemas.Worker
	seenAt time.Time // when the dispatcher read the heartbeat
}

func newLiveWorkers(now func() time.Time) *liveWorkers {
	return &liveWorkers{now: now, workers: make(map[string]liveWorker), suspended: make(map[string]time.Time),
		grants: make(map[string]map[grant]grantSeen), lookedUp: make(map[[2]string]time.Time)}
}

// granted reports whether worker id's credential grants it handler in
// pool: its grant key is there and younger than the bucket's TTL. The
// caller holds v.mu.
func (v *liveWorkers) granted(id, pool, handler string, now time.Time) bool {
	g, ok := v.grants[id][grant{pool, handler}]
	return ok && !g.gone && (v.ttl <= 0 || now.Sub(g.at) <= v.ttl)
}

// verified returns w as far as its credential backs it: the pools and
// handlers of its heartbeat that a grant key pairs (a pool with none of
// its handlers granted is left out, and a handler granted in none of its
// pools). The caller holds v.mu.
func (v *liveWorkers) verified(w schemas.Worker, now time.Time) schemas.Worker {
	pools, handlers := make([]string, 0, len(w.Pools)), make([]string, 0, len(w.Handlers))
	for _, p := range w.Pools {
		if slices.ContainsFunc(w.Handlers, func(h string) bool { return v.granted(w.ID, p, h, now) }) {
			pools = append(pools, p)
		}
	}
	for _, h := range w.Handlers {
		if slices.ContainsFunc(w.Pools, func(p string) bool { return v.granted(w.ID, p, h, now) }) {
			handlers = append(handlers, h)
		}
	}
	w.Pools, w.Handlers = pools, handlers
	return w
}

// grantedHandlers returns the handlers that worker id's credential grants
// it in pool, as its grant keys show them, or showed them up to
// grantMemory before they went; nil for none. A report is judged by them:
// its worker may have stopped (and its keys gone) before the report is
// recorded. When the view holds none, the bucket is asked (see
// lookupGrants): a worker writes its grant keys before its first
// heartbeat, but its first reports can reach a busy dispatcher before the
// watch delivers the keys. A dispatcher that starts later than a bucket
// TTL after a worker's last heartbeat never saw its grants, and refuses
// its reports on attempts no worker holds yet (an attempt whose started
// report was recorded is held, and judged by that).
func (v *liveWorkers) grantedHandlers(ctx context.Context, id, pool string) []string {
	if out := v.seenGrants(id, pool); out != nil {
		return out
	}
	return v.lookupGrants(ctx, id, pool)
}

// seenGrants is grantedHandlers as far as the view shows.
func (v *liveWorkers) seenGrants(id, pool string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	now := v.now()
	for g, seen := range v.grants[id] {
		if g.pool == pool && (!seen.gone || now.Sub(seen.goneAt) <= grantMemory) {
			out = append(out, g.handler)
		}
	}
	slices.Sort(out)
	return out
}

// lookupGrants reads worker id's grant keys in pool from the bucket, adds
// them to the view and returns their handlers; nil when there are none,
// when the bucket is not known yet, when it was asked in vain less than
// grantLookupEvery ago, when grantLookupsPerSecond look-ups began in the
// last second, or when it does not answer in time. Refused, the
// success of a worker's first, quick attempt was lost and the attempt ran
// again (ax drill system cron-no-executors, at load 10).
func (v *liveWorkers) lookupGrants(ctx context.Context, id, pool string) []string {
	v.mu.Lock()
	bucket := v.bucket
	ok := bucket != nil && v.mayLookUp(id, pool)
	v.mu.Unlock()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, grantLookupTimeout)
	defer cancel()
	var handlers []string
	keys, err := bucket.ListKeysFiltered(ctx, streams.GrantKey(id, pool, ">"))
	if err == nil {
		for k := range keys.Keys() {
			if _, _, h, ok := streams.ParseGrantKey(k); ok {
				handlers = append(handlers, h)
			}
		}
		err = ctx.Err() // the keys end early when ctx does
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if err != nil || len(handlers) == 0 {
		if len(v.lookedUp) >= 1024 {
			maps.DeleteFunc(v.lookedUp, func(_ [2]string, at time.Time) bool { return now.Sub(at) >= grantLookupEvery })
		}
		v.lookedUp[[2]string{id, pool}] = now
		return nil
	}
	delete(v.lookedUp, [2]string{id, pool})
	if v.grants[id] == nil {
		v.grants[id] = make(map[grant]grantSeen)
	}
	for _, h := range handlers {
		v.grants[id][grant{pool, h}] = grantSeen{at: now}
	}
	slices.Sort(handlers)
	return slices.Compact(handlers)
}

// mayLookUp reports whether lookupGrants may ask the bucket about worker
// id in pool now, and counts the look-up if so. The caller holds v.mu.
func (v *liveWorkers) mayLookUp(id, pool string) bool {
	now := v.now()
	if now.Sub(v.lookedUp[[2]string{id, pool}]) < grantLookupEvery {
		return false
	}
	if now.Sub(v.lookupSecond) >= time.Second {
		v.lookupSecond, v.lookups = now, 0
	}
	if v.lookups >= grantLookupsPerSecond {
		return false
	}
	v.lookups++
	return true
}

// pruneGrants forgets the grants whose keys went more than grantMemory
// ago, at most once per grantMemory. The caller holds v.mu.
func (v *liveWorkers) pruneGrants(now time.Time) {
	if now.Sub(v.pruned) < grantMemory {
		return
	}
	v.pruned = now
	for id, grants := range v.grants {
		for g, seen := range grants {
			if seen.gone && now.Sub(seen.goneAt) > grantMemory {
				delete(grants, g)
			}
		}
		if len(grants) == 0 {
			delete(v.grants, id)
		}
	}
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

// setBucket sets the bucket the view watches, where lookupGrants reads.
func (v *liveWorkers) setBucket(kv jetstream.KeyValue) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.bucket = kv
}

// apply updates the view with one entry of the bucket. It reports whether
// the entry took a worker that was in the view out of it: its key was
// deleted or expired.
func (v *liveWorkers) apply(e jetstream.KeyValueEntry) (left bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if id, pool, handler, ok := streams.ParseGrantKey(e.Key()); ok {
		g, now := grant{pool, handler}, v.now()
		v.pruneGrants(now)
		if e.Operation() != jetstream.KeyValuePut {
			if seen, ok := v.grants[id][g]; ok && !seen.gone {
				seen.gone, seen.goneAt = true, now
				v.grants[id][g] = seen
			}
			return false, nil
		}
		if v.grants[id] == nil {
			v.grants[id] = make(map[grant]grantSeen)
		}
		v.grants[id][g] = grantSeen{at: now}
		return false, nil
	}
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
			out = append(out, v.verified(w.Worker, now))
		}
	}
	slices.SortFunc(out, func(a, b schemas.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// live reports whether the worker id is live, with the pools and
// handlers its credential backs (see [liveWorkers.verified]).
func (v *liveWorkers) live(id string) (schemas.Worker, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.workers[id]
	now := v.now()
	if !ok || !v.isLive(w, now) {
		return schemas.Worker{}, false
	}
	return v.verified(w.Worker, now), true
}

// eligible returns the live workers that serve pool, have handler
// registered, both granted by their credential (a grant key), run
// minVersion or newer and speak version protocol of the executor
// protocol, by id.
func (v *liveWorkers) eligible(pool, handler, minVersion string, protocol int) []schemas.Worker {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []schemas.Worker
	now := v.now()
	for _, w := range v.workers {
		if !v.isLive(w, now) {
			continue
		}
		if w.Speaks(protocol) && v.servedPool(w.Worker, pool, handler, minVersion, now) != "" {
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
	s.workers.setBucket(kv)
	refused := map[string]int{}
	apply := func(e jetstream.KeyValueEntry) {
		s.refuseUnservable(e, refused)
		left, err := s.workers.apply(e)
		if err != nil {
			s.log.Warn().Err(err).Msg("worker entry ignored")
		}
		if left {
			s.log.Info().Str("worker_id", e.Key()).Str("operation", e.Operation().String()).
				Msg("worker left; routing the work queued for it again")
			s.router.departed(e.Key())
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
				s.reaper.departStale(ctx, kv.Bucket())
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
