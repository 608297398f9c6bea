package dispatcher

import (
	"context"
	"fmt"
	"math"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// A report PostgreSQL refuses must not hold up the others of its batch, nor
// leave its attempt running: the reaper leaves an attempt whose final
// report waits in AX_REPORTS to that report. What the dispatcher can check
// before the write it mends (storableReport); whatever else PostgreSQL
// refuses is found by splitting the batch (applyIsolating), and a final
// report refused alone is recorded as a bare failure that says why
// (bareFailure). ax_dispatcher_unstorable_reports_total counts them.

// maxAttempt is the largest attempt number PostgreSQL's integer column holds.
const maxAttempt = math.MaxInt32

// storableReport makes r a report PostgreSQL can store. Text it cannot
// store (a NUL character) in the error and the progress message is
// replaced by U+FFFD. An output it cannot store (see [schemas.TextProblems])
// is dropped: a success that carried one is recorded as a permanent
// failure naming what was wrong, since its handler ran and must not run
// again, and AX cannot record its result as the handler gave it.
// It reports whether it changed r.
func storableReport(r *schemas.Report) bool {
	mended := !schemas.ValidText(r.Error)
	r.Error = storableText(r.Error)
	if r.Progress != nil {
		mended = mended || !schemas.ValidText(r.Progress.Message)
		r.Progress.Message = storableText(r.Progress.Message)
	}
	problems := schemas.OutputProblems(r.Output)
	if problems == "" {
		return mended
	}
	r.Output = nil
	if r.Kind != schemas.ReportSucceeded {
		return true
	}
	r.Kind, r.Permanent = schemas.ReportFailed, true
	r.Error = storableText("the handler succeeded, but AX cannot store its output, so the attempt is recorded as failed and is not retried: " + problems)
	return true
}

// bareFailure is what is recorded for a final report PostgreSQL refused
// even alone, once storable: a failure without output, naming the refusal.
// A refused success stays unretried, as its handler ran.
func bareFailure(r schemas.Report, err error) schemas.Report {
	return schemas.Report{
		InstanceID: r.InstanceID, Attempt: r.Attempt, WorkerID: r.WorkerID, Pool: r.Pool, Handlers: r.Handlers,
		At: r.At, StartedAt: r.StartedAt, Kind: schemas.ReportFailed,
		Permanent: r.Permanent || r.Kind == schemas.ReportSucceeded,
		Error:     storableText(fmt.Sprintf("PostgreSQL refused the %s report (%s); it is recorded as a failure without its output", r.Kind, pgReason(err))),
	}
}

// applyIsolating applies started and final reports with
// [store.Store.ApplyReports]. When PostgreSQL refuses what some hold, the
// one statement applied nothing: it splits the reports, in halves, until
// each refused one is alone. The others are applied a few statements later;
// a refused final report is recorded as a bare failure instead, and a
// refused started report is dropped (its final report records
// DISPATCHED→RUNNING too); one refused even as a bare failure is dropped
// with an error in the log. It returns the reports applied, in the order of
// their outcomes (started, then final). Any other error fails the batch,
// for redelivery.
func (rc *recorder) applyIsolating(ctx context.Context, started, final []schemas.Report) ([]schemas.Report, []schemas.Report, []store.Outcome, error) {
	out, err := rc.store.ApplyReports(ctx, started, final)
	if err == nil || !store.IsDataError(err) {
		return started, final, out, err
	}
	switch {
	case len(started) == 1 && len(final) == 0:
		rc.metrics.unstorable.WithLabelValues(string(started[0].Kind), "terminated").Inc()
		rc.log.Error().Err(err).Int64("instance_id", started[0].InstanceID).Int("attempt", started[0].Attempt).
			Msg("started report refused by PostgreSQL; dropped (the final report records the start)")
		return nil, nil, nil, nil
	case len(started) == 0 && len(final) == 1:
		r := final[0]
		bare := bareFailure(r, err)
		out, err2 := rc.store.ApplyReports(ctx, nil, []schemas.Report{bare})
		switch {
		case err2 == nil:
			rc.metrics.unstorable.WithLabelValues(string(r.Kind), "bare").Inc()
			rc.log.Warn().Err(err).Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).Str("kind", string(r.Kind)).
				Msg("final report refused by PostgreSQL; recorded as a failure without its output")
			return nil, []schemas.Report{bare}, out, nil
		case !store.IsDataError(err2):
			return nil, nil, nil, err2
		}
		rc.metrics.unstorable.WithLabelValues(string(r.Kind), "terminated").Inc()
		rc.log.Error().Err(err2).Int64("instance_id", r.InstanceID).Int("attempt", r.Attempt).Str("kind", string(r.Kind)).
			Msg("final report refused by PostgreSQL even as a bare failure; dropped")
		return nil, nil, nil, nil
	}
	var s1, f1, s2, f2 []schemas.Report
	switch {
	case len(started) > 0 && len(final) > 0:
		s1, f2 = started, final
	case len(started) > 0:
		s1, s2 = started[:len(started)/2], started[len(started)/2:]
	default:
		f1, f2 = final[:len(final)/2], final[len(final)/2:]
	}
	s1, f1, o1, err := rc.applyIsolating(ctx, s1, f1)
	if err != nil {
		return nil, nil, nil, err
	}
	s2, f2, o2, err := rc.applyIsolating(ctx, s2, f2)
	if err != nil {
		return nil, nil, nil, err
	}
	// Outcomes of started reports come first: one half is all started
	// reports, or the halves are s1 and f2, so o1 then o2 keeps that order.
	return append(s1, s2...), append(f1, f2...), append(o1, o2...), nil
}
