package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
func (s *Service) publishAll(ctx context.Context, msgs []*nats.Msg) (acks []jetstream.PubAck, errs []error) {
	acks, errs = make([]jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	b := s.pub.Batch()
	for _, m := range msgs {
		b.Add(m)
	}
	_ = b.Await(ctx) // Result tells each message it did not wait for
	for i := range msgs {
		acks[i], errs[i] = b.Result(i)
	}
	return acks, errs
}

// A final report is tried until it is stored, however long JetStream
// refuses it (a full store, a stream without quorum, a server down): the
// attempt stays on the worker's running set meanwhile, so its lease is
// renewed whenever renewals go through, and the dispatcher's reaper fails
// no attempt as lost while its own writes to the leases bucket are refused
// (dispatcher/outage.go). Each try awaits its acknowledgement for at most
// reportTry, so that a try sent as the server went down, whose answer
// never comes, is followed by another once the server is back instead of
// being awaited for opTimeout. Only the worker's shutdown ends the tries
// (once ShutdownTimeout has passed twice): a report the first try did not
// store is in the spool then, when the worker has one (spool.go).
const reportTry = 2 * time.Second

// unsentWarnAfter is how long a final report goes unstored before the
// worker says so, and then again every unsentWarnAfter.
const unsentWarnAfter = 10 * time.Second

// publishBackoff are the delays between the tries of a report; the last
// one repeats, for as long as the report is refused.
var publishBackoff = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 2 * time.Second}

// errReportsStopped is the error of a report whose tries the worker's
// shutdown ended.
var errReportsStopped = errors.New("the worker is shutting down")

// publishRetry publishes m and awaits its acknowledgement, trying again
// with capped backoff until it is stored, the connection is closed or the
// worker's shutdown stops the reports (ctx ends: s.reportsCtx or one
// derived from it). m carries a Nats-Msg-Id, so a try
// that reached the stream unacknowledged makes a later one a duplicate the
// stream drops. refused, when not nil, is called once, after the first
// try that failed (the report then goes to the spool).
func (s *Service) publishRetry(ctx context.Context, m *nats.Msg, refused func()) error {
	start := time.Now()
	warned := start
	for i := 0; ; i++ {
		tryCtx, cancel := context.WithTimeout(ctx, reportTry)
		_, err := s.js.PublishMsg(tryCtx, m)
		cancel()
		if err == nil {
			if i > 0 {
				s.log.Info("final report stored", "subject", m.Subject, "tries", i+1, "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if s.opts.Conn.IsClosed() {
			// A closed connection does not come back: nothing to wait for.
			return fmt.Errorf("publish to %s: %w (the connection is closed)", m.Subject, err)
		}
		if i == 0 && refused != nil {
			// Before the stop below: a report whose tries the shutdown
			// ended, tried once or not at all, is spooled all the same.
			refused()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("publish to %s: %w after %d tries over %s: %w", m.Subject, errReportsStopped, i+1,
				time.Since(start).Round(time.Millisecond), err)
		}
		if time.Since(warned) >= unsentWarnAfter {
			warned = time.Now()
			s.log.Warn("final report not stored yet; keeping it and trying again until it is", "error", err, "subject", m.Subject, "tries", i+1, "unsent_for", time.Since(start).Round(time.Second))
		}
		timer := time.NewTimer(publishBackoff[min(i, len(publishBackoff)-1)])
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	}
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
	acks, errs := s.publishAll(ctx, msgs)
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
		acks, errs = s.publishAll(ctx, msgs)
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
