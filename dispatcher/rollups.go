package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// ax-leases and ax-workers honour Nats-Rollup: nats-server turns roll-ups
// on for every stream with limit markers, and the reaper and the worker
// list need those markers. So any writer of the buckets (an executor) may
// purge one whole. A purge removes the keys without a marker: the watches
// see nothing go. What keeps that harmless:
//
//   - a live executor restores a lease that vanished without expiring at
//     its next renewal, and puts its heartbeat at its next beat;
//   - the reaper sweeps the leases bucket once a TTL (sweepVanished): an
//     attempt whose lease is missing at two sweeps in a row lost it
//     without a marker, and its holder did not restore it: it is failed as
//     lost like an expiry, within about two TTLs;
//   - the worker list takes a worker whose heartbeat is older than the
//     bucket's TTL for departed (see [liveWorkers.stale]).
//
// A vanished key with no message left on its subject is a roll-up (an
// expiry leaves its marker, a delete its delete marker): it is counted in
// ax_kv_rollups_detected_total and logged once per bucket.

// vanishedLeases is what the last sweep of the leases bucket found missing.
type vanishedLeases map[[2]int64]bool

// appendVanished appends to lost what [reaper.sweepVanished] finds; a
// sweep that fails is logged and made again at the next tick.
func (rp *reaper) appendVanished(ctx context.Context, leases jetstream.KeyValue, missing vanishedLeases, lost []store.Failure) []store.Failure {
	gone, err := rp.sweepVanished(ctx, leases, missing)
	if err != nil {
		if ctx.Err() == nil {
			rp.log.Warn().Err(err).Msg("sweeping the leases bucket for vanished leases failed; trying again in a TTL")
		}
		return lost
	}
	n := len(lost)
	for _, g := range gone {
		if !slices.ContainsFunc(lost[:n], func(f store.Failure) bool { return f.InstanceID == g.InstanceID && f.Attempt == g.Attempt }) {
			lost = append(lost, g)
		}
	}
	if len(lost) > n {
		rp.log.Warn().Int("leases", len(lost)-n).Msg("attempts whose lease vanished without a marker and was not restored; failing them as lost")
	}
	return lost
}

// sweepVanished lists the keys of the leases bucket once and returns the
// attempts whose lease was missing at the previous sweep too, as
// candidates for [reaper.expireLeases], which fails only those still
// unfinished. It keeps in missing what is missing now.
func (rp *reaper) sweepVanished(ctx context.Context, leases jetstream.KeyValue, missing vanishedLeases) ([]store.Failure, error) {
	// Every running attempt: its lease was made before it was reported
	// started. And every attempt whose lease put the watch saw and whose
	// expiry the reaper has not dealt with: one whose started report
	// JetStream refused is DISPATCHED with a lease, and a full store that
	// refuses the report refuses the lease's expiry marker too. Two sweeps
	// a TTL apart leave a live holder time to restore its lease.
	running, err := rp.store.RunningAttempts(ctx, rp.now())
	if err != nil {
		clear(missing)
		return nil, err
	}
	candidates := rp.book.attempts()
	for _, r := range running {
		candidates = append(candidates, [2]int64{r.InstanceID, int64(r.Attempt)})
	}
	slices.SortFunc(candidates, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	candidates = slices.Compact(candidates)
	if len(candidates) == 0 {
		clear(missing)
		return nil, nil
	}
	held := make(map[string]bool)
	lister, err := leases.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	if err == nil {
		for k := range lister.Keys() {
			held[k] = true
		}
		_ = lister.Stop()
	}
	var gone []store.Failure
	var fresh []string
	now := make(vanishedLeases)
	for _, key := range candidates {
		k := streams.LeaseKey(key[0], int(key[1]))
		if held[k] {
			continue
		}
		now[key] = true
		if missing[key] {
			gone = append(gone, store.Failure{InstanceID: key[0], Attempt: int(key[1]), Reason: leaseLost, At: rp.now()})
		} else {
			fresh = append(fresh, k)
		}
	}
	clear(missing)
	for k := range now {
		missing[k] = true
	}
	if len(fresh) > 0 {
		rp.detectRollup(ctx, leases.Bucket(), fresh[0])
	}
	return gone, nil
}

// detectRollup counts a roll-up of bucket when key, which vanished from
// it, has no message left at all: neither a value nor a marker.
func (rp *reaper) detectRollup(ctx context.Context, bucket, key string) {
	st, err := rp.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return
	}
	_, err = st.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+key)
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return
	}
	rp.metrics.rollups.WithLabelValues(bucket).Inc()
	warned := &rp.rollupLeasesWarned
	if bucket != rp.top.LeasesBucket() {
		warned = &rp.rollupWorkersWarned
	}
	if !warned.Swap(true) {
		rp.log.Warn().Str("bucket", bucket).Str("key", key).
			Msg("a key vanished without a marker: a roll-up (Nats-Rollup) by a writer of the bucket? AX restores or reaps what it removed; warning once")
	}
}

// rollupWarnings are whether the dispatcher warned of a roll-up of each
// bucket.
type rollupWarnings struct {
	rollupLeasesWarned  atomic.Bool
	rollupWorkersWarned atomic.Bool
}

// staleCheck is how often the worker list looks for workers whose
// heartbeat is older than the bucket's TTL ttl: a third of it, or once a
// minute for a bucket without one.
func (v *liveWorkers) staleCheck() time.Duration {
	v.mu.Lock()
	ttl := v.ttl
	v.mu.Unlock()
	if ttl <= 0 {
		return time.Minute
	}
	return max(ttl/3, 10*time.Millisecond)
}

// stale takes out of the view the workers whose last heartbeat the
// dispatcher read more than the bucket's TTL ago and returns their ids:
// their key is gone without the marker that would have told (a roll-up
// purged it, or the marker was missed), so they left.
func (v *liveWorkers) stale() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ttl <= 0 {
		return nil
	}
	var ids []string
	now := v.now()
	for id, w := range v.workers {
		if now.Sub(w.seenAt) > v.ttl {
			ids = append(ids, id)
			delete(v.workers, id)
			delete(v.suspended, id)
		}
	}
	return ids
}

// departStale takes the workers of [liveWorkers.stale] for departed.
func (rp *reaper) departStale(ctx context.Context, bucket string) {
	for _, id := range rp.workers.stale() {
		rp.log.Info().Str("worker_id", id).Msg("worker left: no heartbeat within the TTL, and no marker; routing the work queued for it again")
		rp.departed(id)
		rp.detectRollup(ctx, bucket, id)
	}
}
