package dispatcher

import (
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// An instance's pool is one pool, or a set of pools any of which may run
// it ("data-node-a|data-node-b", a task's dispatch.tags; see
// [schemas.DispatchPolicy.Pool]). A set has no queue of its own: a
// work-queue stream refuses two consumers over one subject, so one
// message cannot wait where the workers of two pools pull, and a copy on
// each pool's queue would run twice. An attempt of a set goes to the own
// subject of a live worker that serves one of its pools (the least busy,
// or for "hash" the one that wins the key), and its dispatch message names
// that pool: the worker reports on its own pool's subjects, which its
// credential allows, and the store takes a report from any pool of the
// set (store's holderCheck).

// anyPool reports whether pool is a set of pools.
func anyPool(pool string) bool { return strings.Contains(pool, schemas.PoolSep) }

// servedPool returns the first pool of pool (one, or a set) in which w
// may take an attempt of handler: it serves the pool and has the handler,
// both granted by its credential, and runs minVersion or newer; "" for
// none. The caller holds v.mu.
func (v *liveWorkers) servedPool(w schemas.Worker, pool, handler, minVersion string, now time.Time) string {
	for _, p := range schemas.PoolMembers(pool) {
		if eligible(w, p, handler, minVersion) && v.granted(w.ID, p, handler, now) {
			return p
		}
	}
	return ""
}

// takes returns the pool of pool in which the live worker id may take an
// attempt of handler now (see servedPool); "" when it is not live or may
// not.
func (v *liveWorkers) takes(id, pool, handler, minVersion string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.workers[id]
	now := v.now()
	if !ok || !v.isLive(w, now) {
		return ""
	}
	return v.servedPool(w.Worker, pool, handler, minVersion, now)
}

// poolTo returns the pool that an attempt of a's sent to worker id names:
// a's pool, or for a set the pool the worker takes it in (the set's first
// pool for a worker not live now, which a pinned attempt waits for).
func (rt *router) poolTo(id string, a poolAttempt) string {
	if !anyPool(a.pool) {
		return ""
	}
	if p := rt.workers.takes(id, a.pool, a.handler, a.minVersion); p != "" {
		return p
	}
	return schemas.PoolMembers(a.pool)[0]
}

// poolAttempt is what poolTo needs of an attempt.
type poolAttempt struct{ pool, handler, minVersion string }

// repool returns the dispatch message data of a rerouted attempt, d
// encoded as data, naming the pool route r takes it in.
func repool(data []byte, d schemas.Dispatch, r route) ([]byte, error) {
	if r.pool == "" || r.pool == d.Pool {
		return data, nil
	}
	d.Pool = r.pool
	return schemas.MarshalDispatch(d)
}

// poolOr returns the pool the dispatch message of route r names: r.pool,
// or for an instance of one pool, pool.
func (r route) poolOr(pool string) string {
	if r.pool != "" {
		return r.pool
	}
	return pool
}
