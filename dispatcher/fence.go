package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// The fence answers the executors' questions about redelivered dispatch
// messages: may attempt N of instance X start? A dispatch message comes
// again when its acknowledgement was lost, and the executor's create-only
// lease write fences it out only while the leases bucket keeps the
// attempt's history; a nats-server killed with kill -9 (or a cluster
// leader's restart) can lose an acknowledged ack, the lease put and the
// expiry marker together. So an executor asks before it takes the lease
// of a redelivery (never of a first delivery: the hot path costs nothing),
// and a dispatcher says yes only when it can show that the attempt never
// ran: the instance is DISPATCHED at that attempt in PostgreSQL, no report
// of it waits in AX_REPORTS, and no lease of it was put since this
// dispatcher began to watch the leases, nor is any left from before in
// the bucket, which keeps a lease put two TTLs after its last renewal (the
// put, then its expiry marker): so the attempt was dispatched after the
// watch began, or at most leaseBook.reach before it — a dispatcher that
// restarted alone knows the attempts its predecessor dispatched just
// before dying from the bucket's history, not from its memory. When it
// ran, or that cannot be shown, the answer is no;
// and when its lease is not alive now, the attempt is failed as lost, like
// a lapsed lease, so that the instance goes on with the next attempt
// instead of running this one twice or staying DISPATCHED for ever. An
// attempt whose lease is alive is never failed here: a pool-mate asking
// cannot end a running attempt. docs/architecture.md says why.

// fenceLost is the reason recorded on an attempt the fence failed as lost.
const fenceLost = "lost: a delivery of the attempt came again with its lease gone, and the dispatcher cannot show it never ran; " +
	"it is failed rather than run twice"

// fenceClockSlack is how long after the dispatcher began to watch the
// leases, by its own clock, an attempt must have been dispatched
// (PostgreSQL's clock) for the dispatcher to know every lease put of it,
// when PostgreSQL's clock could not be read as the watch began.
const fenceClockSlack = 5 * time.Second

// fenceAnswerers bounds the fence questions answered at once.
const fenceAnswerers = 16

// The answers counted in ax_fence_answers_total.
const (
	fenceStart      = "start"      // the attempt never ran: it may start
	fenceNo         = "no"         // it ran, ended or runs: do not start it
	fenceLostAnswer = "lost"       // no, and it was failed as lost
	fenceRefused    = "refused"    // a question about another pool's attempt, or malformed
	fenceUnanswered = "unanswered" // the dispatcher could not tell (PostgreSQL or NATS failed)
)

// leaseBook is what the reaper's watch of the leases bucket learned: the
// worker each lease put names (by attempt, "" when it names none), kept
// until the reaper has dealt with its expiry, and since when the book is
// complete. The reaper writes it; the fence and the reaper read it.
type leaseBook struct {
	mu      sync.Mutex
	holders map[[2]int64]string
	last    string        // the worker of the last put, whose leases come in runs
	since   time.Time     // when the watch began
	reach   time.Duration // how long before since the bucket's history reaches
	ready   chan struct{} // closed once the watch delivered the bucket's current state
	once    sync.Once
}

func newLeaseBook() *leaseBook {
	return &leaseBook{holders: make(map[[2]int64]string), ready: make(chan struct{})}
}

// began notes when the watch began.
func (b *leaseBook) began(at time.Time) {
	b.mu.Lock()
	b.since = at
	b.mu.Unlock()
}

// retains notes the TTL of the leases bucket as the watch began. The
// bucket keeps a lease put until one TTL after its last renewal, and then
// its expiry marker for one TTL more (nats-server's max age removes the
// marker too, whatever its own TTL): every lease first put at most two
// TTLs before the watch began is in the state the watch reads first, as a
// put or a marker. (A put that ages out while the watch reads is
// replaced by its marker, which the watch reads as an update; only a
// marker that ages out before the watch reaches it is missed.) The book
// claims a little less, historySlack less, for the time between reading
// PostgreSQL's clock and the watch's read of the bucket's state.
func (b *leaseBook) retains(ttl time.Duration) {
	b.mu.Lock()
	b.reach = 2*ttl - min(ttl/2, historySlack)
	b.mu.Unlock()
}

// historySlack bounds what the leases book takes off the bucket's
// history, two lease TTLs, for the time the watch takes to read it (see
// [leaseBook.retains]); at most half a TTL is taken off.
const historySlack = 2 * time.Second

// synced notes that the watch delivered the bucket's current state.
func (b *leaseBook) synced() { b.once.Do(func() { close(b.ready) }) }

// put notes a lease put of attempt key naming worker.
func (b *leaseBook) put(key [2]int64, worker string) {
	b.mu.Lock()
	b.holders[key] = worker
	b.last = worker
	b.mu.Unlock()
}

// lastWorker returns the worker the last put named.
func (b *leaseBook) lastWorker() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// expired notes the expiry marker of attempt key, as a put naming no
// worker when no put of it was noted: the lease existed, so the attempt
// may have run, until the reaper has dealt with the expiry (a marker in
// the bucket's state when the watch began is all a restarted dispatcher
// learns of a lease its predecessor saw).
func (b *leaseBook) expired(key [2]int64) {
	b.mu.Lock()
	if _, ok := b.holders[key]; !ok {
		b.holders[key] = ""
	}
	b.mu.Unlock()
}

// attempts returns the attempts whose lease put or expiry the book holds.
func (b *leaseBook) attempts() [][2]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][2]int64, 0, len(b.holders))
	for k := range b.holders {
		out = append(out, k)
	}
	return out
}

// known reports whether a lease put of attempt key was noted.
func (b *leaseBook) known(key [2]int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.holders[key]
	return ok
}

// holder returns the worker the lease of attempt key names, "" when none
// is known; a nil book knows none.
func (b *leaseBook) holder(key [2]int64) string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holders[key]
}

// forget drops the attempts of fs, whose expiry was dealt with; a nil
// book holds none.
func (b *leaseBook) forget(fs []store.Failure) {
	if b == nil {
		return
	}
	b.mu.Lock()
	for _, f := range fs {
		delete(b.holders, [2]int64{f.InstanceID, int64(f.Attempt)})
	}
	b.mu.Unlock()
}

// knows reports whether the book holds every lease put of an attempt
// dispatched at dispatchedAt (PostgreSQL's clock): the watch had begun by
// then, or began at most reach later, so that any lease put of it was
// still in the bucket's state that the watch read first (see retains).
// (dispatched_at is the time its row was written, after any wait for the
// table's lock and before the commit that precedes the dispatch message
// and so any lease put: an attempt dispatched as the horizon passed may
// be taken as unknown, never the reverse.)
func (b *leaseBook) knows(dispatchedAt time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.since.IsZero() && !dispatchedAt.Before(b.since.Add(-b.reach))
}

// watchBegins returns the time, by PostgreSQL's clock, at which the watch
// of the leases about to begin may be said to have begun; when the clock
// cannot be read, the dispatcher's own plus fenceClockSlack.
func (rp *reaper) watchBegins(ctx context.Context) time.Time {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now, err := rp.store.Now(ctx)
	if err != nil {
		rp.log.Warn().Err(err).Dur("slack", fenceClockSlack).
			Msg("watching the leases from the dispatcher's clock plus a slack: attempts dispatched before are not known to the fence")
		return rp.now().Add(fenceClockSlack)
	}
	return now
}

// LeaseSeen reports whether the dispatcher's watch of the leases bucket
// saw a lease of attempt of instanceID put and has not yet dealt with its
// expiry: what a fence question's answer reads. For tests and diagnostics.
func (s *Service) LeaseSeen(instanceID int64, attempt int) bool {
	return s.book.known([2]int64{instanceID, int64(attempt)})
}

// answerFences answers the fence questions, as one of the dispatchers'
// queue group, once the reaper's watch has read the leases bucket, until
// ctx ends; it then waits for the answers in flight, which run on work.
func (rp *reaper) answerFences(ctx, work context.Context, leases jetstream.KeyValue, reports jetstream.Stream) error {
	select {
	case <-rp.book.ready:
	case <-ctx.Done():
		return nil
	}
	// Questions wait in the subscription's pending messages while
	// fenceAnswerers are answering: after a dispatcher restart every
	// redelivered attempt asks at once, thousands of them, and a question
	// dropped is asked again only after the executor's timeout. (A channel
	// subscription drops what does not fit in its channel.)
	sem := make(chan struct{}, fenceAnswerers)
	var (
		mu      sync.Mutex
		stopped bool
		wg      sync.WaitGroup
	)
	sub, err := rp.conn.QueueSubscribe(rp.top.AllFences(), "dispatcher", func(m *nats.Msg) {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		wg.Add(1)
		mu.Unlock()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Done()
			return
		}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rp.answerFence(work, leases, reports, m)
		}()
	})
	if err != nil {
		return fmt.Errorf("answer fence questions: subscribe to %s: %w", rp.top.AllFences(), err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	// A question being handed on as the subscription ends is counted
	// before stopped is set, or not at all.
	mu.Lock()
	stopped = true
	mu.Unlock()
	wg.Wait()
	return nil
}

// answerFence answers one fence question, or nothing when it cannot tell
// (the executor asks again later).
func (rp *reaper) answerFence(ctx context.Context, leases jetstream.KeyValue, reports jetstream.Stream, m *nats.Msg) {
	var q schemas.FenceQuestion
	pool, worker, id, ok := rp.top.FenceFrom(m.Subject)
	if ok {
		err := json.Unmarshal(m.Data, &q)
		ok = err == nil && q.InstanceID == id && q.WorkerID == worker && q.Attempt > 0
	}
	var a schemas.FenceAnswer
	var answer string
	if !ok {
		answer, a.Reason = fenceRefused, fmt.Sprintf("malformed fence question on %s: ask on %s.fence.<pool>.<worker_id>.<instance_id> "+
			"with a body that names that instance and worker and a positive attempt", m.Subject, rp.top.Prefix())
	} else {
		var err error
		answer, a, err = rp.decideFence(ctx, leases, reports, pool, q)
		if err != nil {
			rp.metrics.fence.WithLabelValues(fenceUnanswered).Inc()
			rp.log.Error().Err(err).Int64("instance_id", q.InstanceID).Int("attempt", q.Attempt).Str("worker_id", worker).
				Msg("fence question not answered; the executor asks again")
			return
		}
	}
	rp.metrics.fence.WithLabelValues(answer).Inc()
	ev := rp.log.Info()
	if answer == fenceRefused {
		ev = rp.log.Warn()
	}
	ev.Int64("instance_id", q.InstanceID).Int("attempt", q.Attempt).Str("worker_id", worker).Str("pool", pool).
		Str("answer", answer).Str("reason", a.Reason).Msg("fence question answered")
	data, err := json.Marshal(a)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		rp.log.Warn().Err(err).Str("subject", m.Subject).Msg("fence answer not sent")
	}
}

// decideFence decides whether attempt q of an instance of pool may start.
// The order of the reads is what makes a yes safe: the lease book first,
// then AX_REPORTS, then PostgreSQL. A lease put is forgotten only after the
// attempt's failure (or end) is committed, and a report leaves AX_REPORTS
// only after it is applied, so what the first reads miss, PostgreSQL shows.
func (rp *reaper) decideFence(ctx context.Context, leases jetstream.KeyValue, reports jetstream.Stream, pool string, q schemas.FenceQuestion) (string, schemas.FenceAnswer, error) {
	key := [2]int64{q.InstanceID, int64(q.Attempt)}
	seen := rp.book.known(key)
	reported, err := rp.reportWaits(ctx, reports, q.InstanceID, q.Attempt, false)
	if err != nil {
		return "", schemas.FenceAnswer{}, fmt.Errorf("look for reports in %s: %w", rp.top.ReportsStream(), err)
	}
	st, err := rp.store.GetAttemptState(ctx, q.InstanceID)
	if errors.Is(err, store.ErrNotFound) {
		return fenceNo, schemas.FenceAnswer{Reason: fmt.Sprintf("instance %d is not live: it never existed, or it ended long ago", q.InstanceID)}, nil
	}
	if err != nil {
		return "", schemas.FenceAnswer{}, err
	}
	if !schemas.PoolIncludes(st.Pool, pool) {
		return fenceRefused, schemas.FenceAnswer{Reason: fmt.Sprintf("attempt %d of instance %d is not pool %s's: only its own pool's workers may ask about it",
			q.Attempt, q.InstanceID, pool)}, nil
	}
	if st.Attempt != q.Attempt || (st.State != schemas.StateDispatched && st.State != schemas.StateRunning) {
		return fenceNo, schemas.FenceAnswer{Reason: fmt.Sprintf("attempt %d is over: the instance is %s at attempt %d", q.Attempt, st.State, st.Attempt)}, nil
	}
	why := ""
	switch {
	case st.State == schemas.StateRunning:
		why = "it reported started"
	case reported:
		why = "a report of it waits in " + rp.top.ReportsStream()
	case seen:
		why = "its lease was put"
	case !rp.book.knows(st.DispatchedAt):
		why = "it was dispatched before the history of the leases this dispatcher read, so a lease of it may have been put and lost"
	default:
		return fenceStart, schemas.FenceAnswer{Start: true, Reason: fmt.Sprintf(
			"attempt %d never ran: the instance is DISPATCHED at it, no report of it waits and no lease of it was put", q.Attempt)}, nil
	}
	_, err = leases.Get(ctx, streams.LeaseKey(q.InstanceID, q.Attempt))
	switch {
	case err == nil:
		return fenceNo, schemas.FenceAnswer{Reason: fmt.Sprintf("attempt %d runs: %s, and its lease is alive", q.Attempt, why)}, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return "", schemas.FenceAnswer{}, fmt.Errorf("read the lease of attempt %d of instance %d: %w", q.Attempt, q.InstanceID, err)
	}
	if left := rp.graceLeft(); left > 0 {
		// Just back from an outage: its final report may still come (see
		// outage.go). No answer: the executor asks again.
		return "", schemas.FenceAnswer{}, fmt.Errorf("attempt %d of instance %d may have run (%s) and its lease is gone, but this dispatcher's connection came back %s ago: "+
			"its final report may still come, so it is decided after the grace", q.Attempt, q.InstanceID, why, (max(rp.reconnects.ttl, minOutageGrace) - left).Round(time.Millisecond))
	}
	lost := []store.Failure{{InstanceID: q.InstanceID, Attempt: q.Attempt, Reason: fenceLost + " (" + why + ")", At: rp.now()}}
	if err := rp.expireLeases(ctx, reports, lost, rp.book); err != nil {
		return "", schemas.FenceAnswer{}, fmt.Errorf("fail attempt %d of instance %d as lost: %w", q.Attempt, q.InstanceID, err)
	}
	rp.book.forget(lost)
	return fenceLostAnswer, schemas.FenceAnswer{Reason: fmt.Sprintf(
		"attempt %d may have run (%s) and its lease is gone: it is failed as lost, and the instance goes on with the next attempt", q.Attempt, why)}, nil
}
