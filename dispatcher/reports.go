package dispatcher

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// recorder is the part of the dispatcher that turns executors' reports
// into transitions (see [recorder.handleReports]): it reads the reports,
// applies them in rounds through the store, and hands what their outcomes
// set going (retries, chains, promotions, cancels) to next.
type recorder struct {
	store *store.Store
	top   streams.Topology
	// workers tells the handlers each worker's credential grants.
	workers *liveWorkers
	// faults, nil in production, may refuse reports for a rehearsal.
	faults  Faults
	now     func() time.Time
	rand    func() float64
	log     zerolog.Logger
	metrics *metrics
	next    completer
	tracing tracing
}

// completer is what the outcomes of the recorder and the instances of the
// intake set going, which the Service does (for the reaper too).
type completer interface {
	// newBatch starts a batch of asynchronous publishes.
	newBatch() *streams.AsyncBatch
	// afterEnds adds to batch what the runs that ended start (chained
	// tasks) and returns the waiting instances their slots promote.
	afterEnds(ctx context.Context, batch *streams.AsyncBatch, ended []store.RunEnd) ([]store.Attempt, error)
	// publishAttempts sends attempts with batch and awaits them.
	publishAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) error
	// retryAfter adds to batch the next attempt of o after wait.
	retryAfter(batch *streams.AsyncBatch, o store.Outcome, wait time.Duration, hold bool) error
	// cancelAttempt tells a worker to stop an attempt.
	cancelAttempt(workerID string, o store.Outcome, reason string)
	// retryLater returns a batch's messages for redelivery.
	retryLater(msgs []jetstream.Msg, err error)
	// stopVictims stops the victims that ran and returns their ends.
	stopVictims(victims []store.Victim) []store.RunEnd
	// sendAttempts routes and adds attempts to batch, unawaited.
	sendAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) (sentAttempts, error)
}

// retryDelay is how long a batch that failed waits before its redelivery.
const retryDelay = time.Second

// handleReports records a batch of executor reports in one transaction and
// then acts on the outcomes: it schedules the next attempt of every failure
// with attempts left, fires the tasks chained after the instances that
// ended, and tells a worker whose attempt was fenced out to stop. A report
// batch ([schemas.ReportBatch]) counts as the reports it carries, each
// applied or refused on its own; the batch is acknowledged, like a single
// report, only once all of them are.
func (rc *recorder) handleReports(ctx context.Context, msgs []jetstream.Msg) {
	if rc.faults != nil {
		msgs = rc.faults.RecordReports(ctx, msgs)
	}
	reports, stale, handled := rc.readReports(ctx, msgs)
	// The reports of one attempt in a round come from one worker, and
	// one of each kind: one from another, or one more, waits for the next
	// round (its own statement), so that the store, which merges an
	// attempt's reports, sees each on its own, and a forged one cannot
	// displace the true.
	for len(reports) > 0 {
		var round []schemas.Report
		round, reports = nextRound(reports)
		refused, err := rc.applyRound(ctx, round)
		if err != nil {
			rc.next.retryLater(msgs, err)
			return
		}
		stale = append(stale, refused...)
	}
	if err := rc.store.RecordStaleReports(ctx, stale); err != nil {
		rc.next.retryLater(msgs, err)
		return
	}
	for _, m := range handled {
		_ = m.Ack()
	}
}

// readReports decodes msgs: the reports to apply, each with its subject's
// pool, the refusals of those whose subject does not name their worker,
// and the messages to acknowledge once both are recorded. A message that
// does not decode, or a report of a kind it cannot carry, is dropped with
// a warning (a single report's message is terminated); a report batch
// counts as its reports.
func (rc *recorder) readReports(ctx context.Context, msgs []jetstream.Msg) (reports []schemas.Report, stale []store.StaleReport, handled []jetstream.Msg) {
	// The handlers each worker's credential grants in a pool, read once a
	// batch: a report carries them to the store's holder check.
	grants := map[[2]string][]string{}
	granted := func(pool, worker string) []string {
		k := [2]string{pool, worker}
		h, ok := grants[k]
		if !ok {
			h = rc.workers.grantedHandlers(ctx, worker, pool)
			grants[k] = h
		}
		return h
	}
	for _, m := range msgs {
		var rs []schemas.Report
		var refused []store.StaleReport
		ok := false
		if pool, worker, isBatch := rc.top.ReportBatchFrom(m.Subject()); isBatch {
			rs, refused, ok = rc.readBatch(m, pool, worker, granted(pool, worker))
		} else {
			rs, refused, ok = rc.readReport(m, granted)
		}
		if ok {
			handled = append(handled, m)
		}
		if reports == nil {
			// The first message's list as it is: a report batch holds
			// hundreds, and most rounds read one.
			reports = rs
		} else {
			reports = append(reports, rs...)
		}
		stale = append(stale, refused...)
	}
	return reports, stale, handled
}

// readBatch decodes m, a report batch of a worker on its subject in pool,
// whose credential grants it handlers: its reports to apply and the
// refusals of those its subject does not name the worker of; false when
// the batch does not decode (terminated).
func (rc *recorder) readBatch(m jetstream.Msg, pool, worker string, handlers []string) ([]schemas.Report, []store.StaleReport, bool) {
	b, err := schemas.DecodeReportBatch(m.Data())
	if err != nil || len(b.Reports) == 0 {
		rc.log.Warn().Str("subject", m.Subject()).Msg("malformed report batch dropped")
		_ = m.Term()
		return nil, nil, false
	}
	reports := make([]schemas.Report, 0, len(b.Reports))
	var stale []store.StaleReport
	seen := make(map[[2]int64]bool, len(b.Reports))
	for _, r := range b.Reports {
		if r.InstanceID <= 0 || r.Attempt <= 0 || r.Attempt > maxAttempt || !r.Kind.IsFinal() {
			rc.log.Warn().Str("subject", m.Subject()).Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).
				Str("kind", string(r.Kind)).Msg("malformed report in a batch dropped (a batch carries final reports only)")
			continue
		}
		key := [2]int64{r.InstanceID, int64(r.Attempt)}
		if seen[key] {
			rc.log.Warn().Str("subject", m.Subject()).Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).
				Msg("second final report of an attempt in one batch dropped")
			continue
		}
		seen[key] = true
		if kind := r.Kind; storableReport(&r) {
			rc.metrics.unstorable.WithLabelValues(string(kind), "mended").Inc()
		}
		r.Pool, r.Handlers = pool, handlers
		if r.WorkerID != worker {
			stale = append(stale, rc.noteRefused(r, fmt.Sprintf(
				"%s report of attempt %d refused: it came in a batch on %s, which does not name its worker %q (its batches come on %s)",
				r.Kind, r.Attempt, m.Subject(), r.WorkerID, rc.top.ReportBatch("<pool>", r.WorkerID))))
			continue
		}
		reports = append(reports, r)
	}
	return reports, stale, true
}

// readReport decodes m, the message of one report: the report to apply,
// or the refusal of one its subject does not name the worker of (granted
// tells what a worker's credential grants in a pool); false when it does
// not decode or has a kind it cannot carry (terminated).
func (rc *recorder) readReport(m jetstream.Msg, granted func(pool, worker string) []string) ([]schemas.Report, []store.StaleReport, bool) {
	r, err := schemas.DecodeReport(m.Data())
	if err != nil || r.InstanceID <= 0 || r.Attempt <= 0 || r.Attempt > maxAttempt {
		rc.log.Warn().Str("subject", m.Subject()).Msg("malformed report dropped")
		_ = m.Term()
		return nil, nil, false
	}
	if kind := r.Kind; storableReport(&r) {
		rc.metrics.unstorable.WithLabelValues(string(kind), "mended").Inc()
	}
	switch {
	case r.Kind == schemas.ReportProgress:
		if r.Progress == nil || r.Progress.Check() != nil {
			rc.log.Warn().Str("subject", m.Subject()).Msg("malformed progress report dropped")
			_ = m.Term()
			return nil, nil, false
		}
	case r.Kind != schemas.ReportStarted && !r.Kind.IsFinal():
		rc.log.Warn().Str("subject", m.Subject()).Str("kind", string(r.Kind)).Msg("report of unknown kind dropped")
		_ = m.Term()
		return nil, nil, false
	}
	pool, worker, ok := rc.top.ReportFrom(m.Subject())
	if !ok || worker != r.WorkerID {
		// The subject is what NATS permissions bind to the publisher:
		// a report whose worker it does not name proves nothing.
		return nil, []store.StaleReport{rc.noteRefused(r, fmt.Sprintf(
			"%s report of attempt %d refused: it came on %s, which does not name its worker %q (reports come on %s)",
			r.Kind, r.Attempt, m.Subject(), r.WorkerID, rc.top.Report("<pool>", "<worker_id>", r.InstanceID)))}, true
	}
	r.Pool, r.Handlers = pool, granted(pool, worker)
	if r.Traceparent == "" {
		r.Traceparent = streams.TraceParent(m.Headers())
	}
	return []schemas.Report{r}, nil, true
}

// nextRound splits reports into a round, in which every attempt's reports
// come from one pool and worker, with at most one started and one final
// report, and the rest, which wait for a later round.
func nextRound(reports []schemas.Report) (round, later []schemas.Report) {
	type holding struct {
		pool, worker   string
		started, final bool
	}
	held := make(map[[2]int64]holding, len(reports))
	round = make([]schemas.Report, 0, len(reports))
	for _, r := range reports {
		key := [2]int64{r.InstanceID, int64(r.Attempt)}
		h, ok := held[key]
		if !ok {
			h = holding{pool: r.Pool, worker: r.WorkerID}
		}
		if h.pool != r.Pool || h.worker != r.WorkerID ||
			(r.Kind == schemas.ReportStarted && h.started) || (r.Kind.IsFinal() && h.final) {
			later = append(later, r)
			continue
		}
		h.started = h.started || r.Kind == schemas.ReportStarted
		h.final = h.final || r.Kind.IsFinal()
		held[key] = h
		round = append(round, r)
	}
	return round, later
}

// applyRound applies one round of reports (see nextRound): the started
// and final reports in one statement, the progress around it, and then
// what the outcomes set going. It returns the timeline events of the
// reports refused or stale.
func (rc *recorder) applyRound(ctx context.Context, reports []schemas.Report) ([]store.StaleReport, error) {
	started, final, progress := sortRound(reports)
	// An attempt's progress reports come before its final report in the
	// stream, and once the final report is applied the attempt takes no
	// more progress: the progress of an attempt that ends in this round is
	// applied before the final reports, the rest after them, which it must
	// not hold up.
	ending, progress := splitProgress(progress, final)
	stale, err := rc.applyProgress(ctx, ending)
	if err != nil {
		return nil, err
	}
	if len(started) > 0 || len(final) > 0 {
		refused, err := rc.applyReports(ctx, started, final)
		if err != nil {
			return nil, err
		}
		stale = append(stale, refused...)
	}
	// The other attempts' progress last, after what the final reports set
	// going.
	refused, err := rc.applyProgress(ctx, progress)
	if err != nil {
		return nil, err
	}
	return append(stale, refused...), nil
}

// sortRound sorts a round's reports by kind.
func sortRound(reports []schemas.Report) (started, final, progress []schemas.Report) {
	for _, r := range reports {
		switch r.Kind {
		case schemas.ReportProgress:
			progress = append(progress, r)
		case schemas.ReportStarted:
			started = append(started, r)
		default:
			final = append(final, r)
		}
	}
	return started, final, progress
}

// applyReports applies the started and final reports of a round in one
// statement (see [recorder.applyIsolating]) and sets going what their
// outcomes ask for (see [recorder.settle]): the retries, the tasks chained
// after the instances that ended and the waiting instances their slots
// start. It returns the timeline events of the reports refused or stale.
func (rc *recorder) applyReports(ctx context.Context, started, final []schemas.Report) ([]store.StaleReport, error) {
	start := time.Now()
	started, final, outcomes, err := rc.applyIsolating(ctx, started, final)
	if err != nil {
		return nil, err
	}
	batch := rc.next.newBatch()
	var stale []store.StaleReport
	var ended []store.RunEnd
	for i, o := range outcomes {
		isStarted := i < len(started)
		var r schemas.Report
		sctx, span := ctx, trace.SpanFromContext(context.Background())
		if isStarted {
			r = started[i]
		} else {
			r = final[i-len(started)]
			sctx, span = rc.tracing.startReport(ctx, &r, &o, start)
		}
		switch {
		case isRefused(o, r):
			refused := rc.noteRefused(r, holderRefusal(r, o))
			stale = append(stale, refused)
			refuseReport(span, refused.Reason)
			continue
		case isStale(o, r.Kind):
			stale = append(stale, rc.noteStale(o, r.Kind, r.WorkerID))
		}
		if e, ok := outcomeEnd(o); ok && !isStarted {
			ended = append(ended, e)
		}
		err := rc.settle(sctx, batch, r, o, isStarted)
		span.End()
		if err != nil {
			return nil, err
		}
	}
	promoted, err := rc.next.afterEnds(ctx, batch, ended)
	if err != nil {
		return nil, err
	}
	return stale, rc.next.publishAttempts(ctx, batch, promoted)
}

// settle acts on the outcome o of report r (a started report when
// isStarted): it stops an attempt its own started report finds stale,
// and adds to batch the next attempt of a failure with attempts left.
func (rc *recorder) settle(ctx context.Context, batch *streams.AsyncBatch, r schemas.Report, o store.Outcome, isStarted bool) error {
	switch {
	case isStarted && !o.Applied && o.Found && o.CurrentAttempt == o.Attempt && o.State == schemas.StateSucceeded:
		// Overtaken by its own success: the worker finished it, and
		// nothing runs to stop.
	case isStarted && !o.Applied && o.Found && !(o.State == schemas.StateRunning && o.CurrentAttempt == o.Attempt):
		// The attempt is no longer the instance's: stop it where it runs.
		rc.next.cancelAttempt(r.WorkerID, o,
			fmt.Sprintf("attempt %d is stale: the instance is %s at attempt %d", o.Attempt, o.State, o.CurrentAttempt))
	case !isStarted && o.State == schemas.StateRetrying && o.CurrentAttempt == o.Attempt:
		// Applied now, or applied before a crash that may have lost the
		// schedule: (re)schedule it; its message id makes that idempotent.
		wait, refused := retryWait(o.RetryPolicy, o.Attempt, r.RetryAfterMS, rc.rand)
		switch {
		case r.Kind == schemas.ReportReleased:
			// Handed back by a leaving worker: nothing failed, so
			// nothing backs off.
			wait = 0
			if o.Applied {
				rc.metrics.handedBack.Inc()
			}
		case refused:
			rc.log.Warn().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Int64("retry_after_ms", r.RetryAfterMS).
				Msg("report asks for a negative retry_after_ms; the task's backoff applies")
		}
		err := rc.scheduleRetry(batch, o, wait)
		rc.tracing.retrySpan(ctx, &o, wait, err)
		return err
	}
	return nil
}

// splitProgress splits progress into the reports of attempts that have a
// final report in final, and the others.
func splitProgress(progress, final []schemas.Report) (ending, others []schemas.Report) {
	if len(progress) == 0 || len(final) == 0 {
		return nil, progress
	}
	ends := make(map[[2]int64]bool, len(final))
	for _, r := range final {
		ends[[2]int64{r.InstanceID, int64(r.Attempt)}] = true
	}
	for _, r := range progress {
		if ends[[2]int64{r.InstanceID, int64(r.Attempt)}] {
			ending = append(ending, r)
		} else {
			others = append(others, r)
		}
	}
	return ending, others
}

// applyProgress records a batch's progress reports, one statement for all
// (none when there are none), and returns the timeline events of the ones
// refused because they did not come from the attempt's holder.
func (rc *recorder) applyProgress(ctx context.Context, reports []schemas.Report) ([]store.StaleReport, error) {
	if len(reports) == 0 {
		return nil, nil
	}
	outcomes, err := rc.store.ApplyProgress(ctx, reports)
	if err != nil {
		return nil, err
	}
	var refused []store.StaleReport
	for i, o := range outcomes {
		r := reports[i]
		switch {
		case o.Applied:
			rc.metrics.progress.WithLabelValues("applied").Inc()
		case o.Refused:
			rc.metrics.progress.WithLabelValues("refused").Inc()
			refused = append(refused, rc.noteRefused(r, fmt.Sprintf(
				"progress report of attempt %d from worker %q of pool %s refused: the attempt is not that pool's, another worker (%q) holds it, or no grant key of the worker's credential names its handler",
				r.Attempt, r.WorkerID, r.Pool, o.WorkerID)))
		default:
			rc.metrics.progress.WithLabelValues("dropped").Inc()
		}
	}
	return refused, nil
}

// scheduleRetry adds to batch the firing of the attempt after o's, delayed by
// wait: a one-shot message schedule when wait is positive, else the firing itself.
func (rc *recorder) scheduleRetry(batch *streams.AsyncBatch, o store.Outcome, wait time.Duration) error {
	return rc.next.retryAfter(batch, o, wait, false)
}

// isStale reports whether a report of kind was refused because its attempt
// was fenced out: another attempt is the instance's, or the instance ended
// at that attempt otherwise than the report says (the reaper failed it, an
// operator cancelled it). A report applied before (a redelivery) or
// overtaken by its own final report is not stale.
func isStale(o store.Outcome, kind schemas.ReportKind) bool {
	if o.Applied || !o.Found {
		return false
	}
	if o.CurrentAttempt != o.Attempt {
		return true
	}
	switch kind {
	case schemas.ReportSucceeded:
		return o.State != schemas.StateSucceeded
	case schemas.ReportFailed, schemas.ReportReleased:
		return o.State == schemas.StateSucceeded || o.State == schemas.StateCancelled
	default:
		return o.State == schemas.StateCancelled
	}
}

// isRefused reports whether report r, whose outcome is o, was refused
// because it came from another pool or another worker than the attempt's
// (store.ApplyReports' holder check): the attempt is still the instance's
// and still DISPATCHED or RUNNING, so nothing but that check kept it from
// being applied — except a started report again from the worker that holds
// the attempt (a redelivery).
func isRefused(o store.Outcome, r schemas.Report) bool {
	if o.Applied || !o.Found || o.CurrentAttempt != o.Attempt {
		return false
	}
	switch o.State {
	case schemas.StateDispatched:
		return true
	case schemas.StateRunning:
		return r.Kind != schemas.ReportStarted || o.WorkerID != r.WorkerID
	}
	return false
}

// holderRefusal says why the store refused r, a report on o's current
// attempt from a worker that does not hold it: the attempt is another
// pool's, another worker holds it, or the worker's credential grants it
// not the attempt's handler in its pool, as far as the grant keys this
// dispatcher has seen show (see [liveWorkers.grantedHandlers]).
func holderRefusal(r schemas.Report, o store.Outcome) string {
	head := fmt.Sprintf("%s report of attempt %d from worker %q of pool %s refused: ", r.Kind, o.Attempt, r.WorkerID, r.Pool)
	switch {
	case !slices.Contains(schemas.PoolMembers(o.Pool), r.Pool):
		return head + fmt.Sprintf("the attempt is pool %s's", o.Pool)
	case o.WorkerID != "" && o.WorkerID != r.WorkerID:
		return head + fmt.Sprintf("worker %q holds the attempt", o.WorkerID)
	case !slices.Contains(r.Handlers, o.Handler):
		return head + fmt.Sprintf("no grant key of the worker's credential seen by this dispatcher names handler %s in pool %s (it names %q)",
			o.Handler, r.Pool, r.Handlers)
	}
	return head + "the worker does not hold the attempt"
}

// noteRefused counts and logs a report refused because it did not come
// from the attempt's holder, and returns the event for the instance's
// timeline.
func (rc *recorder) noteRefused(r schemas.Report, reason string) store.StaleReport {
	rc.metrics.refusedReports.WithLabelValues(string(r.Kind)).Inc()
	rc.log.Warn().Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).Str("kind", string(r.Kind)).
		Str("worker_id", r.WorkerID).Str("pool", r.Pool).Msg(reason)
	return store.StaleReport{InstanceID: r.InstanceID, Attempt: r.Attempt, Kind: r.Kind, WorkerID: r.WorkerID,
		At: rc.now(), Reason: reason, Refused: true}
}

// noteStale counts and logs a report refused as stale, and returns the
// event for the instance's timeline, so that an operator sees the fencing
// at work.
func (rc *recorder) noteStale(o store.Outcome, kind schemas.ReportKind, workerID string) store.StaleReport {
	rc.metrics.stale.WithLabelValues(string(kind)).Inc()
	rc.log.Info().Int64("instance_id", o.InstanceID).Int("attempt", o.Attempt).Str("task", o.Task).
		Str("kind", string(kind)).Str("worker_id", workerID).Str("state", string(o.State)).
		Int("current_attempt", o.CurrentAttempt).Msg("stale report refused")
	return store.StaleReport{InstanceID: o.InstanceID, Attempt: o.Attempt, Kind: kind, WorkerID: workerID, At: rc.now(),
		Reason: fmt.Sprintf("%s report of attempt %d refused: the instance is %s at attempt %d",
			kind, o.Attempt, o.State, o.CurrentAttempt)}
}
