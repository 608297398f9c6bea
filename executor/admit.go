package executor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// inProgressEvery is how often a fetched attempt that waits (for its
// handler's rate limit, its mutex, the fence's answer, its lease) tells
// JetStream it is still being worked on, so that the message is not
// redelivered to another worker meanwhile: every third of the shortest
// ack wait of the worker's consumers.
func (s *Service) inProgressEvery() time.Duration {
	if w := time.Duration(s.ackWait.Load()); w > 0 {
		return w / 3
	}
	return streams.DefaultAckWait / 3
}

// keepInProgress tells JetStream every inProgressEvery, until the returned
// stop is called, that the dispatch messages of ps are being worked on.
// stop returns once the last signal has been sent: an ack sent after it
// is not followed by one.
func (s *Service) keepInProgress(ps []*pending) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(s.inProgressEvery())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, p := range ps {
					// A message given back or terminated meanwhile says
					// ErrMsgAlreadyAckd: nothing to keep.
					if err := p.msg.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
						log := s.taskLogger(&p.d)
						log.Warn("extend the ack wait of a fetched attempt", "error", err)
					}
				}
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// unregisteredDelay is how long a message routed to this worker by name,
// whose handler it does not have, is given back for before it looks again.
const unregisteredDelay = streams.DefaultAckWait

// pending is a fetched attempt that holds a slot of the worker (and one of
// its handler's) but has not started: it may still wait for its rate limit
// and its mutex, and it has no lease yet.
type pending struct {
	msg     jetstream.Msg
	d       schemas.Dispatch
	handler Handler       // what runs
	hs      *handlerState // the handler's state on this worker
	slots   int           // the worker's slots it holds (see slotsOf)
	// doomed is set when the handler fails at once: the mutex key does
	// not render.
	doomed bool
	// mutexKey is the rendered mutex key ("" when the task has none);
	// mutexRev is its revision once the attempt holds it (0: not held).
	mutexKey string
	mutexRev uint64
}

// admit decodes a fetched message and takes a slot for it. It returns nil
// when the message was handed back: undecodable (terminated), or its
// handler's slots are full (requeued).
//
// A message whose mutex key does not render is admitted with a handler
// that fails permanently: it is started like any other (lease, started
// report) so that the instance's record reads RUNNING then FAILED, with
// the reason. A message whose handler is not registered here is given
// back for unregisteredDelay: it waits for a worker that has the handler.
// So is a message written in a version of the executor protocol this
// worker does not speak (see [schemas.ExecutorProtocol]): it waits for a
// worker that does.
func (s *Service) admit(m jetstream.Msg) *pending {
	d, err := decodeDispatch(m)
	if err != nil {
		s.log.Error("undecodable dispatch message; terminating it", "error", err, "subject", m.Subject())
		s.term(m)
		return nil
	}
	if v := schemas.ProtocolOrOne(d.Protocol); v > schemas.ExecutorProtocol {
		// The dispatcher routes such a message only to a worker whose
		// record says it speaks the version: this one did not.
		log := s.taskLogger(&d)
		log.Warn("the attempt is written in a version of the executor protocol this worker does not speak; it waits for a worker that does", "protocol", v, "speaks", schemas.ExecutorProtocol, "delay", unregisteredDelay)
		giveBack(m, log)
		return nil
	}
	p := &pending{msg: m, d: d}
	e, registered := s.opts.Mux.entry(d.Handler)
	if !registered {
		// Only the worker's own queue can hold it (the pool queues are
		// the handlers'): work pinned to this worker by name, routed
		// while it had the handler or was not live. The attempt waits
		// for a worker with the handler, never fails for want of it.
		log := s.taskLogger(&d)
		log.Warn("the attempt was routed to this worker, which has no such handler; it waits for a worker that has it", "handler", d.Handler, "handlers", s.opts.Mux.Names(), "delay", unregisteredDelay)
		giveBack(m, log)
		return nil
	}
	p.slots = s.slotsOf(&d)
	s.mu.Lock()
	hs := s.handlerState(d.Handler, e.limits)
	if hs.full() {
		s.mu.Unlock()
		s.requeue(p, "the handler's slots are full")
		return nil
	}
	if !s.takeSlots(p.slots) {
		s.mu.Unlock()
		s.requeue(p, s.shortOfSlots(p.slots))
		return nil
	}
	hs.busy++
	p.hs = hs
	s.mu.Unlock()

	switch {
	case d.MutexTemplate != "":
		key, err := s.mutex.render(d.MutexTemplate, d.Payload)
		if err != nil {
			p.fail(err)
			break
		}
		p.handler, p.mutexKey = e.wrapped, key
	default:
		p.handler = e.wrapped
	}
	return p
}

// giveBack hands a message this worker must not run back to JetStream for
// unregisteredDelay, so that another worker may take it meanwhile.
func giveBack(m jetstream.Msg, log *slog.Logger) {
	if err := m.NakWithDelay(unregisteredDelay); err != nil {
		log.Warn("requeue dispatch message; it comes back after the ack wait", "error", err)
	}
}

// fail makes the attempt fail permanently with err, without waiting.
func (p *pending) fail(err error) {
	err = Permanent(err)
	p.handler = HandlerFunc(func(context.Context, *Job) (any, error) { return nil, err })
	p.doomed = true
}

// handlerState returns the run-time state of the handler called name,
// making it on first use. The caller holds s.mu.
func (s *Service) handlerState(name string, l handlerLimits) *handlerState {
	hs, ok := s.handlerStates[name]
	if !ok {
		hs = newHandlerState(l)
		s.handlerStates[name] = hs
	}
	return hs
}

// waits reports whether the attempt must wait before it starts: for its
// handler's rate limit or for its mutex.
func (p *pending) waits() bool {
	return !p.doomed && (p.mutexKey != "" || (p.hs != nil && p.hs.limiter != nil))
}

// unadmit gives back the slots of an attempt that will not start here, and
// its mutex if it took it.
func (s *Service) unadmit(p *pending) {
	s.mu.Lock()
	s.held -= p.slots
	if p.hs != nil {
		p.hs.busy--
	}
	s.mu.Unlock()
	signal(s.freed)
	if p.mutexRev != 0 {
		s.mutex.unlock(p.mutexKey, p.mutexRev, s.taskLogger(&p.d))
	}
}

// msgFate is what becomes of the dispatch message of an attempt that
// does not start here.
type msgFate int

const (
	keepMsg  msgFate = iota // left as it is: acked, or back after its ack wait
	termMsg                 // terminated: another delivery runs or ran the attempt
	nakNow                  // given back at once
	nakLater                // given back for IdleWait, to be asked about again
)

// drop gives back the slots (and the mutex) of an attempt that does not
// start here, and settles its dispatch message as fate says.
func (s *Service) drop(p *pending, fate msgFate) {
	s.unadmit(p)
	switch fate {
	case termMsg:
		s.term(p.msg)
	case nakNow:
		s.nak(p.msg)
	case nakLater:
		if err := p.msg.NakWithDelay(s.opts.IdleWait); err != nil {
			s.taskLogger(&p.d).Warn("nak dispatch message", "error", err)
		}
	}
}

// requeue gives a message that cannot start yet back to JetStream for
// RequeueDelay: nothing is dropped, and meanwhile this worker goes on
// pulling work for its other handlers.
func (s *Service) requeue(p *pending, why string) {
	log := s.taskLogger(&p.d)
	log.Debug("attempt cannot start yet; requeueing it", "handler", p.d.Handler, "reason", why, "delay", s.opts.RequeueDelay)
	if err := p.msg.NakWithDelay(s.opts.RequeueDelay); err != nil {
		log.Warn("requeue dispatch message; it comes back after the ack wait", "error", err)
	}
}

// prepare waits for the attempt's rate limit, takes its mutex and starts
// it, on its own goroutine. ctx is Run's: when it ends, a waiting attempt
// is given back at once.
func (s *Service) prepare(ctx context.Context, p *pending) {
	defer s.runners.Done()
	if p.hs.limiter != nil {
		if err := s.waitRate(ctx, p); err != nil {
			s.drop(p, nakNow)
			return
		}
	}
	if ctx.Err() != nil {
		s.drop(p, nakNow)
		return
	}
	if p.mutexKey != "" {
		stop := s.keepInProgress([]*pending{p})
		rev, err := s.mutex.lock(p.mutexKey, &p.d)
		stop()
		if err != nil {
			log := s.taskLogger(&p.d)
			log.Error("take mutex; requeueing the attempt", "error", err, "mutex_key", p.mutexKey)
		}
		if p.mutexRev = rev; rev == 0 {
			s.unadmit(p)
			s.requeue(p, "another attempt holds mutex key "+p.mutexKey)
			return
		}
	}
	s.start(ctx, []*pending{p})
}

// waitRate waits until the handler's rate limit lets the attempt start,
// telling JetStream every inProgressEvery that the message is being worked
// on. It returns ctx's error if ctx ends first; the attempt's turn is then
// given back to the limiter.
func (s *Service) waitRate(ctx context.Context, p *pending) error {
	r := p.hs.limiter.Reserve()
	delay := r.Delay()
	if delay == 0 {
		return nil
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	progress := time.NewTicker(s.inProgressEvery())
	defer progress.Stop()
	for {
		select {
		case <-timer.C:
			return nil
		case <-progress.C:
			if err := p.msg.InProgress(); err != nil {
				log := s.taskLogger(&p.d)
				log.Warn("extend the ack wait of a rate-limited attempt", "error", err)
			}
		case <-ctx.Done():
			r.Cancel()
			return ctx.Err()
		}
	}
}
