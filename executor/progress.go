package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// ProgressInterval is the least time between two progress reports of one
// attempt: [Job.Progress] keeps the latest value and sends it when the
// interval since the last report has passed.
const ProgressInterval = time.Second

// errAttemptEnded is what [Job.Progress] returns once the attempt's
// handler has returned.
var errAttemptEnded = errors.New("progress: the attempt has ended; its final report says the rest")

// Progress reports how far the attempt has got: done units of total (0
// when the total is unknown), with a short message (at most
// [schemas.MaxProgressMessage] bytes, may be empty). The dispatcher keeps
// the latest on the instance, where the API, `ax instance get`, `ax fire
// --wait` and the console show it.
//
// Progress does not wait for the network: it keeps the value and returns.
// The worker sends at most one progress report per attempt per
// [ProgressInterval], always the latest value, from a goroutine of its own
// that it starts on the first call, so an attempt that never reports
// progress costs nothing. The attempt's started report goes before its
// first progress report — at once, rather than after
// [Options.StartedDelay] — so that an attempt that shows progress shows as
// RUNNING. A value not yet sent when the handler returns is
// dropped: the final report follows.
//
// It returns an error for values out of range (negative, done > total >
// 0, a message too long or not UTF-8), once ctx has ended, and once the
// handler has returned. A report that fails to publish is logged, not
// returned; the next value is sent anyway. Called on a Job that no worker
// made (a handler's unit test), it checks its arguments and does nothing
// else.
func (t *Job) Progress(ctx context.Context, done, total int64, message string) error {
	p := schemas.Progress{Done: done, Total: total, Message: message}
	if err := p.Check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("progress: %w", context.Cause(ctx))
	}
	if t.run == nil {
		return nil
	}
	return t.run.svc.progress(t.run, p)
}

// progressState is an attempt's progress reporting, made on its first
// [Job.Progress].
type progressState struct {
	mu      sync.Mutex
	latest  schemas.Progress // the value not sent yet, when pending
	at      time.Time        // when the handler reported it
	pending bool
	closed  bool          // the handler returned: nothing more is sent
	wake    chan struct{} // a value is pending
	done    chan struct{} // closed with closed
}

// endedProgress stands for the progress of an attempt whose handler
// returned before it reported any.
var endedProgress = &progressState{closed: true}

// progress keeps p as the attempt's latest progress and makes sure its
// sender runs.
func (s *Service) progress(a *attempt, p schemas.Progress) error {
	ps := a.progress.Load()
	if ps == nil {
		ps = &progressState{wake: make(chan struct{}, 1), done: make(chan struct{})}
		if !a.progress.CompareAndSwap(nil, ps) {
			ps = a.progress.Load()
		} else {
			// The attempt's runner has not returned (it stores
			// endedProgress before it does), so its count is positive.
			s.runners.Add(1)
			go s.sendProgress(a, ps)
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return errAttemptEnded
	}
	ps.latest, ps.at, ps.pending = p, s.opts.NowFunc(), true
	signal(ps.wake)
	return nil
}

// endProgress is called once the attempt's handler has returned: no
// progress report is sent after, and the sender stops.
func (s *Service) endProgress(a *attempt) {
	if a.progress.CompareAndSwap(nil, endedProgress) {
		return
	}
	ps := a.progress.Load()
	ps.mu.Lock()
	if !ps.closed {
		ps.closed, ps.pending = true, false
		close(ps.done)
	}
	ps.mu.Unlock()
}

// sendProgress publishes the attempt's progress reports, the latest value
// at most once per ProgressInterval, until the handler returns; the first
// after the attempt's started report.
func (s *Service) sendProgress(a *attempt, ps *progressState) {
	defer s.runners.Done()
	var last time.Time
	first := true
	for {
		select {
		case <-ps.wake:
		case <-ps.done:
			return
		}
		if wait := time.Until(last.Add(ProgressInterval)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-ps.done:
				timer.Stop()
				return
			}
		}
		if first {
			s.reports.startNow(a)
			first = false
		}
		ps.mu.Lock()
		p, at, ok := ps.latest, ps.at, ps.pending && !ps.closed
		ps.pending = false
		ps.mu.Unlock()
		if !ok {
			continue
		}
		rep := schemas.Report{InstanceID: a.dispatch.InstanceID, Attempt: a.dispatch.Attempt, WorkerID: s.opts.WorkerID,
			Kind: schemas.ReportProgress, At: at, StartedAt: a.startedAt, Progress: &p}
		// No Nats-Msg-Id: a progress report published twice is harmless,
		// the dispatcher keeps only a newer one than it has.
		m, err := streams.NewMsg(s.reports.subject(&a.dispatch), "", rep)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			_, err = s.js.PublishMsg(ctx, m)
			cancel()
		}
		if err != nil {
			a.log.Warn("report progress; the next value will be sent anyway", "error", err, "done", p.Done, "total", p.Total)
		}
		last = time.Now()
	}
}
