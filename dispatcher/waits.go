package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Wait reasons (issue 27): an attempt that cannot reach a worker says why
// on its instance, and the dispatcher logs the reason once per change, not
// on every reroute. The tracker remembers the reason last recorded for each
// instance that waits, so a reroute every rerouteDelay with the same reason
// writes and logs nothing; an attempt that routes after waiting clears its
// row. Instances that route at once never touch the tracker's store side:
// the hot path pays one map lookup per attempt.

// waitForget is how long the tracker keeps a reason that was not seen
// again: a reroute comes back every rerouteDelay, so an older note is of
// an instance that stopped waiting (cancelled, taken from its queue).
const waitForget = time.Minute

// servedFor is how long the tracker trusts its answer to "does a live
// worker of this pool serve this handler" for attempts queued in the pool.
const servedFor = time.Second

// waitTracker holds the reasons recorded lately: a part the router, the
// sender and the fan-out share (see newWaitTracker).
type waitTracker struct {
	now      func() time.Time
	log      zerolog.Logger
	store    *store.Store
	workers  *liveWorkers
	protocol int

	mu     sync.Mutex
	notes  map[int64]waitNote
	served map[queueKey]servedNote
	pruned time.Time
	// set and clear are the changes flushWaits writes next.
	set   []store.Wait
	clear []int64
	// storePruned is when flushWaits last pruned the store's table.
	storePruned time.Time
}

type waitNote struct {
	attempt int
	kind    schemas.WaitKind
	reason  string
	seen    time.Time
}

type servedNote struct {
	ok bool
	at time.Time
}

// noteWait notes that attempt a waits, of kind, with reason and what
// would end it: logged and kept for [waitTracker.flushWaits] only when it
// differs from what was recorded for the instance last.
func (t *waitTracker) noteWait(a store.Attempt, kind schemas.WaitKind, reason, ends string) {
	now := t.now()
	t.mu.Lock()
	if t.notes == nil {
		t.notes = make(map[int64]waitNote)
	}
	old, ok := t.notes[a.ID]
	t.notes[a.ID] = waitNote{attempt: a.Attempt, kind: kind, reason: reason, seen: now}
	if now.Sub(t.pruned) > waitForget {
		for id, n := range t.notes {
			if now.Sub(n.seen) > waitForget {
				delete(t.notes, id)
			}
		}
		t.pruned = now
	}
	changed := !ok || old.attempt != a.Attempt || old.kind != kind || old.reason != reason
	if changed {
		t.set = append(t.set, store.Wait{InstanceID: a.ID, Attempt: a.Attempt, Kind: kind, Reason: reason, Ends: ends, Since: now})
	}
	t.mu.Unlock()
	if changed {
		t.log.Warn().Int64("instance_id", a.ID).Int("attempt", a.Attempt).Str("task", a.Task).Str("pool", a.Pool).
			Str("wait", string(kind)).Str("reason", reason).Str("ends", ends).Msg("attempt waits")
	}
}

// flushWaits writes the wait reasons noted since the last flush, in one
// statement each for the new and the cleared ones, and prunes the table
// of instances that stopped waiting at most once per waitForget. A failed
// write is logged: a wait reason is for the operator's eyes, it never
// fails a batch. Nothing noted, it does nothing.
func (t *waitTracker) flushWaits() {
	t.mu.Lock()
	set, clear := t.set, t.clear
	t.set, t.clear = nil, nil
	now := t.now()
	prune := len(set) > 0 && now.Sub(t.storePruned) > waitForget
	if prune {
		t.storePruned = now
	}
	t.mu.Unlock()
	if len(set) == 0 && len(clear) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if prune {
		if err := t.store.PruneWaits(ctx); err != nil {
			t.log.Warn().Err(err).Msg("prune wait reasons")
		}
	}
	if err := t.store.ClearWaits(ctx, clear); err != nil {
		t.log.Warn().Err(err).Int("instances", len(clear)).Msg("clear wait reasons")
	}
	if err := t.store.SetWaits(ctx, set); err != nil {
		t.log.Warn().Err(err).Int("instances", len(set)).Msg("record wait reasons")
	}
}

// noteNoWorker records the wait of an attempt that routing found no live
// worker for (err, an errNoWorker), which is routed again later.
func (t *waitTracker) noteNoWorker(a store.Attempt, err error) {
	reason := err.Error()
	if nw, ok := errors.AsType[errNoWorker](err); ok && a.Strategy == schemas.DispatchWorker {
		reason = fmt.Sprintf("worker %s, which the attempt is pinned to, is live but may not take it: %s", a.Key, nw.Error())
	}
	t.noteWait(a, schemas.WaitNoWorker, reason, startExecutor(a))
}

// noteRouted looks at an attempt that routing placed on route r: queued
// for a pool that no live worker serves, or pinned to a worker that is not
// live, it waits there, which is recorded; an attempt that waited before
// and now routes has its reason cleared.
func (t *waitTracker) noteRouted(a store.Attempt, r route) {
	switch {
	case r.worker == "" && !t.poolServed(a.Pool, a.Handler):
		t.noteWait(a, schemas.WaitUnservedPool,
			fmt.Sprintf("no live worker of pool %q has registered handler %q; the attempt waits in the pool's queue", a.Pool, a.Handler),
			startExecutor(a))
		return
	case r.worker != "" && a.Strategy == schemas.DispatchWorker:
		if _, live := t.workers.live(r.worker); !live {
			t.noteWorkerGone(a, r.worker)
			return
		}
	}
	t.mu.Lock()
	if _, waited := t.notes[a.ID]; waited {
		delete(t.notes, a.ID)
		t.clear = append(t.clear, a.ID)
		// A reason noted and not yet written would come back after the clear.
		t.set = slices.DeleteFunc(t.set, func(w store.Wait) bool { return w.InstanceID == a.ID })
	}
	t.mu.Unlock()
}

// noteWorkerGone records that attempt a waits for worker, which it is
// pinned to and which is not live.
func (t *waitTracker) noteWorkerGone(a store.Attempt, worker string) {
	t.noteWait(a, schemas.WaitWorkerGone,
		fmt.Sprintf("the attempt is pinned to worker %s (dispatch.strategy worker), which is not live; it waits in that worker's queue", worker),
		fmt.Sprintf("worker %s comes back (its executor restarts with --worker-id %s), or cancel the instance and fire it with another worker", worker, worker))
}

// noteNoBroadcastWorker records that broadcast firing a found no live
// worker to run on.
func (t *waitTracker) noteNoBroadcastWorker(a store.Attempt) {
	t.noteWait(a, schemas.WaitNoBroadcastWorker,
		fmt.Sprintf("the broadcast found no live worker of pool %q with handler %q to run on; the dispatcher tries again every %v", a.Pool, a.Handler, rerouteDelay),
		startExecutor(a))
}

// startExecutor says what starts a worker that may take a.
func startExecutor(a store.Attempt) string {
	msg := fmt.Sprintf("start an executor with --pool %s that registers handler %s", a.Pool, a.Handler)
	if a.MinWorkerVersion != "" {
		msg += ", at version " + a.MinWorkerVersion + " or newer"
	}
	return msg + " (its credential granting both)"
}

// poolServed reports whether a live worker of pool has handler
// registered, remembered for servedFor: it is asked once per attempt
// queued in a pool.
func (t *waitTracker) poolServed(pool, handler string) bool {
	k := queueKey{pool: pool, handler: handler}
	now := t.now()
	t.mu.Lock()
	n, ok := t.served[k]
	t.mu.Unlock()
	if ok && now.Sub(n.at) < servedFor {
		return n.ok
	}
	served := len(t.workers.eligible(pool, handler, "", t.protocol)) > 0
	t.mu.Lock()
	if t.served == nil {
		t.served = make(map[queueKey]servedNote)
	}
	t.served[k] = servedNote{ok: served, at: now}
	t.mu.Unlock()
	return served
}
