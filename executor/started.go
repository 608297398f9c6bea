package executor

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// The started report of an attempt, as it goes: the worker reports an
// attempt started only once it has run for StartedDelay, so that most
// attempts — those that end sooner — send their final report alone.
const (
	startedPending = iota // not sent yet, and due at the attempt's startedDue
	startedSending        // being published; startedSent closes when it is done
	startedDone           // published, failed to publish, or not wanted any more
)

// queueStarted adds the attempts, just started, to the ones whose started
// report is due delay from now; a negative delay publishes their reports
// at once, before their handlers run.
func (r *reporter) queueStarted(as []*attempt, delay time.Duration) {
	if len(as) == 0 {
		return
	}
	if delay < 0 {
		r.mu.Lock()
		for _, a := range as {
			a.started, a.startedSent = startedSending, make(chan struct{})
		}
		r.mu.Unlock()
		r.publishStarted(as)
		return
	}
	due := time.Now().Add(delay)
	r.mu.Lock()
	for _, a := range as {
		a.startedDue = due
	}
	r.startedQueue = append(r.startedQueue, as...)
	r.mu.Unlock()
	signal(r.startedWake)
}

// reportStarted publishes the started reports as they fall due, a batch at
// a time with one wait for the batch, until ctx ends. A report that fails
// to publish is not tried again: the final report records the start too.
func (r *reporter) reportStarted(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, due := r.dueStarted(time.Now())
		if len(due) > 0 {
			r.publishStarted(due)
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.startedWake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// dueStarted takes off the queue the attempts whose started report is due
// at now and still wanted, marking them sending, and says how long until
// the next one falls due (0: none waits).
func (r *reporter) dueStarted(now time.Time) (wait time.Duration, due []*attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.startedQueue {
		if a.startedDue.After(now) {
			wait = a.startedDue.Sub(now)
			break
		}
		n++
		if a.started == startedPending {
			a.started = startedSending
			a.startedSent = make(chan struct{})
			due = append(due, a)
		}
	}
	r.startedQueue = append(r.startedQueue[:0], r.startedQueue[n:]...)
	return wait, due
}

// publishStarted publishes the started reports of as, which are marked
// sending, and marks them done.
func (r *reporter) publishStarted(as []*attempt) {
	if len(as) == 0 {
		return
	}
	msgs := make([]*nats.Msg, len(as))
	for i, a := range as {
		rep := schemas.Report{InstanceID: a.dispatch.InstanceID, Attempt: a.dispatch.Attempt, WorkerID: r.workerID,
			Kind: schemas.ReportStarted, At: a.startedAt, StartedAt: a.startedAt}
		msgs[i], _ = streams.NewMsg(r.subject(&a.dispatch), r.msgID(&a.dispatch, rep.Kind), rep)
		streams.InjectTrace(a.ctx, msgs[i].Header)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, errs := publishAll(ctx, r.pub, msgs)
	cancel()
	r.mu.Lock()
	for i, a := range as {
		if errs[i] != nil {
			a.log.Warn("report started; the final report will record the start", "error", errs[i])
		}
		a.started = startedDone
		close(a.startedSent)
	}
	r.mu.Unlock()
}

// startNow publishes the attempt's started report if it is still to be
// sent, or waits for the one being sent, so that a progress report follows
// it.
func (r *reporter) startNow(a *attempt) {
	r.mu.Lock()
	state := a.started
	if state == startedPending {
		a.started, a.startedSent = startedSending, make(chan struct{})
	}
	sent := a.startedSent
	r.mu.Unlock()
	switch state {
	case startedPending:
		r.publishStarted([]*attempt{a})
	case startedSending:
		<-sent
	}
}

// settleStarted is called once the attempt's handler is done, before its
// final report: a started report not sent yet never will be, and one being
// sent is waited for, so that it reaches the stream before the final one.
func (r *reporter) settleStarted(a *attempt) {
	r.mu.Lock()
	state, sent := a.started, a.startedSent
	a.started = startedDone
	r.mu.Unlock()
	if state == startedSending {
		<-sent
	}
}
