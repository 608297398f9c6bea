package executor

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// leaseMsg returns the message that writes the lease value under key in
// the leases bucket if the key's last revision is revision. Revision 0
// expects a key never written, nor deleted or expired within the last
// TTL (the bucket's max age removes an expiry marker one TTL after the
// expiry, its own TTL notwithstanding): a key per attempt makes that "no
// one ran this attempt lately", and the confirmed ack of the dispatch
// message (see confirmAcks) keeps a message whose attempt ran from coming
// back later.
func (s *Service) leaseMsg(key string, value []byte, revision uint64) *nats.Msg {
	m := &nats.Msg{Subject: "$KV." + s.opts.Topology.LeasesBucket() + "." + key, Data: value, Header: createOnly}
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
func (s *Service) takeLeases(ctx context.Context, ps []*pending, now time.Time) leaseBatch {
	lb := leaseBatch{keys: make([]string, len(ps)), values: make([][]byte, len(ps))}
	msgs := make([]nats.Msg, len(ps)) // one allocation for the batch's messages
	leaseMsgs := make([]*nats.Msg, len(ps))
	for i, p := range ps {
		var subject string
		subject, lb.keys[i] = s.leaseSubject(p.d.InstanceID, p.d.Attempt)
		lb.values[i], _ = schemas.MarshalLease(schemas.Lease{InstanceID: p.d.InstanceID, Attempt: p.d.Attempt, WorkerID: s.opts.WorkerID, AcquiredAt: now})
		msgs[i] = nats.Msg{Subject: subject, Data: lb.values[i], Header: createOnly}
		leaseMsgs[i] = &msgs[i]
	}
	lb.sent = time.Now()
	lb.acks, lb.errs = publishAll(ctx, s.pub, leaseMsgs)
	return lb
}

// leaseSubject returns the subject of the lease of the attempt of
// instance id, and its key ([streams.LeaseKey]), the subject's end: one
// allocation for both.
func (s *Service) leaseSubject(id int64, attempt int) (subject, key string) {
	var buf [128]byte
	b := append(buf[:0], s.leasePrefix...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(attempt), 10)
	subject = string(b)
	return subject, subject[len(s.leasePrefix):]
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
func (s *Service) renewLeases(ctx context.Context) {
	ttl := s.currentLeaseTTL()
	ticker := time.NewTicker(ttl / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.renew()
			if now := s.readLeaseTTL(ctx); now != ttl {
				s.log.Info("lease TTL changed; renewing every third of it", "lease_ttl", now, "was", ttl)
				ttl = now
				ticker.Reset(ttl / 3)
			}
		}
	}
}

// currentLeaseTTL is the leases bucket's TTL as last read.
func (s *Service) currentLeaseTTL() time.Duration { return time.Duration(s.leaseTTL.Load()) }

// readLeaseTTL reads the leases bucket's TTL again and returns it; when it
// cannot be read, or the bucket has no TTL any more, it keeps (and returns)
// the one it had.
func (s *Service) readLeaseTTL(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	status, err := s.leases.Status(ctx)
	switch {
	case err != nil:
		s.log.Debug("read the leases bucket's TTL; keeping the one read before", "error", err)
	case status.TTL() <= 0:
		s.log.Warn("the leases bucket has no TTL any more; renewing at the TTL read before", "bucket", s.leases.Bucket())
	default:
		s.leaseTTL.Store(int64(status.TTL()))
	}
	return s.currentLeaseTTL()
}

// renew renews every running attempt's lease in one batch. Each write
// expects the revision the worker last wrote: if the lease expired
// meanwhile, the expiry moved it and the write fails, which cancels the
// attempt with ErrLeaseLost — unless the lease merely vanished (see
// [Service.restoreLeases]).
func (s *Service) renew() {
	s.mu.Lock()
	as := make([]*attempt, 0, len(s.running))
	msgs := make([]*nats.Msg, 0, len(s.running))
	for _, a := range s.running {
		as = append(as, a)
		msgs = append(msgs, s.leaseMsg(a.key, a.lease, a.revision))
	}
	s.mu.Unlock()
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sent := time.Now()
	acks, errs := publishAll(ctx, s.pub, msgs)
	var vanished []*attempt
	for i, a := range as {
		s.mu.Lock()
		current := s.running[a.key] == a
		if current && errs[i] == nil {
			a.revision, a.renewedAt = acks[i].Sequence, sent
		}
		s.mu.Unlock()
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
		s.restoreLeases(ctx, vanished)
	}
}

// restoreLeases writes again the leases of as, whose renewal found the
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
func (s *Service) restoreLeases(ctx context.Context, as []*attempt) {
	ttl := s.currentLeaseTTL()
	now := time.Now()
	restore := make([]*attempt, 0, len(as))
	msgs := make([]*nats.Msg, 0, len(as))
	s.mu.Lock()
	for _, a := range as {
		if s.running[a.key] == a && now.Sub(a.renewedAt) < ttl {
			restore = append(restore, a)
			msgs = append(msgs, s.leaseMsg(a.key, a.lease, 0))
		}
	}
	s.mu.Unlock()
	var acks []jetstream.PubAck
	var errs []error
	if len(msgs) > 0 {
		acks, errs = publishAll(ctx, s.pub, msgs)
	}
	for _, a := range as {
		i := slices.Index(restore, a)
		s.mu.Lock()
		current := s.running[a.key] == a
		if current && i >= 0 && errs[i] == nil {
			a.revision, a.renewedAt = acks[i].Sequence, now
		}
		s.mu.Unlock()
		switch {
		case !current:
		case i >= 0 && errs[i] == nil:
			if !s.rolledUp.Swap(true) {
				s.log.Warn("a lease vanished without expiring: a roll-up on the leases bucket? restored it; warning once", "bucket", s.leases.Bucket())
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
