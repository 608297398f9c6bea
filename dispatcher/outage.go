package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// After the dispatcher's connection comes back from losing its server, the
// leases that no holder could renew meanwhile expire at once (a restarted
// nats-server ages them by its own clock), while the final reports of the
// attempts that ended during the outage are still on their way: an
// executor retries a report with a backoff of seconds while the server's
// JetStream starts again. Failing those attempts as lost at once would
// record a success that happened as lost, and run the attempt again
// (ax drill system's nats-kill did). So for the outage grace after a
// reconnect the reaper holds its expiries back and the fence does not
// answer "lost": a final report that lands meanwhile wins, and afterwards
// they are decided as before. An attempt whose worker did die is failed
// one grace later than it would have been.

// minOutageGrace is the least grace after a reconnect: the server's
// JetStream may take seconds more to take publishes again, and an executor
// tries a report again every second or so, each try awaited for at most 2 s
// (docs/executor-protocol.md).
const minOutageGrace = 10 * time.Second

// reconnects tracks the dispatcher connection's reconnections.
type reconnects struct {
	mu    sync.Mutex
	count uint64    // the connection's reconnections when last looked at
	back  time.Time // when a new one was first seen; zero before any
	ttl   time.Duration
}

// start records the connection's reconnections so far, which end no
// outage of this run, and the leases bucket's TTL.
func (r *reconnects) start(count uint64, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count, r.ttl = count, ttl
}

// graceLeft returns how long the grace after the latest outage lasts
// from now: 0 when there was none or it is over. An outage is the
// connection's latest reconnection, or a refusal of the dispatcher's
// writes to the leases bucket (see probeWrites), while JetStream goes on
// refusing and for a grace after. A reconnection is dated when first seen,
// which is no earlier than it happened, and a refusal when its answer
// came, so the grace never ends early.
func (rp *reaper) graceLeft() time.Duration {
	r := &rp.reconnects
	n := rp.conn.Stats().Reconnects
	now := time.Now()
	refused, grace := rp.writes.last()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n != r.count {
		r.count, r.back = n, now
	}
	var left time.Duration
	if !r.back.IsZero() {
		left = max(r.back.Add(max(r.ttl, minOutageGrace)).Sub(now), 0)
	}
	if !refused.IsZero() {
		left = max(left, refused.Add(grace).Sub(now))
	}
	return left
}

// A JetStream that refuses writes (a full store, a stream without quorum)
// refuses a worker's lease renewals and its final reports alike: the
// leases of attempts that ended meanwhile, their reports not stored yet,
// expire as a dead worker's do. The worker keeps such a report and tries
// it until it is stored, renewing the attempt's lease meanwhile
// (executor/lease.go), so a lease that expires under a live worker is one
// whose renewals JetStream refused. The dispatcher puts a key of its own
// in the leases bucket every probe interval, a write like a renewal; while
// those writes are refused, and for a grace after the last refusal, the
// reaper fails no attempt as lost or overdue and the fence answers no
// "lost" (graceLeft): the grace, longer than the lease TTL, 10 s and a
// probe interval, lets the worker's next try store the report once
// JetStream takes writes again (an executor tries every 2 s at most).
// Then the attempts are decided as before: by their reports, recorded or
// waiting in AX_REPORTS, and the expiry of a lease nobody renews is a death.
// The probe interval is a quarter of the TTL (between 250 ms and 5 s), so
// that an outage long enough to let a lease expire (two thirds of a TTL
// without a renewal) refuses a probe too.

// probeKey is the key the dispatchers put in the leases bucket: not a
// lease key (streams.ParseLeaseKey refuses it), so the reaper skips its
// puts and its expiry.
const probeKey = "dispatcher-write-probe"

// writeHealth dates the refusals of the probe.
type writeHealth struct {
	mu      sync.Mutex
	probed  bool          // a first probe has been answered or timed out
	refused time.Time     // the latest refusal; zero before any
	grace   time.Duration // how long an outage is held after it
}

// done records the outcome of a probe: a refusal when refused.
func (w *writeHealth) done(refused bool, at time.Time, grace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.probed = true
	if refused {
		w.refused, w.grace = at, grace
	}
}

// last returns the latest refusal and its grace. Before the first probe's
// outcome, when a dispatcher starting during an outage cannot tell yet,
// it returns a refusal now, with a grace of firstProbeWait.
func (w *writeHealth) last() (time.Time, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.probed {
		return time.Now(), firstProbeWait
	}
	return w.refused, w.grace
}

// firstProbeWait is how long graceLeft holds the reaper, at a time, before
// the first probe's outcome.
const firstProbeWait = 250 * time.Millisecond

// probeInterval is how often probeWrites writes, for the lease TTL ttl.
func probeInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 250*time.Millisecond), 5*time.Second)
}

// probeWrites puts probeKey in the leases bucket every probe interval
// until ctx ends, records each refusal (see writeHealth), counts it in
// ax_publish_refusals_total and sets ax_jetstream_writable; with each
// probe it reads the account's JetStream store usage for
// ax_jetstream_store_used_bytes and ax_jetstream_store_limit_bytes.
func (rp *reaper) probeWrites(ctx context.Context, leases jetstream.KeyValue) error {
	ttl := rp.streams().LeaseTTL
	if status, err := leases.Status(ctx); err == nil {
		ttl = status.TTL()
	}
	every := probeInterval(ttl)
	grace := max(ttl, minOutageGrace) + every
	stream := "KV_" + leases.Bucket()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		tryCtx, cancel := context.WithTimeout(ctx, every)
		_, err := leases.Put(tryCtx, probeKey, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			rp.writes.done(true, time.Now(), grace)
			reason := refusalReason(err)
			rp.metrics.publishRefusals.WithLabelValues(stream, reason).Inc()
			rp.metrics.writable.Set(0)
			rp.log.Warn().Err(err).Str("stream", stream).Str("reason", reason).Dur("grace", grace).
				Msg("JetStream refuses the dispatcher's writes; the reaper fails no attempt as lost until the grace after they are taken again")
		default:
			rp.writes.done(false, time.Time{}, 0)
			rp.metrics.writable.Set(1)
		}
		rp.readStoreUsage(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// readStoreUsage sets the store gauges from the account's JetStream
// usage; a failed read leaves them as they were.
func (rp *reaper) readStoreUsage(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := rp.js.AccountInfo(ctx)
	if err != nil {
		return
	}
	rp.metrics.storeUsed.Set(float64(info.Store))
	rp.metrics.storeLimit.Set(float64(max(info.Limits.MaxStore, 0)))
}

// refusalReason names why JetStream refused a write, for the metric's
// reason label: store_full (insufficient resources: the server's or the
// account's store is full), unavailable (no quorum, no leader, no
// responders, no answer in time: the stream cannot take writes now) or
// other.
func refusalReason(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == 10023 || apiErr.ErrorCode == 10047):
		return "store_full"
	case errors.As(err, &apiErr) && apiErr.Code == 503,
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrDisconnected):
		return "unavailable"
	}
	return "other"
}
