package dispatcher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Fairness within a pool. A task with dispatch.fairness has its attempts
// held back in PostgreSQL (fair_queue) instead of published, and the
// fairness part lets them into their queue on AX_DISPATCH a few at a time:
// while the queue's subject holds fewer than its window of messages, it
// lets in the attempts that finish first by start-time fair queuing over
// their keys (store.Store.ReleaseFair). So a key's backlog waits in
// PostgreSQL, not in the queue, and another key's firing waits behind at
// most a window of it. Why there and not in per-key subjects: see
// docs/architecture.md, "Fairness".
const (
	// fairWindowMin is the fewest messages a fair queue may hold: enough
	// that its workers find work while the next release is on its way.
	fairWindowMin = 64
	// fairWindowMax bounds the window however many slots serve the queue.
	fairWindowMax = 1024
	// fairInterval is how often the queues are topped up when no attempt
	// was held meanwhile.
	fairInterval = 25 * time.Millisecond
	// fairIdle is how often a dispatcher looks for attempts held for fair
	// dispatch while it found none: a dispatcher that holds some releases
	// them at once, and the others look every fairInterval once they see
	// them (those a dispatcher held and died before releasing wait at most
	// this long).
	fairIdle = time.Second
)

// fairness holds back and lets in the attempts of tasks with a fairness
// key, and knows every task version's slots (see store.TaskFlow).
type fairness struct {
	store   *store.Store
	top     streams.Topology
	conn    interface{ Publish(string, []byte) error }
	workers *liveWorkers
	render  func(text string, payload []byte) (string, error)
	newPub  func() *streams.AsyncBatch
	log     zerolog.Logger
	kick    chan struct{}
	js      jetstream.JetStream // set by Run

	mu    sync.Mutex
	flows map[store.TaskVersion]store.TaskFlow

	// rates is how fast each queue's attempts were let in lately (per
	// second, smoothed), by subject; the release loop's own.
	rates map[string]*fairRate
}

// fairRate is a queue's recent release rate.
type fairRate struct {
	at     time.Time
	perSec float64
}

func newFairness(s *Service) *fairness {
	return &fairness{store: s.opts.Store, top: s.top, conn: s.opts.Conn, workers: s.workers,
		render: func(text string, payload []byte) (string, error) { return s.router.renderHashKey(text, payload) },
		newPub: s.newBatch, log: s.log, kick: make(chan struct{}, 1),
		flows: make(map[store.TaskVersion]store.TaskFlow), rates: make(map[string]*fairRate)}
}

// fairHold is what one sendAttempts holds back.
type fairHold struct {
	f    *fairness
	held []store.FairMessage
}

// newHold returns the hold of one sendAttempts.
func (f *fairness) newHold() *fairHold { return &fairHold{f: f} }

// flow returns the flow settings of a's task version, read from the store
// the first time (a version never changes).
func (f *fairness) flow(ctx context.Context, a store.Attempt) (store.TaskFlow, error) {
	k := store.TaskVersion{Task: a.Task, Version: a.TaskVersion}
	f.mu.Lock()
	flow, ok := f.flows[k]
	f.mu.Unlock()
	if ok {
		return flow, nil
	}
	got, err := f.store.TaskFlows(ctx, []store.TaskVersion{k})
	if err != nil {
		return store.TaskFlow{}, err
	}
	// A version not found (a test's hand-made instance) has the defaults.
	f.mu.Lock()
	f.flows[k] = got[k]
	f.mu.Unlock()
	return got[k], nil
}

// add sets the slots of d, attempt a's dispatch message routed by r, and
// either holds it back (see hold) or adds it to batch and marks its
// doorbell in rings.
func (h *fairHold) add(ctx context.Context, batch *streams.AsyncBatch, rings map[string]bool, a store.Attempt, r route,
	d schemas.Dispatch, limit int64) error {
	flow, err := h.f.flow(ctx, a)
	if err != nil {
		return err
	}
	if flow.Slots > 1 {
		d.Slots = flow.Slots
	}
	if held, err := h.hold(a, r, flow, d, limit); held || err != nil {
		return err
	}
	if err := addDispatch(batch, r, d, limit); err != nil {
		return err
	}
	rings[r.ring] = true
	return nil
}

// hold holds d, attempt a's dispatch message routed by r, back, and
// reports true, when its task has a fairness key and r is a pool's queue:
// it is then published by the release loop, not by the caller.
func (h *fairHold) hold(a store.Attempt, r route, flow store.TaskFlow, d schemas.Dispatch, limit int64) (bool, error) {
	if flow.Fairness.Key == "" || r.worker != "" || r.header != "" {
		return false, nil
	}
	key, err := h.f.render(flow.Fairness.Key, a.Payload)
	if err != nil {
		// Documented: such a payload shares the key "".
		key = ""
	}
	data, err := schemas.MarshalDispatch(d)
	if err != nil {
		return false, fmt.Errorf("encode message for %s: %w", r.subject, err)
	}
	if int64(len(data)) > limit {
		return false, errTooLarge{size: len(data), limit: limit}
	}
	h.held = append(h.held, store.FairMessage{InstanceID: a.ID, Attempt: a.Attempt, Subject: r.subject, Ring: r.ring,
		MsgID: r.msgID, Key: key, Weight: flow.Fairness.Weight(key), Message: data, Traceparent: r.trace})
	return true, nil
}

// flush stores what the hold holds back and wakes the release loop.
func (h *fairHold) flush(ctx context.Context) error {
	if len(h.held) == 0 {
		return nil
	}
	if err := h.f.store.HoldFair(ctx, h.held); err != nil {
		return err
	}
	select {
	case h.f.kick <- struct{}{}:
	default:
	}
	return nil
}

// releaseLoop tops up the fair queues every fairInterval while attempts
// are held, and at once after this dispatcher held some; while none is
// held it looks every fairIdle, until ctx ends.
func (f *fairness) releaseLoop(ctx context.Context) error {
	t := time.NewTimer(0) // held before a restart: at once
	defer t.Stop()
	var stream jetstream.Stream
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-f.kick:
		}
		next := fairInterval
		if stream == nil {
			s, err := f.js.Stream(ctx, f.top.DispatchStream())
			if err != nil {
				f.log.Warn().Err(err).Msg("read the dispatch stream for fair dispatch")
			}
			stream = s
		}
		if stream != nil {
			held, err := f.releaseAll(ctx, stream)
			if err != nil && ctx.Err() == nil {
				f.log.Warn().Err(err).Msg("release attempts held for fair dispatch")
			}
			if err == nil && !held {
				next = fairIdle
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// releaseAll tops up every queue that has attempts held, and tells whether
// any has.
func (f *fairness) releaseAll(ctx context.Context, stream jetstream.Stream) (held bool, err error) {
	subjects, err := f.store.FairSubjects(ctx)
	if err != nil {
		return false, err
	}
	for _, subject := range subjects {
		room := func() (int, error) {
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
			if err != nil {
				return 0, fmt.Errorf("read the depth of %s: %w", subject, err)
			}
			return f.window(subject) - int(info.State.Subjects[subject]), nil
		}
		n, err := f.store.ReleaseFair(ctx, subject, room, f.publish)
		if err != nil {
			return true, err
		}
		f.measure(subject, n, time.Now())
	}
	return len(subjects) > 0, nil
}

// measure smooths the release rate of subject with n let in now.
func (f *fairness) measure(subject string, n int, now time.Time) {
	r, ok := f.rates[subject]
	if !ok {
		f.rates[subject] = &fairRate{at: now}
		return
	}
	if dt := now.Sub(r.at).Seconds(); dt > 0 {
		r.perSec = 0.7*r.perSec + 0.3*float64(n)/dt
		r.at = now
	}
}

// window is how many messages a fair queue may hold: twice the slots of
// the live workers that serve it (what they take in one pull each, and as
// much again for the next), or what they took in the last four release
// intervals when that is more (short runs drain a queue of twice the
// slots before the next top-up), within [fairWindowMin, fairWindowMax].
// Either way a new key's attempt waits behind a window that its workers
// drain in about one run time or four intervals.
func (f *fairness) window(subject string) int {
	rest := strings.TrimPrefix(subject, strings.TrimSuffix(f.top.Dispatch("p", "q", "h"), "p.q.h"))
	parts := strings.SplitN(rest, ".", 3)
	slots := 0
	if len(parts) == 3 {
		for _, w := range f.workers.eligible(parts[0], parts[2], "", 0) {
			slots += w.Slots
		}
	}
	drained := 0
	if r, ok := f.rates[subject]; ok {
		drained = int(r.perSec * 4 * fairInterval.Seconds())
	}
	return min(max(2*slots, drained, fairWindowMin), fairWindowMax)
}

// publish publishes held messages, awaits them and rings their doorbells.
func (f *fairness) publish(msgs []store.FairMessage) error {
	batch := f.newPub()
	rings := map[string]bool{}
	for _, m := range msgs {
		// The traceparent of the span that routed it: the executor's run
		// is its child.
		hdr := [2]streams.Header{{Key: streams.HeaderMsgID, Value: m.MsgID}}
		n := 1
		if tp, ok := streams.TraceHeader(m.Traceparent); ok {
			hdr[n], n = tp, n+1
		}
		batch.AddData(m.Subject, m.Message, hdr[:n]...)
		rings[m.Ring] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts held for fair dispatch: %w", len(msgs), err)
	}
	for ring := range rings {
		_ = f.conn.Publish(ring, nil)
	}
	return nil
}
