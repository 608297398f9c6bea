package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// reaper is the part of the dispatcher that watches the leases (see
// [reaper.reap]): it fails the attempts whose worker died, judged by its
// deathJudge, and those that outlived their timeout, sweeps what vanished
// (rollups.go), holds its hand in an outage (outage.go) and answers the
// fence's questions (fence.go). It hands what a failure sets going to
// next, and a worker that died to departed.
type reaper struct {
	store *store.Store
	top   streams.Topology
	conn  *nats.Conn
	// js is the dispatcher's JetStream context, set by Run.
	js jetstream.JetStream
	// streams returns the topology settings as Run follows them.
	streams                    func() streams.Config
	timeoutCheck, timeoutGrace time.Duration
	batchSize                  int
	// book is what the watch learned of the leases, which the fence
	// reads (see fence.go).
	book *leaseBook
	// workers is the live view of ax-workers: a worker whose lease
	// lapsed is suspended, a stale one departs.
	workers *liveWorkers
	deaths  *deathJudge
	// reconnects dates the connection's reconnections, after which the
	// reaper and the fence give the holders of lapsed leases a grace (see
	// outage.go); writes dates the refusals of the dispatcher's writes to
	// the leases bucket.
	reconnects reconnects
	writes     writeHealth
	// rollupWarnings note the buckets whose roll-up was logged (see
	// rollups.go).
	rollupWarnings
	now      func() time.Time
	rand     func() float64
	log      zerolog.Logger
	metrics  *metrics
	next     completer
	departed func(workerID string)
	tracing  tracing
	// unsent are the failures applied in part, kept to apply again.
	unsent *unsentFailures
}

// timeoutPrefix begins the reason recorded on an attempt that outlived its
// timeout.
const timeoutPrefix = "timeout:"

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
// backlog). So a marker is only a candidate: [reaper.expireLeases] reads
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
func (rp *reaper) reap(ctx, work context.Context, leases jetstream.KeyValue, w jetstream.KeyWatcher, reports jetstream.Stream) error {
	defer func() { _ = w.Stop() }()
	status, err := leases.Status(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", rp.top.LeasesBucket(), err)
	}
	rp.reconnects.start(rp.conn.Stats().Reconnects, status.TTL())
	rp.book.retains(status.TTL())
	rp.deaths.leaseTTL.Store(int64(status.TTL()))

	// holders are the workers the live leases name, by attempt, read from
	// the watch's puts: an attempt that has not reported started has no
	// worker in the store, and the worker of a lapsed lease is suspended
	// and its own queue routed again (see failAttempts). The fence reads
	// them too (see fence.go).
	r := &reaping{rp: rp, leases: leases, reports: reports, holders: rp.book, missing: make(vanishedLeases), retry: time.NewTimer(0)}
	defer r.retry.Stop()
	timeouts := time.NewTicker(rp.timeoutCheck)
	defer timeouts.Stop()
	vanished := time.NewTicker(max(status.TTL(), time.Second))
	defer vanished.Stop()
	recovery := time.NewTicker(recoverEvery)
	defer recovery.Stop()
	for {
		r.step(work)
		select {
		case <-ctx.Done():
			return nil
		case <-r.retry.C:
		case <-rp.unsent.wake:
		case <-timeouts.C:
			rp.checkOverdue(work, reports)
		case <-vanished.C:
			r.lost = rp.appendVanished(work, leases, r.missing, r.lost)
		case <-recovery.C:
			r.recovered = false
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", rp.top.LeasesBucket())
			}
			r.lost = rp.appendExpiry(r.lost, r.holders, e)
			r.drain(w)
		}
	}
}

// reaping is the reaper's state between two steps: the attempts whose
// leases lapsed, not yet failed, and what it has done once.
type reaping struct {
	rp      *reaper
	leases  jetstream.KeyValue
	reports jetstream.Stream
	holders *leaseBook
	// lost are the attempts whose leases lapsed, to fail; missing the
	// leases found gone without their marker (see appendVanished).
	lost    []store.Failure
	missing vanishedLeases
	// swept and promoted say that the sweep of the leases and the
	// promotion of leftover waiting instances, done once at start, are;
	// recovered that the lost retries were looked for, at start and each
	// recoverEvery.
	swept, promoted, recovered bool
	// recoverFrom is the instance id after which the next look for lost
	// retries begins.
	recoverFrom int64
	// retry fires the next step after a failure, or after a grace.
	retry *time.Timer
}

// step does what is due: the sweep and the promotion until they succeed
// once, and the failure of the lost attempts, unless in or just back from
// an outage (their holders' final reports may still come, see outage.go).
func (r *reaping) step(work context.Context) {
	rp := r.rp
	if rp.unsent.len() > 0 {
		if err := rp.applyUnsent(work); err != nil {
			r.failed(err, "applying failed attempts again failed; trying again", 0)
		}
	}
	if !r.swept {
		if gone, err := rp.sweepLeases(work, r.leases); err != nil {
			r.failed(err, "sweeping leases failed; trying again", 0)
		} else {
			r.lost = append(r.lost, gone...)
			r.swept = true
		}
	}
	if !r.promoted {
		if err := rp.promoteLeftovers(work); err != nil {
			r.failed(err, "promoting waiting instances failed; trying again", 0)
		} else {
			r.promoted = true
		}
	}
	// graceLeft is asked on every step: it dates a reconnection it sees.
	left := rp.graceLeft()
	if !r.recovered && left == 0 {
		if next, err := rp.recoverRetries(work, r.recoverFrom); err != nil {
			r.failed(err, "recovering lost retries failed; trying again", 0)
		} else {
			r.recovered, r.recoverFrom = true, next
		}
	}
	if len(r.lost) == 0 {
		return
	}
	if left > 0 {
		r.retry.Reset(left)
		return
	}
	if err := rp.expireLeases(work, r.reports, r.lost, r.holders); err != nil {
		r.failed(err, "expiring leases failed; trying again", len(r.lost))
		return
	}
	r.holders.forget(r.lost)
	r.lost = r.lost[:0]
}

// failed counts and logs a step that failed (msg; leases, when not 0,
// the lapsed leases it was failing), and tries again after retryDelay.
func (r *reaping) failed(err error, msg string, leases int) {
	r.rp.metrics.batchFailures.WithLabelValues("reaper").Inc()
	ev := r.rp.log.Error().Err(err)
	if leases > 0 {
		ev = ev.Int("leases", leases)
	}
	ev.Msg(msg)
	r.retry.Reset(retryDelay)
}

// drain adds to the lost attempts the lease expiries the watch w holds
// already, up to a batch.
func (r *reaping) drain(w jetstream.KeyWatcher) {
	for len(r.lost) < r.rp.batchSize {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			r.lost = r.rp.appendExpiry(r.lost, r.holders, e)
		default:
			return
		}
	}
}

// checkOverdue fails the attempts that outlived their timeout, unless in
// or just back from an outage: an overdue attempt's final report may be
// held by its worker until JetStream takes it (see outage.go).
func (rp *reaper) checkOverdue(work context.Context, reports jetstream.Stream) {
	if rp.graceLeft() > 0 {
		return
	}
	if err := rp.failOverdue(work, reports); err != nil {
		rp.metrics.batchFailures.WithLabelValues("reaper").Inc()
		rp.log.Error().Err(err).Msg("failing overdue attempts failed; trying again")
	}
}

// expireLeases fails the attempts whose lease expired, except those that
// ended meanwhile and those whose final report waits in AX_REPORTS. The
// order is what makes a concurrent recording safe: PostgreSQL first (only
// unfinished attempts cost a stream lookup), then the stream, then the
// guarded write. The recorder acknowledges a report only after its
// transaction committed, so a report gone from the stream between the read
// and the lookup was recorded, and the guard turns the write into a no-op.
func (rp *reaper) expireLeases(ctx context.Context, reports jetstream.Stream, lost []store.Failure, holders *leaseBook) error {
	live, err := rp.store.UnfinishedAttempts(ctx, lost)
	if err != nil || len(live) == 0 {
		return err
	}
	dead, err := rp.withoutFinalReport(ctx, reports, live, "lease expired")
	if err != nil || len(dead) == 0 {
		return err
	}
	// Their workers died: see deaths.go for what a death costs.
	dead, deaths, err := rp.deaths.judgeDeaths(ctx, dead, holders)
	if err != nil {
		return err
	}
	return rp.failAttempts(ctx, dead, nil, holders, deaths, "lease expired")
}

// appendExpiry adds to lost the attempt whose lease e is the expiry marker
// of, and notes in holders the worker a lease's first put names (or that
// it was put, when it names none).
func (rp *reaper) appendExpiry(lost []store.Failure, holders *leaseBook, e jetstream.KeyValueEntry) []store.Failure {
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
		return append(lost, store.Failure{InstanceID: id, Attempt: attempt, Reason: leaseLost, At: rp.now()})
	default: // deleted by an executor that retires its leases so
		holders.forget([]store.Failure{{InstanceID: id, Attempt: attempt}})
		return lost
	}
}

// failOverdue fails the attempts that outlived their timeout and tells their
// workers to stop them.
// An overdue attempt whose final report waits in AX_REPORTS is left to
// that report: its executor did stop it.
func (rp *reaper) failOverdue(ctx context.Context, reports jetstream.Stream) error {
	overdue, err := rp.store.OverdueAttempts(ctx, rp.timeoutGrace)
	if err != nil || len(overdue) == 0 {
		return err
	}
	failures := make([]store.Failure, len(overdue))
	workers := make(map[[2]int64]string, len(overdue))
	for i, o := range overdue {
		failures[i] = store.Failure{InstanceID: o.InstanceID, Attempt: o.Attempt, At: rp.now(),
			Reason: fmt.Sprintf(timeoutPrefix+" the attempt outlived its timeout of %v and its executor did not stop it", o.Timeout)}
		workers[[2]int64{o.InstanceID, int64(o.Attempt)}] = o.WorkerID
	}
	failures, err = rp.withoutFinalReport(ctx, reports, failures, "timeout")
	if err != nil || len(failures) == 0 {
		return err
	}
	return rp.failAttempts(ctx, failures, workers, nil, nil, "timeout")
}

// reportLookups bounds the concurrent AX_REPORTS lookups of one reaper pass.
const reportLookups = 16

// withoutFinalReport returns those of in whose final report is not in
// AX_REPORTS. The others are counted and logged as left to their report;
// cause names the reaper's reason to look at them. Any failed lookup fails
// the whole pass: an attempt is never failed on a guess.
func (rp *reaper) withoutFinalReport(ctx context.Context, reports jetstream.Stream, in []store.Failure, cause string) ([]store.Failure, error) {
	waiting := make([]bool, len(in))
	errs := make([]error, len(in))
	sem := make(chan struct{}, reportLookups)
	var wg sync.WaitGroup
	for i, f := range in {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			waiting[i], errs[i] = rp.finalReportWaits(ctx, reports, f.InstanceID, f.Attempt)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("look for final reports in %s: %w", rp.top.ReportsStream(), err)
		}
	}
	if slices.Contains(waiting, false) {
		// The others' final reports may wait in a batch: one read of the
		// batches waiting serves them all.
		batched, err := rp.batchedFinals(ctx, reports)
		if err != nil {
			return nil, fmt.Errorf("look for final reports in %s: %w", rp.top.ReportsStream(), err)
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
		rp.log.Debug().Int64("instance_id", f.InstanceID).Int("attempt", f.Attempt).Str("cause", cause).
			Msg("final report waits in AX_REPORTS; the attempt is left to it")
	}
	if left > 0 {
		rp.metrics.reaperLeft.WithLabelValues(cause).Add(float64(left))
		rp.log.Info().Int("attempts", left).Str("cause", cause).
			Msg("attempts not failed: their final reports wait in AX_REPORTS to be recorded")
	}
	return out, nil
}

// finalReportWaits reports whether AX_REPORTS holds a final report of the
// attempt on its own subject (see [reaper.batchedFinals] for those in
// batches).
func (rp *reaper) finalReportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int) (bool, error) {
	return rp.singleReportWaits(ctx, reports, instanceID, attempt, true)
}

// reportWaits reports whether AX_REPORTS holds a report of the attempt: a
// final one when final, else one of any kind; on the attempt's own
// subject, or in a batch.
func (rp *reaper) reportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int, final bool) (bool, error) {
	waits, err := rp.singleReportWaits(ctx, reports, instanceID, attempt, final)
	if waits || err != nil {
		return waits, err
	}
	batched, err := rp.batchedFinals(ctx, reports)
	return batched[[2]int64{instanceID, int64(attempt)}], err
}

// batchedFinals returns the attempts whose final report waits in a report
// batch in AX_REPORTS. The batches of every pool and worker match one
// subject pattern, and the stream, a work queue, holds only those not yet
// recorded (a batch is acknowledged once all its reports are applied or
// refused): a few, each read once, in order. An item that its subject's
// worker could not have sent is refused when recorded, and counts here all
// the same, as a single report on another worker's subject does.
func (rp *reaper) batchedFinals(ctx context.Context, reports jetstream.Stream) (map[[2]int64]bool, error) {
	subject := rp.top.AllReportBatches()
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
func (rp *reaper) singleReportWaits(ctx context.Context, reports jetstream.Stream, instanceID int64, attempt int, final bool) (bool, error) {
	subject := rp.top.InstanceReports(instanceID)
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
// A failure whose write committed but whose publishes failed is kept for
// the reaper's loop, which applies it again until it is (see unsent.go),
// and its error returned. One whose write failed is not: its attempts are
// as they were, and the caller, which names them again, tries again.
func (rp *reaper) failAttempts(ctx context.Context, failures []store.Failure, workers map[[2]int64]string, holders *leaseBook,
	deaths map[[2]int64]verdict, cause string) error {
	f := reaped{failures: failures, workers: workers, holders: holders, deaths: deaths, cause: cause}
	written, err := rp.apply(ctx, f)
	if err != nil && written {
		rp.unsent.keep(true, f)
	}
	return err
}

// apply applies the failure f: the guarded write, then what it sets
// going. written says whether the write committed.
func (rp *reaper) apply(ctx context.Context, f reaped) (written bool, err error) {
	failures, workers, holders, deaths, cause := f.failures, f.workers, f.holders, f.deaths, f.cause
	outcomes, err := rp.store.FailAttempts(ctx, failures)
	if err != nil {
		return false, err
	}
	quarantine := make(map[[2]int64]bool)
	for _, f := range failures {
		if f.Quarantine {
			quarantine[[2]int64{f.InstanceID, int64(f.Attempt)}] = true
		}
	}
	batch := rp.next.newBatch()
	var ended []store.RunEnd
	for _, o := range outcomes {
		if e, ok := outcomeEnd(o); ok {
			ended = append(ended, e)
		}
		holder := o.WorkerID
		if holder == "" {
			holder = holders.holder([2]int64{o.InstanceID, int64(o.Attempt)})
		}
		if o.Applied && workers == nil && holder != "" && rp.workers.suspend(holder) {
			// Its lease lapsed: no retry goes back to it, and what waits
			// on its own queue is routed again.
			rp.metrics.workerDeaths.Inc()
			rp.departed(holder)
		}
		if o.Applied && o.State == schemas.StateFailed && quarantine[[2]int64{o.InstanceID, int64(o.Attempt)}] {
			rp.metrics.quarantined.Inc()
		}
		if o.Applied {
			rp.log.Warn().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Str("task", o.Task).
				Str("state", string(o.State)).Str("cause", cause).Msg("attempt failed by the reaper")
			if w := workers[[2]int64{o.InstanceID, int64(o.Attempt)}]; w != "" {
				rp.next.cancelAttempt(w, o, cause)
			}
		}
		if o.State == schemas.StateRetrying && o.CurrentAttempt == o.Attempt {
			if err := rp.retry(batch, o, workers != nil, deaths, cause); err != nil {
				return true, err
			}
		}
	}
	promoted, err := rp.next.afterEnds(ctx, batch, ended)
	if err != nil {
		return true, err
	}
	return true, rp.next.publishAttempts(ctx, batch, promoted)
}

// retry schedules the next attempt of o, RETRYING after the reaper failed
// its attempt because cause: by the task's backoff when it was overdue,
// else as the death judge's verdict in deaths says (see failAttempts),
// under a span ax.dispatcher.retry.
func (rp *reaper) retry(batch *streams.AsyncBatch, o store.Outcome, overdue bool, deaths map[[2]int64]verdict, cause string) error {
	var wait time.Duration
	hold := false
	if overdue {
		wait = backoff(o.RetryPolicy, o.Attempt, rp.rand)
	} else {
		v := deaths[[2]int64{o.InstanceID, int64(o.Attempt)}]
		wait, hold = rp.deaths.deathWait(v, backoff(o.RetryPolicy, o.Attempt, rp.rand)), v.deaths < suspectAfter
	}
	err := rp.next.retryAfter(batch, o, wait, hold)
	rp.tracing.reapedRetrySpan(&o, wait, cause, err)
	return err
}

// promoteLeftovers starts the waiting instances that a slot freed for while
// no dispatcher ran (or whose promotion a crash lost).
func (rp *reaper) promoteLeftovers(ctx context.Context) error {
	tasks, err := rp.store.WaitingTasks(ctx)
	if err != nil || len(tasks) == 0 {
		return err
	}
	promoted, err := rp.store.PromoteWaiting(ctx, tasks)
	if err != nil {
		return err
	}
	return rp.next.publishAttempts(ctx, rp.next.newBatch(), promoted)
}

// sweepLeases finds running attempts whose lease is gone — expired while no
// dispatcher watched, past the bucket's marker retention, or retired by an
// executor that finished: they are candidates, which [reaper.expireLeases]
// checks like any expiry.
func (rp *reaper) sweepLeases(ctx context.Context, leases jetstream.KeyValue) ([]store.Failure, error) {
	status, err := leases.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	running, err := rp.store.RunningAttempts(ctx, rp.now().Add(-status.TTL()))
	if err != nil {
		return nil, fmt.Errorf("sweep leases: %w", err)
	}
	var gone []store.Failure
	for _, r := range running {
		_, err := leases.Get(ctx, streams.LeaseKey(r.InstanceID, r.Attempt))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			gone = append(gone, store.Failure{InstanceID: r.InstanceID, Attempt: r.Attempt, Reason: leaseLost, At: rp.now()})
		case err != nil:
			return nil, fmt.Errorf("sweep leases: %w", err)
		}
	}
	return gone, nil
}
