package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// leaseLost is the reason recorded on an attempt whose lease expired.
const leaseLost = "lease expired: the worker stopped renewing it (it died, hung or lost its connection)"

// reap fails the attempts whose worker is gone or that outlived their timeout.
//
// Lost workers: the reaper reads w, the watch of the leases bucket that Run
// began before it consumed a firing, where an expiry reaches
// the watcher as a purge marker (the bucket has limit markers on), so it waits
// on events instead of polling. At start it also sweeps the running attempts
// whose lease vanished while no dispatcher was watching.
//
// A lease the executor retired (stopped renewing) after its final report was
// stored ages into the same marker, and that report may still wait, unrecorded,
// in AX_REPORTS (a dispatcher died holding it, PostgreSQL is down, a
// backlog). So a marker is only a candidate: [Service.expireLeases] reads
// PostgreSQL, then looks in AX_REPORTS, and fails only an attempt that is
// still unfinished and whose final report is not there.
//
// Timeouts: the executor ends a handler's context at its deadline and reports
// the failure itself. An attempt still RUNNING TimeoutGrace after its
// deadline is one whose executor did not (it hangs but renews its lease): once
// a TimeoutCheck the reaper looks for such attempts with one indexed query,
// fails them — unless their final report waits in AX_REPORTS — and tells
// their worker to stop, so the old run cannot go on beside a retry.
//
// Whatever the reaper could not apply (PostgreSQL or the stream failing) it
// keeps and tries again every retryDelay; it never drops an expiry.
func (s *Service) reap(ctx, work context.Context, leases jetstream.KeyValue, w jetstream.KeyWatcher, reports jetstream.Stream) error {
	defer func() { _ = w.Stop() }()
	status, err := leases.Status(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", s.top.LeasesBucket(), err)
	}
	s.reconnects.start(s.opts.Conn.Stats().Reconnects, status.TTL())
	s.book.retains(status.TTL())
	s.deaths.leaseTTL.Store(int64(status.TTL()))

	// holders are the workers the live leases name, by attempt, read from
	// the watch's puts: an attempt that has not reported started has no
	// worker in the store, and the worker of a lapsed lease is suspended
	// and its own queue routed again (see failAttempts). The fence reads
	// them too (see fence.go).
	r := &reaping{s: s, leases: leases, reports: reports, holders: s.book, missing: make(vanishedLeases), retry: time.NewTimer(0)}
	defer r.retry.Stop()
	timeouts := time.NewTicker(s.opts.TimeoutCheck)
	defer timeouts.Stop()
	vanished := time.NewTicker(max(status.TTL(), time.Second))
	defer vanished.Stop()
	for {
		r.step(work)
		select {
		case <-ctx.Done():
			return nil
		case <-r.retry.C:
		case <-timeouts.C:
			s.checkOverdue(work, reports)
		case <-vanished.C:
			r.lost = s.appendVanished(work, leases, r.missing, r.lost)
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", s.top.LeasesBucket())
			}
			r.lost = s.appendExpiry(r.lost, r.holders, e)
			r.drain(w)
		}
	}
}

// reaping is the reaper's state between two steps: the attempts whose
// leases lapsed, not yet failed, and what it has done once.
type reaping struct {
	s       *Service
	leases  jetstream.KeyValue
	reports jetstream.Stream
	holders *leaseBook
	// lost are the attempts whose leases lapsed, to fail; missing the
	// leases found gone without their marker (see appendVanished).
	lost    []store.Failure
	missing vanishedLeases
	// swept and promoted say that the sweep of the leases and the
	// promotion of leftover waiting instances, done once at start, are.
	swept, promoted bool
	// retry fires the next step after a failure, or after a grace.
	retry *time.Timer
}

// step does what is due: the sweep and the promotion until they succeed
// once, and the failure of the lost attempts, unless in or just back from
// an outage (their holders' final reports may still come, see outage.go).
func (r *reaping) step(work context.Context) {
	s := r.s
	if !r.swept {
		if gone, err := s.sweepLeases(work, r.leases); err != nil {
			r.failed(err, "sweeping leases failed; trying again", 0)
		} else {
			r.lost = append(r.lost, gone...)
			r.swept = true
		}
	}
	if !r.promoted {
		if err := s.promoteLeftovers(work); err != nil {
			r.failed(err, "promoting waiting instances failed; trying again", 0)
		} else {
			r.promoted = true
		}
	}
	// graceLeft is asked on every step: it dates a reconnection it sees.
	left := s.graceLeft()
	if len(r.lost) == 0 {
		return
	}
	if left > 0 {
		r.retry.Reset(left)
		return
	}
	if err := s.expireLeases(work, r.reports, r.lost, r.holders); err != nil {
		r.failed(err, "expiring leases failed; trying again", len(r.lost))
		return
	}
	r.holders.forget(r.lost)
	r.lost = r.lost[:0]
}

// failed counts and logs a step that failed (msg; leases, when not 0,
// the lapsed leases it was failing), and tries again after retryDelay.
func (r *reaping) failed(err error, msg string, leases int) {
	r.s.metrics.batchFailures.WithLabelValues("reaper").Inc()
	ev := r.s.log.Error().Err(err)
	if leases > 0 {
		ev = ev.Int("leases", leases)
	}
	ev.Msg(msg)
	r.retry.Reset(retryDelay)
}

// drain adds to the lost attempts the lease expiries the watch w holds
// already, up to a batch.
func (r *reaping) drain(w jetstream.KeyWatcher) {
	for len(r.lost) < r.s.opts.BatchSize {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			r.lost = r.s.appendExpiry(r.lost, r.holders, e)
		default:
			return
		}
	}
}

// checkOverdue fails the attempts that outlived their timeout, unless in
// or just back from an outage: an overdue attempt's final report may be
// held by its worker until JetStream takes it (see outage.go).
func (s *Service) checkOverdue(work context.Context, reports jetstream.Stream) {
	if s.graceLeft() > 0 {
		return
	}
	if err := s.failOverdue(work, reports); err != nil {
		s.metrics.batchFailures.WithLabelValues("reaper").Inc()
		s.log.Error().Err(err).Msg("failing overdue attempts failed; trying again")
	}
}

// expireLeases fails the attempts whose lease expired, except those that
// ended meanwhile and those whose final report waits in AX_REPORTS. The
// order is what makes a concurrent recording safe: PostgreSQL first (only
// unfinished attempts cost a stream lookup), then the stream, then the
// guarded write. The recorder acknowledges a report only after its
// transaction committed, so a report gone from the stream between the read
// and the lookup was recorded, and the guard turns the write into a no-op.
func (s *Service) expireLeases(ctx context.Context, reports jetstream.Stream, lost []store.Failure, holders *leaseBook) error {
	live, err := s.opts.Store.UnfinishedAttempts(ctx, lost)
	if err != nil || len(live) == 0 {
		return err
	}
	dead, err := s.withoutFinalReport(ctx, reports, live, "lease expired")
	if err != nil || len(dead) == 0 {
		return err
	}
	// Their workers died: see deaths.go for what a death costs.
	dead, deaths, err := s.deaths.judgeDeaths(ctx, dead, holders)
	if err != nil {
		return err
	}
	return s.failAttempts(ctx, dead, nil, holders, deaths, "lease expired")
}

// appendExpiry adds to lost the attempt whose lease e is the expiry marker
// of, and notes in holders the worker a lease's first put names (or that
// it was put, when it names none).
func (s *Service) appendExpiry(lost []store.Failure, holders *leaseBook, e jetstream.KeyValueEntry) []store.Failure {
	if e == nil {
		// The end of the bucket's current state: from now on the holders
		// hold every lease put since the watch began.
		holders.synced()
		return lost
	}
	id, attempt, ok := streams.ParseLeaseKey(e.Key())
	if !ok {
		return lost
	}
	key := [2]int64{id, int64(attempt)}
	switch e.Operation() {
	case jetstream.KeyValuePut:
		if !holders.known(key) {
			// The first put: a renewal names the same worker.
			l, _ := schemas.DecodeLeaseFrom(e.Value(), holders.lastWorker())
			holders.put(key, l.WorkerID)
		}
		return lost
	case jetstream.KeyValuePurge:
		holders.expired(key)
		return append(lost, store.Failure{InstanceID: id, Attempt: attempt, Reason: leaseLost, At: s.now()})
	default: // deleted by an executor that retires its leases so
		holders.forget([]store.Failure{{InstanceID: id, Attempt: attempt}})
		return lost
	}
}

// failOverdue fails the attempts that outlived their timeout and tells their
// workers to stop them.
// An overdue attempt whose final report waits in AX_REPORTS is left to
// that report: its executor did stop it.
func (s *Service) failOverdue(ctx context.Context, reports jetstream.Stream) error {
	overdue, err := s.opts.Store.OverdueAttempts(ctx, s.opts.TimeoutGrace)
	if err != nil || len(overdue) == 0 {
		return err
	}
	failures := make([]store.Failure, len(overdue))
	workers := make(map[[2]int64]string, len(overdue))
	for i, o := range overdue {
		failures[i] = store.Failure{InstanceID: o.InstanceID, Attempt: o.Attempt, At: s.now(),
			Reason: fmt.Sprintf("timeout: the attempt outlived its timeout of %v and its executor did not stop it", o.Timeout)}
		workers[[2]int64{o.InstanceID, int64(o.Attempt)}] = o.WorkerID
	}
	failures, err = s.withoutFinalReport(ctx, reports, failures, "timeout")
	if err != nil || len(failures) == 0 {
		return err
	}
	return s.failAttempts(ctx, failures, workers, nil, nil, "timeout")
}

// reportLookups bounds the concurrent AX_REPORTS lookups of one reaper pass.
const reportLookups = 16

// withoutFinalReport returns those of in whose final report is not in
// AX_REPORTS. The others are counted and logged as left to their report;
// cause names the reaper's reason to look at them. Any failed lookup fails
// the whole pass: an attempt is never failed on a guess.
func (s *Service) withoutFinalReport(ctx context.Context, reports jetstream.Stream, in []store.Failure, cause string) ([]store.Failure, error) {
	waiting := make([]bool, len(in))
	errs := make([]error, len(in))
	sem := make(chan struct{}, reportLookups)
	var wg sync.WaitGroup
	for i, f := range in {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			waiting[i], errs[i] = s.finalReportWaits(ctx, reports, f.InstanceID, f.Attempt)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("look for final reports in %s: %w", s.top.ReportsStream(), err)
		}
	}
	if slices.Contains(waiting, false) {
		// The others' final reports may wait in a batch: one read of the
		// batches waiting serves them all.
		batched, err := s.batchedFinals(ctx, reports)
		if err != nil {
			return nil, fmt.Errorf("look for final reports in %s: %w", s.top.ReportsStream(), err)
		}
		for i, f := range in {
			waiting[i] = waiting[i] || batched[[2]int64{f.InstanceID, int64(f.Attempt)}]
		}
	}
	out := make([]store.Failure, 0, len(in))
	left := 0
	for i, f := range in {
		if !waiting[i] {
			out = append(out, f)
			continue
		}
		left++
		s.log.Debug().Int64("instance_id", f.InstanceID).Int("attempt", f.Attempt).Str("cause", cause).
			Msg("final report waits in AX_REPORTS; the attempt is left to it")
	}
	if left > 0 {
		s.metrics.reaperLeft.WithLabelValues(cause).Add(float64(left))
		s.log.Info().Int("attempts", left).Str("cause", cause).
			Msg("attempts not failed: their final reports wait in AX_REPORTS to be recorded")
	}
	return out, nil
}

// finalReportWaits reports whether AX_REPORTS holds a final report of the
// attempt on its own subject (see [Service.batchedFinals] for those in
// batches).
func (s *Service) finalReportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int) (bool, error) {
	return s.singleReportWaits(ctx, reports, instanceID, attempt, true)
}

// reportWaits reports whether AX_REPORTS holds a report of the attempt: a
// final one when final, else one of any kind; on the attempt's own
// subject, or in a batch.
func (s *Service) reportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int, final bool) (bool, error) {
	waits, err := s.singleReportWaits(ctx, reports, instanceID, attempt, final)
	if waits || err != nil {
		return waits, err
	}
	batched, err := s.batchedFinals(ctx, reports)
	return batched[[2]int64{instanceID, int64(attempt)}], err
}

// batchedFinals returns the attempts whose final report waits in a report
// batch in AX_REPORTS. The batches of every pool and worker match one
// subject pattern, and the stream, a work queue, holds only those not yet
// recorded (a batch is acknowledged once all its reports are applied or
// refused): a few, each read once, in order. An item that its subject's
// worker could not have sent is refused when recorded, and counts here all
// the same, as a single report on another worker's subject does.
func (s *Service) batchedFinals(ctx context.Context, reports jetstream.Stream) (map[[2]int64]bool, error) {
	subject := s.top.AllReportBatches()
	finals := make(map[[2]int64]bool)
	for seq := uint64(1); ; {
		m, err := reports.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return finals, nil
		}
		if err != nil {
			return nil, err
		}
		if b, err := schemas.DecodeReportBatch(m.Data); err == nil {
			for _, r := range b.Reports {
				if r.Kind.IsFinal() {
					finals[[2]int64{r.InstanceID, int64(r.Attempt)}] = true
				}
			}
		}
		seq = m.Sequence + 1
	}
}

// singleReportWaits reports whether AX_REPORTS holds a report of the
// attempt on its own subject: a final one when final, else one of any
// kind. The reports of an instance match one subject pattern (any pool,
// any worker: a report of another is refused when recorded), and the stream, a
// work queue, holds only those not yet recorded: the last one is looked at
// first (usually the answer), then, if it is another, each one in turn.
func (s *Service) singleReportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int, final bool) (bool, error) {
	subject := s.top.InstanceReports(instanceID)
	last, err := reports.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if isReportOf(last.Data, instanceID, attempt, final) {
		return true, nil
	}
	for seq := uint64(1); seq < last.Sequence; {
		m, err := reports.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if m.Sequence >= last.Sequence {
			return false, nil
		}
		if isReportOf(m.Data, instanceID, attempt, final) {
			return true, nil
		}
		seq = m.Sequence + 1
	}
	return false, nil
}

// isReportOf reports whether data is a report of the attempt, a final one
// when final.
func isReportOf(data []byte, instanceID int64, attempt int, final bool) bool {
	r, err := schemas.DecodeReport(data)
	if err != nil {
		return false
	}
	return r.InstanceID == instanceID && r.Attempt == attempt && (!final || r.Kind.IsFinal())
}

// failAttempts fails attempts as the reaper, fires the next attempt of
// those with attempts left and the tasks chained after those that ended. A
// lost worker's next attempt waits by [deathJudge.deathWait] (a moment for an
// attempt that is not a suspect: the handler did not fail), while an
// overdue one waits by the task's backoff. workers, when set, names the
// worker of each attempt to tell to stop; holders, for lapsed leases, the
// worker each lease named, for the attempts the store knows no worker of,
// and deaths the verdict on each (see deaths.go); cause is why, in a word.
func (s *Service) failAttempts(ctx context.Context, failures []store.Failure, workers map[[2]int64]string, holders *leaseBook,
	deaths map[[2]int64]verdict, cause string) error {
	outcomes, err := s.opts.Store.FailAttempts(ctx, failures)
	if err != nil {
		return err
	}
	quarantine := make(map[[2]int64]bool)
	for _, f := range failures {
		if f.Quarantine {
			quarantine[[2]int64{f.InstanceID, int64(f.Attempt)}] = true
		}
	}
	batch := s.pub.Batch()
	var ended []store.RunEnd
	for _, o := range outcomes {
		if e, ok := outcomeEnd(o); ok {
			ended = append(ended, e)
		}
		holder := o.WorkerID
		if holder == "" {
			holder = holders.holder([2]int64{o.InstanceID, int64(o.Attempt)})
		}
		if o.Applied && workers == nil && holder != "" && s.workers.suspend(holder) {
			// Its lease lapsed: no retry goes back to it, and what waits
			// on its own queue is routed again.
			s.metrics.workerDeaths.Inc()
			s.departed(holder)
		}
		if o.Applied && o.State == schemas.StateFailed && quarantine[[2]int64{o.InstanceID, int64(o.Attempt)}] {
			s.metrics.quarantined.Inc()
		}
		if o.Applied {
			s.log.Warn().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Str("task", o.Task).
				Str("state", string(o.State)).Str("cause", cause).Msg("attempt failed by the reaper")
			if w := workers[[2]int64{o.InstanceID, int64(o.Attempt)}]; w != "" {
				s.cancelAttempt(w, o, cause)
			}
		}
		if o.State == schemas.StateRetrying && o.CurrentAttempt == o.Attempt {
			var wait time.Duration
			hold := false
			if workers != nil {
				wait = backoff(o.RetryPolicy, o.Attempt, s.opts.RandFunc)
			} else {
				v := deaths[[2]int64{o.InstanceID, int64(o.Attempt)}]
				wait, hold = s.deaths.deathWait(v, backoff(o.RetryPolicy, o.Attempt, s.opts.RandFunc)), v.deaths < suspectAfter
			}
			if err := s.retryAfter(batch, o, wait, hold); err != nil {
				return err
			}
		}
	}
	promoted, err := s.afterEnds(ctx, batch, ended)
	if err != nil {
		return err
	}
	return s.publishAttempts(ctx, batch, promoted)
}

// promoteLeftovers starts the waiting instances that a slot freed for while
// no dispatcher ran (or whose promotion a crash lost).
func (s *Service) promoteLeftovers(ctx context.Context) error {
	tasks, err := s.opts.Store.WaitingTasks(ctx)
	if err != nil || len(tasks) == 0 {
		return err
	}
	promoted, err := s.opts.Store.PromoteWaiting(ctx, tasks)
	if err != nil {
		return err
	}
	return s.publishAttempts(ctx, s.pub.Batch(), promoted)
}

// sweepLeases finds running attempts whose lease is gone — expired while no
// dispatcher watched, past the bucket's marker retention, or retired by an
// executor that finished: they are candidates, which [Service.expireLeases]
// checks like any expiry.
func (s *Service) sweepLeases(ctx context.Context, leases jetstream.KeyValue) ([]store.Failure, error) {
	status, err := leases.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	running, err := s.opts.Store.RunningAttempts(ctx, s.now().Add(-status.TTL()))
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	var gone []store.Failure
	for _, r := range running {
		_, err := leases.Get(ctx, streams.LeaseKey(r.InstanceID, r.Attempt))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			gone = append(gone, store.Failure{InstanceID: r.InstanceID, Attempt: r.Attempt, Reason: leaseLost, At: s.now()})
		case err != nil:
			return nil, fmt.Errorf("sweep leases: %w", err)
		}
	}
	return gone, nil
}
