package executor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// leaseKeeper keeps the leases of the worker's attempts in ax-leases: it
// creates them (takeLeases), renews them every third of the bucket's TTL
// (renewLeases), writes again a lease that vanished without expiring
// (restore), and deletes the lease of an attempt handed back (release).
// It owns the set of running attempts: a lease is renewed exactly while its
// attempt is on it, which is until the attempt's final report is stored.
// Its inputs are the topology, the worker's id and, from Run, the bucket
// and a publisher; it knows nothing of slots, handlers or reports.
type leaseKeeper struct {
	workerID string
	prefix   string // the subject of a lease without its key
	log      *slog.Logger

	// Set by Run before any goroutine starts.
	kv  jetstream.KeyValue
	pub *streams.Publisher // the batches of lease writes: cheaper than js's PublishMsgAsync
	// ttlNanos is the bucket's TTL as last read: at start, then at every
	// renewal tick, so that a TTL its owner changes is followed (see
	// renewLeases).
	ttlNanos atomic.Int64
	// rolledUp is set once the worker restored a lease that vanished
	// without expiring (see restore), so that it warns once.
	rolledUp atomic.Bool

	mu      sync.Mutex
	running map[string]*attempt // by lease key
}

// newLeaseKeeper returns the lease keeper of a worker with options o.
func newLeaseKeeper(o Options, log *slog.Logger) *leaseKeeper {
	return &leaseKeeper{workerID: o.WorkerID, prefix: "$KV." + o.Topology.LeasesBucket() + ".", log: log,
		running: make(map[string]*attempt)}
}

// add puts a leased attempt on the running set: from now on its lease is
// renewed and a cancel reaches it.
func (k *leaseKeeper) add(a *attempt) {
	k.mu.Lock()
	k.running[a.key] = a
	k.mu.Unlock()
}

// remove takes the attempt off the running set: its lease is no longer
// renewed, and ages out one TTL after its last renewal.
func (k *leaseKeeper) remove(a *attempt) {
	k.mu.Lock()
	if k.running[a.key] == a {
		delete(k.running, a.key)
	}
	k.mu.Unlock()
}

// find returns the running attempts of instance id: all of them when n
// is 0, else the one numbered n.
func (k *leaseKeeper) find(id int64, n int) []*attempt {
	k.mu.Lock()
	defer k.mu.Unlock()
	var found []*attempt
	for _, a := range k.running {
		if a.dispatch.InstanceID == id && (n == 0 || a.dispatch.Attempt == n) {
			found = append(found, a)
		}
	}
	return found
}

// release deletes the lease of an attempt the worker handed back, once
// remove has stopped its renewals. The reaper takes a delete for a lease
// its holder retired, not for a death (only an expiry marker is), and the
// released report in AX_REPORTS decides the attempt; a delete that fails
// leaves the lease to expire with its TTL, which changes nothing but the
// time.
func (k *leaseKeeper) release(a *attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := k.kv.Delete(ctx, a.key); err != nil {
		a.log.Warn("delete the lease of a handed-back attempt; it expires with its TTL instead", "error", err)
	}
}

// leaseMsg returns the message that writes the lease value under key in
// the leases bucket if the key's last revision is revision. Revision 0
// expects a key never written, nor deleted or expired within the last
// TTL (the bucket's max age removes an expiry marker one TTL after the
// expiry, its own TTL notwithstanding): a key per attempt makes that "no
// one ran this attempt lately", and the confirmed ack of the dispatch
// message (see confirmAcks) keeps a message whose attempt ran from coming
// back later.
func (k *leaseKeeper) leaseMsg(key string, value []byte, revision uint64) *nats.Msg {
	m := &nats.Msg{Subject: k.prefix + key, Data: value, Header: createOnly}
	if revision != 0 {
		m.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(revision, 10)}}
	}
	return m
}

// leaseBatch is the outcome of the lease creates of a batch of attempts:
// keys[i], values[i], acks[i] and errs[i] are those of the batch's i-th.
type leaseBatch struct {
	keys   []string
	values [][]byte
	acks   []jetstream.PubAck
	errs   []error
	sent   time.Time // when the creates were sent, on the real clock
}

// takeLeases creates the leases of ps, acquired at now, in one publish of
// the batch and one wait for its acknowledgements.
func (k *leaseKeeper) takeLeases(ctx context.Context, ps []*pending, now time.Time) leaseBatch {
	lb := leaseBatch{keys: make([]string, len(ps)), values: make([][]byte, len(ps))}
	msgs := make([]nats.Msg, len(ps)) // one allocation for the batch's messages
	leaseMsgs := make([]*nats.Msg, len(ps))
	for i, p := range ps {
		var subject string
		subject, lb.keys[i] = k.leaseSubject(p.d.InstanceID, p.d.Attempt)
		lb.values[i], _ = schemas.MarshalLease(schemas.Lease{InstanceID: p.d.InstanceID, Attempt: p.d.Attempt, WorkerID: k.workerID, AcquiredAt: now})
		msgs[i] = nats.Msg{Subject: subject, Data: lb.values[i], Header: createOnly}
		leaseMsgs[i] = &msgs[i]
	}
	lb.sent = time.Now()
	lb.acks, lb.errs = publishAll(ctx, k.pub, leaseMsgs)
	return lb
}

// leaseSubject returns the subject of the lease of the attempt of
// instance id, and its key ([streams.LeaseKey]), the subject's end: one
// allocation for both.
func (k *leaseKeeper) leaseSubject(id int64, attempt int) (subject, key string) {
	var buf [128]byte
	b := append(buf[:0], k.prefix...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(attempt), 10)
	subject = string(b)
	return subject, subject[len(k.prefix):]
}

// createOnly is the header of every lease create: one map for all of
// them, which nothing changes (a message's header is only read when it
// is published).
var createOnly = nats.Header{jetstream.ExpectedLastSubjSeqHeader: {"0"}}

// isWrongLastSequence reports whether err is the server refusing a write
// because the key's last revision is not the one expected.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// publishAll publishes msgs asynchronously and awaits every acknowledgement:
// one round trip for the batch. acks[i] and errs[i] are the outcome of msgs[i].
func publishAll(ctx context.Context, pub *streams.Publisher, msgs []*nats.Msg) (acks []jetstream.PubAck, errs []error) {
	acks, errs = make([]jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	b := pub.Batch()
	for _, m := range msgs {
		b.Add(m)
	}
	_ = b.Await(ctx) // Result tells each message it did not wait for
	for i := range msgs {
		acks[i], errs[i] = b.Result(i)
	}
	return acks, errs
}

// renewLeases renews the lease of every running attempt every third of the
// lease TTL, until ctx ends. The TTL is the leases bucket's, which its
// owner (the dispatcher's --lease-ttl) may change while the worker runs:
// each tick reads it again, and a changed TTL changes the renewal period
// from then on, so the worker never renews at the rate of a TTL that is
// gone. A TTL shortened to less than the time since a lease's last renewal
// ends that lease all the same: shorten it in steps.
func (k *leaseKeeper) renewLeases(ctx context.Context) {
	ttl := k.ttl()
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			k.renew()
			if now := k.readTTL(ctx); now != ttl {
				k.log.Info("lease TTL changed; renewing every third of it", "lease_ttl", now, "was", ttl)
				ttl = now
				ticker.Reset(ttl / 3)
			}
		}
	}
}

// ttl is the leases bucket's TTL as last read.
func (k *leaseKeeper) ttl() time.Duration { return time.Duration(k.ttlNanos.Load()) }

// readTTL reads the leases bucket's TTL again and returns it; when it
// cannot be read, or the bucket has no TTL any more, it keeps (and returns)
// the one it had.
func (k *leaseKeeper) readTTL(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	status, err := k.kv.Status(ctx)
	switch {
	case err != nil:
		k.log.Debug("read the leases bucket's TTL; keeping the one read before", "error", err)
	case status.TTL() <= 0:
		k.log.Warn("the leases bucket has no TTL any more; renewing at the TTL read before", "bucket", k.kv.Bucket())
	default:
		k.ttlNanos.Store(int64(status.TTL()))
	}
	return k.ttl()
}

// renew renews every running attempt's lease in one batch. Each write
// expects the revision the worker last wrote: if the lease expired
// meanwhile, the expiry moved it and the write fails, which cancels the
// attempt with ErrLeaseLost — unless the lease merely vanished (see
// [leaseKeeper.restore]).
func (k *leaseKeeper) renew() {
	k.mu.Lock()
	as := make([]*attempt, 0, len(k.running))
	msgs := make([]*nats.Msg, 0, len(k.running))
	for _, a := range k.running {
		as = append(as, a)
		msgs = append(msgs, k.leaseMsg(a.key, a.lease, a.revision))
	}
	k.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sent := time.Now()
	acks, errs := publishAll(ctx, k.pub, msgs)
	var vanished []*attempt
	for i, a := range as {
		k.mu.Lock()
		current := k.running[a.key] == a
		if current && errs[i] == nil {
			a.revision, a.renewedAt = acks[i].Sequence, sent
		}
		k.mu.Unlock()
		switch {
		case !current || errs[i] == nil:
			// Renewed, or finished meanwhile (its delete moved the revision).
		case isWrongLastSequence(errs[i]):
			vanished = append(vanished, a)
		default:
			a.log.Warn("renew lease; trying again at the next renewal", "error", errs[i])
		}
	}
	if len(vanished) > 0 {
		k.restore(ctx, vanished)
	}
}

// restore writes again the leases of as, whose renewal found the
// key at another revision than the worker's last one, if the key holds no
// message at all; it cancels with ErrLeaseLost the attempts whose lease
// expired, or may have.
//
// ax-leases honours Nats-Rollup (nats-server forces it on for a stream with
// limit markers), so any writer of the bucket may purge it whole: every
// lease vanishes without expiring, and without a marker. An expiry leaves
// its limit marker on the key for a TTL, and the marker stays the key's
// last message until a write: a write that expects no message on the
// subject (revision 0) then fails. So a restore that succeeds finds the key
// empty, and it is sent less than a TTL after the worker's last successful
// write was sent — the server stored that write no earlier, so the write
// cannot have aged out, nor its marker (which lives a TTL more) have gone:
// the lease was removed, not expired, and its holder is alive. An expired
// lease is never revived.
func (k *leaseKeeper) restore(ctx context.Context, as []*attempt) {
	ttl := k.ttl()
	now := time.Now()
	restore := make([]*attempt, 0, len(as))
	msgs := make([]*nats.Msg, 0, len(as))
	k.mu.Lock()
	for _, a := range as {
		if k.running[a.key] == a && now.Sub(a.renewedAt) < ttl {
			restore = append(restore, a)
			msgs = append(msgs, k.leaseMsg(a.key, a.lease, 0))
		}
	}
	k.mu.Unlock()
	var acks []jetstream.PubAck
	var errs []error
	if len(msgs) > 0 {
		acks, errs = publishAll(ctx, k.pub, msgs)
	}
	for _, a := range as {
		i := slices.Index(restore, a)
		k.mu.Lock()
		current := k.running[a.key] == a
		if current && i >= 0 && errs[i] == nil {
			a.revision, a.renewedAt = acks[i].Sequence, now
		}
		k.mu.Unlock()
		switch {
		case !current:
		case i >= 0 && errs[i] == nil:
			if !k.rolledUp.Swap(true) {
				k.log.Warn("a lease vanished without expiring: a roll-up on the leases bucket? restored it; warning once", "bucket", k.kv.Bucket())
			}
			a.log.Info("lease vanished without expiring; restored it")
		case i >= 0 && !isWrongLastSequence(errs[i]):
			a.log.Warn("restore lease; trying again at the next renewal", "error", errs[i])
		default:
			a.log.Warn("lease expired before its renewal; cancelling the attempt")
			a.cancel(ErrLeaseLost)
		}
	}
}
