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
// report is due StartedDelay from now.
func (s *Service) queueStarted(as []*attempt) {
	if len(as) == 0 {
		return
	}
	due := time.Now().Add(s.opts.StartedDelay)
	s.mu.Lock()
	for _, a := range as {
		a.startedDue = due
	}
	s.startedQueue = append(s.startedQueue, as...)
	s.mu.Unlock()
	signal(s.startedWake)
}

// reportStarted publishes the started reports as they fall due, a batch at
// a time with one wait for the batch, until ctx ends. A report that fails
// to publish is not tried again: the final report records the start too.
func (s *Service) reportStarted(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, due := s.dueStarted(time.Now())
		if len(due) > 0 {
			s.publishStarted(due)
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.startedWake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// dueStarted takes off the queue the attempts whose started report is due
// at now and still wanted, marking them sending, and says how long until
// the next one falls due (0: none waits).
func (s *Service) dueStarted(now time.Time) (wait time.Duration, due []*attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.startedQueue {
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
	s.startedQueue = append(s.startedQueue[:0], s.startedQueue[n:]...)
	return wait, due
}

// publishStarted publishes the started reports of as, which are marked
// sending, and marks them done.
func (s *Service) publishStarted(as []*attempt) {
	if len(as) == 0 {
		return
	}
	msgs := make([]*nats.Msg, len(as))
	for i, a := range as {
		rep := schemas.Report{InstanceID: a.dispatch.InstanceID, Attempt: a.dispatch.Attempt, WorkerID: s.opts.WorkerID,
			Kind: schemas.ReportStarted, At: a.startedAt, StartedAt: a.startedAt}
		msgs[i], _ = streams.NewMsg(s.reportSubject(a.dispatch), s.reportID(a.dispatch, rep.Kind), rep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, errs := s.publishAll(ctx, msgs)
	cancel()
	s.mu.Lock()
	for i, a := range as {
		if errs[i] != nil {
			a.log.Warn("report started; the final report will record the start", "error", errs[i])
		}
		a.started = startedDone
		close(a.startedSent)
	}
	s.mu.Unlock()
}

// settleStarted is called once the attempt's handler is done, before its
// final report: a started report not sent yet never will be, and one being
// sent is waited for, so that it reaches the stream before the final one.
func (s *Service) settleStarted(a *attempt) {
	s.mu.Lock()
	state, sent := a.started, a.startedSent
	a.started = startedDone
	s.mu.Unlock()
	if state == startedSending {
		<-sent
	}
}
