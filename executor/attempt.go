package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
)

// attempt is one attempt running on the worker.
type attempt struct {
	dispatch  schemas.Dispatch
	key       string // the lease key
	lease     []byte // the lease's value, put again on every renewal
	handler   Handler
	hs        *handlerState // nil when the worker has no such handler
	slots     int           // the worker's slots it holds (see Service.slotsOf)
	mutexKey  string        // the mutex key the attempt holds, "" for none
	mutexRev  uint64        // the mutex key's revision, the holder's
	task      *Job
	startedAt time.Time
	ctx       context.Context
	cancel    context.CancelCauseFunc
	log       *slog.Logger // the worker's lines about the attempt
	span      trace.Span   // ax.executor.run (see trace.go)
	hlog      *slog.Logger // the handler's: shipped to AX_LOGS, copied to log

	revision uint64 // the lease's last revision; guarded by leaseKeeper.mu
	released bool   // its slots were given back; guarded by Service.mu
	// renewedAt is when the write of that revision was sent, on the real
	// clock: the server stored it no earlier, so it cannot have aged out
	// before renewedAt + the TTL (see leaseKeeper.restore); guarded by
	// leaseKeeper.mu.
	renewedAt time.Time

	// Its started report (see reportStarted); guarded by reporter.mu.
	started     int           // startedPending, startedSending or startedDone
	startedDue  time.Time     // when it is due, on the real clock
	startedSent chan struct{} // closed once a report being sent is done

	svc *Service // the worker running it
	// progress is its progress reporting: nil until the handler reports
	// progress, endedProgress once the handler returned without.
	progress atomic.Pointer[progressState]
}

// timeoutError is the cause of an attempt's context at its deadline.
type timeoutError struct{ d time.Duration }

func (e timeoutError) Error() string { return "timeout after " + e.d.String() }

// cancelError is the cause of an attempt's context when a control message
// cancels it.
type cancelError struct{ reason string }

func (e cancelError) Error() string {
	if e.reason == "" {
		return "cancelled"
	}
	return "cancelled: " + e.reason
}

// start starts a batch of admitted attempts: the redelivered ones only if
// a dispatcher says they never ran (see fence). It takes a lease for each
// (one publish of the batch, and one wait for its acknowledgements), acks
// them and runs their handlers. The started reports follow StartedDelay
// later, for the attempts still running then (see reportStarted), or
// before the handlers run when StartedDelay is negative. An
// attempt that does not start gives its slots (and its mutex) back.
func (s *Service) start(ctx context.Context, ps []*pending) {
	if len(ps) == 0 {
		return
	}
	// From the fence's question to the ack, the messages are said to be
	// in progress: a fence that waits its 5 s and a lease write that waits
	// on a slow server would otherwise outlast a short ack wait, and the
	// attempt would be delivered again to another worker meanwhile.
	stop := s.keepInProgress(ps)
	if ps = s.fence(ps); len(ps) == 0 {
		stop()
		return
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	now := s.opts.NowFunc()
	lb := s.leases.takeLeases(opCtx, ps, now)
	stop()
	acked := s.confirmAcks(opCtx, ps, lb.errs)
	// The handlers start now, after the lease and the ack's confirmation
	// (two round trips, each a replicated write on a cluster): the start
	// the reports give, and the deadline, count from here.
	started := s.opts.NowFunc()
	as := make([]*attempt, 0, len(ps))
	for i, p := range ps {
		switch err := lb.errs[i]; {
		case err == nil && acked[i] == nil:
			// Register it before it can be reported started, so that a
			// cancel sent on seeing the report finds it.
			as = append(as, s.register(p, lb.keys[i], lb.values[i], lb.acks[i].Sequence, lb.sent, started))
		case err == nil:
			s.taskLogger(&p.d).Warn("the server did not confirm the ack of the dispatch message; "+
				"not running the attempt, whose lease expires unrenewed and is failed as lost", "error", acked[i])
			s.drop(p, keepMsg)
		case isWrongLastSequence(err):
			s.taskLogger(&p.d).Info("attempt is leased already: another delivery runs or ran it; terminating this one")
			s.drop(p, termMsg)
		default:
			// Later, not at once: the next fetch would take it back and
			// likely fail the same way.
			s.taskLogger(&p.d).Error("create lease; giving the dispatch message back for later", "error", err)
			s.drop(p, nakLater)
		}
	}
	s.reports.queueStarted(as, s.opts.StartedDelay)
	for _, a := range as {
		s.runners.Add(1)
		go s.runAttempt(a)
	}
}

// confirmAcks acks, and awaits the server's confirmation of each ack, the
// dispatch messages of ps whose lease was taken (errs[i] nil), all at
// once: one round trip for the batch. The result's i-th entry is nil when
// the server confirmed that message's ack.
//
// A handler runs only after the confirmation. The server confirms an ack
// once it has removed the message from the work queue, a removal written
// to its store like a publish; but it writes its consumers' state (the
// delivery counts among it) only every 100 ms or so. A nats-server killed
// with kill -9 after an unconfirmed ack would give the message again as a
// first delivery (NumDelivered 1, so no fence question), and the leases
// bucket keeps an attempt's history only one TTL past its expiry (the
// bucket's max age removes the expiry marker too): an attempt that had
// run and succeeded ran again. A confirmed ack makes every message that
// comes again one whose handler never ran. An ack the server did not
// confirm leaves the attempt unrun, its lease unrenewed: it expires, and
// the dispatcher fails the attempt as lost and goes on with the next.
//
// Each ack goes as DoubleAck sends it, with a reply subject, and the
// replies of the whole batch come on one subscription (see ackConfirms).
func (s *Service) confirmAcks(ctx context.Context, ps []*pending, errs []error) []error {
	msgs := make([]jetstream.Msg, len(ps))
	send := make([]bool, len(ps))
	for i, p := range ps {
		msgs[i], send[i] = p.msg, errs[i] == nil
	}
	return s.acks.confirm(ctx, s.opts.Conn, msgs, send)
}

// decodeDispatch decodes and checks a dispatch message.
func decodeDispatch(m jetstream.Msg) (schemas.Dispatch, error) {
	d, err := schemas.DecodeDispatch(m.Data())
	if err != nil {
		return d, fmt.Errorf("decode message on %s: %w", m.Subject(), err)
	}
	if d.InstanceID <= 0 || d.Attempt <= 0 {
		return d, fmt.Errorf("dispatch message on %s: instance_id %d and attempt %d must be positive", m.Subject(), d.InstanceID, d.Attempt)
	}
	return d, nil
}

// register makes a leased attempt and adds it to the running set: from now
// on its lease is renewed and a cancel reaches it. The attempt takes over
// the pending attempt's slots and mutex.
func (s *Service) register(p *pending, key string, lease []byte, revision uint64, sent, startedAt time.Time) *attempt {
	d := p.d
	a := &attempt{svc: s, dispatch: d, key: key, lease: lease, startedAt: startedAt, revision: revision, renewedAt: sent,
		handler: p.handler, hs: p.hs, slots: p.slots, mutexKey: p.mutexKey, mutexRev: p.mutexRev}
	a.log = s.taskLogger(&d)
	a.hlog = s.handlerLogger(&a.dispatch, a.log)
	a.span = s.startRun(p)

	ctx, cancel := context.WithCancelCause(trace.ContextWithSpan(s.handlersCtx, a.span))
	var deadline time.Time
	if timeout := d.Timeout(); timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, timeout, timeoutError{timeout})
		deadline, _ = ctx.Deadline()
		cancelAll := cancel
		cancel = func(cause error) {
			cancelAll(cause)
			stop()
		}
	}
	a.ctx, a.cancel = withOnce(withLogger(ctx, a.hlog), &onceScope{s: s, dispatch: &a.dispatch, log: a.hlog}), cancel
	a.task = &Job{
		InstanceID:  d.InstanceID,
		Name:        d.Task,
		Handler:     d.Handler,
		Attempt:     d.Attempt,
		MaxAttempts: d.MaxAttempts,
		EventID:     d.EventID,
		Priority:    d.Priority,
		Payload:     d.Payload,
		FiredAt:     d.FiredAt,
		Deadline:    deadline,
		WorkerID:    s.opts.WorkerID,
		RunID:       d.RunID,
		Parents:     d.Parents,
		ShardIndex:  d.ShardIndex,
		ShardCount:  d.ShardCount,
		run:         a,
		fence:       revision, // the lease create's: see Job.Fence
	}

	s.leases.add(a)
	return a
}

// taskLogger is the worker's logger of one attempt, for what the worker
// says about it. The handler logs through [Service.handlerLogger], whose
// lines ship to AX_LOGS and are copied here.
func (s *Service) taskLogger(d *schemas.Dispatch) *slog.Logger {
	return s.log.With("task", d.Task, "instance_id", d.InstanceID, "attempt", d.Attempt)
}

// runAttempt runs the handler, reports the outcome and stops renewing the
// lease, and releases the mutex once the handler has returned.
func (s *Service) runAttempt(a *attempt) {
	defer s.runners.Done()
	defer a.span.End()
	a.log.Debug("attempt started", "handler", a.dispatch.Handler)
	r := s.invoke(a)
	returned := !r.at.IsZero()
	cause := context.Cause(a.ctx)
	a.cancel(context.Canceled) // release the context's resources; the cause is read
	s.endProgress(a)
	s.reports.settleStarted(a)
	if errors.Is(cause, ErrLeaseLost) {
		if !returned || r.err != nil {
			s.finish(a, returned)
			a.log.Warn("lease lost; the dispatcher has moved on, so the attempt is not reported")
			return
		}
		// A success is reported all the same: a lapsed lease is no proof
		// that the dispatcher moved on. A nats-server that restarts ages
		// every lease out while the dispatchers wait for the reports of
		// the attempts it cut off (dispatcher/outage.go), and a handler
		// that ends as its renewal finds the lease gone did its work.
		// PostgreSQL's guarded write decides: the success counts if its
		// attempt is still the instance's, and is refused as stale if not.
		// Dropping it ran the work again (ax drill system nats-kill).
		s.leases.remove(a) // nothing left to renew
		a.log.Warn("lease lost after the handler succeeded; reporting the success, which counts only if the attempt is still current")
	}
	rep := s.outcome(a, r.out, r.err, cause, r.at)
	rep.Traceparent = traceparentOf(a.span)
	endRun(a.span, &rep, r.err)
	s.flushLogs(a)
	if err := s.reports.final(&a.dispatch, &rep, a.dispatch.ReportBatches); err != nil {
		// Without a report the lease must expire for the dispatcher to move
		// on; a spooled report goes when the worker starts again.
		s.finish(a, returned)
		a.log.Error("report attempt; leaving its lease to expire", "error", err, "outcome", string(rep.Kind), "spooled", s.opts.SpoolDir != "")
		return
	}
	logFinished(a.log, &rep)
	// The report is stored: the lease is no longer renewed, and ages out
	// one TTL after its last renewal. A delete would cost a message and
	// change nothing: the reaper reads the expiry marker either way, and
	// leaves the attempt to its report.
	s.finish(a, returned)
	if rep.Kind == schemas.ReportReleased {
		// A handed-back attempt's lease goes now rather than one TTL
		// later: the worker is leaving, and nothing of the attempt is
		// left running here to be fenced (see leaseKeeper.release).
		s.leases.release(a)
	}
}

// finish releases the attempt's mutex, before its slots so that the next
// attempt with the key may start at once, then its slots and its place on
// the running set. A handler that did not return (it was abandoned) may
// still run: its mutex expires with its TTL instead.
func (s *Service) finish(a *attempt, returned bool) {
	if returned {
		s.unlockAttemptMutex(a)
	}
	s.release(a)
}

// logFinished logs the outcome of an attempt whose final report is stored.
func logFinished(log *slog.Logger, rep *schemas.Report) {
	// A success is a line per run: debug. Failures and hand-backs warn.
	level, attrs := slog.LevelDebug, []any{}
	if rep.Kind == schemas.ReportFailed || rep.Kind == schemas.ReportReleased {
		level = slog.LevelWarn
	}
	// The success's line is built only when the logger takes debug: a
	// line per run costs allocations a busy executor does not owe.
	if !log.Enabled(context.Background(), level) {
		return
	}
	switch rep.Kind {
	case schemas.ReportFailed:
		attrs = []any{"error", rep.Error, "permanent", rep.Permanent}
	case schemas.ReportReleased:
		attrs = []any{"reason", rep.Error}
	}
	log.Log(context.Background(), level, "attempt finished", append(attrs, "outcome", string(rep.Kind), "duration", rep.At.Sub(rep.StartedAt))...)
}

// release takes the attempt off the running set: its lease is no longer
// renewed and its slots are free. Releasing it again changes nothing.
func (s *Service) release(a *attempt) {
	s.leases.remove(a)
	s.mu.Lock()
	if !a.released {
		a.released = true
		s.held -= a.slots
		if a.hs != nil {
			a.hs.busy--
		}
	}
	s.mu.Unlock()
	signal(s.freed)
}

// unlockAttemptMutex releases the attempt's mutex key, if it holds one.
func (s *Service) unlockAttemptMutex(a *attempt) {
	if a.mutexRev != 0 {
		s.mutex.unlock(a.mutexKey, a.mutexRev, a.log)
	}
}

type result struct {
	out any
	err error
	at  time.Time // when the handler returned
}

// invoke calls the handler on its own goroutine, recovering a panic. It
// returns when the handler does, with the time it did, or abandonAfter
// after the attempt's context ended if the handler ignores that; the
// result's time is zero then.
func (s *Service) invoke(a *attempt) result {
	done := make(chan result, 1)
	s.handlers.Add(1)
	go func() {
		defer s.handlers.Done()
		defer func() {
			if r := recover(); r != nil {
				a.hlog.Error("handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- result{err: fmt.Errorf("handler panicked: %v", r), at: time.Now()}
			}
		}()
		if err := s.openTask(a.task); err != nil {
			done <- result{err: Permanent(err), at: time.Now()}
			return
		}
		out, err := a.handler.HandleTask(a.ctx, a.task)
		done <- result{out, err, time.Now()}
	}()
	select {
	case r := <-done:
		return r
	case <-a.ctx.Done():
	}
	timer := time.NewTimer(abandonAfter)
	defer timer.Stop()
	select {
	case r := <-done:
		return r
	case <-timer.C:
		s.abandoned.Add(1)
		a.log.Error("handler did not return after its context ended; abandoning it and reporting the attempt", "error", context.Cause(a.ctx), "waited", abandonAfter)
		return result{err: context.Cause(a.ctx)}
	}
}

// outcome builds the final report of an attempt from the handler's result,
// the cause of its context's end, if it ended, and when the handler
// returned (zero if it was abandoned). A result returned after the
// attempt's deadline is a timeout, whatever it is: the attempt failed at
// its timeout, as the task says, and a handler that ignores its deadline
// must not succeed inside the grace the dispatcher gives the executor.
func (s *Service) outcome(a *attempt, out any, err error, cause error, returnedAt time.Time) schemas.Report {
	rep := schemas.Report{InstanceID: a.dispatch.InstanceID, Attempt: a.dispatch.Attempt, WorkerID: s.opts.WorkerID,
		StartedAt: a.startedAt, At: s.opts.NowFunc(), Kind: schemas.ReportFailed}
	var timeout timeoutError
	switch {
	case err == nil && errors.As(cause, &timeout) && returnedAt.After(a.task.Deadline):
		rep.Error = fmt.Sprintf("%s (the handler ignored its deadline and returned a result %v after it)",
			timeout.Error(), returnedAt.Sub(a.task.Deadline).Round(time.Millisecond))
	case err == nil:
		output, encErr := encodeOutput(out)
		if encErr == nil {
			output, encErr = s.sealOutput(output)
		}
		if encErr != nil {
			rep.Error, rep.Permanent = encErr.Error(), true
			return rep
		}
		rep.Kind, rep.Output = schemas.ReportSucceeded, output
	case errors.Is(cause, errShuttingDown):
		// The worker is leaving and its shutdown timeout passed: the
		// attempt is handed back, to run again elsewhere without
		// spending one of its attempts.
		rep.Kind = schemas.ReportReleased
		rep.Error = fmt.Sprintf("handed back: worker %s stopped and its shutdown timeout of %v passed before the handler returned",
			s.opts.WorkerID, s.opts.ShutdownTimeout)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errShuttingDown) {
			rep.Error += " (handler returned: " + err.Error() + ")"
		}
	case cause != nil && !errors.Is(cause, context.Canceled):
		// The deadline, an operator's cancel or the shutdown ended the
		// attempt: that is the outcome, whatever the handler made of it.
		rep.Error = cause.Error()
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, cause) {
			rep.Error += " (handler returned: " + err.Error() + ")"
		}
	default:
		rep.Error, rep.Permanent = err.Error(), IsPermanent(err)
		if d, ok := retryAfter(err); ok && !rep.Permanent {
			// At least 1 ms: 0 on the wire means the backoff.
			rep.RetryAfterMS = max(d.Milliseconds(), 1)
		}
		if rep.Error == "" {
			rep.Error = "the handler returned an error with an empty message"
		}
	}
	return rep
}
