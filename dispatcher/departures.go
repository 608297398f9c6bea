package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// EventWorkerGone is the kind of the instance event that says an attempt
// pinned to a worker (strategy worker, or a broadcast child) waits for that
// worker, which left.
const EventWorkerGone = "worker_gone"

// departures are the workers whose own queues wait to be routed again,
// with when to look at each next.
type departures struct {
	mu   sync.Mutex
	due  map[string]time.Time
	wake chan struct{}
}

func newDepartures() *departures {
	return &departures{due: make(map[string]time.Time), wake: make(chan struct{}, 1)}
}

// departed schedules the queue of worker id to be routed again at once:
// its key left ax-workers (a clean stop or an expiry), or a lease it held
// lapsed.
func (s *Service) departed(id string) {
	s.gone.mu.Lock()
	s.gone.due[id] = time.Time{}
	s.gone.mu.Unlock()
	select {
	case s.gone.wake <- struct{}{}:
	default:
	}
}

// reroute routes again, until ctx ends, the attempts queued on the own
// subjects of workers that left (see [Service.drainWorker]). At start it
// looks at every worker consumer of AX_DISPATCH whose worker is not live,
// for workers that left while no dispatcher watched. A worker whose queue
// may still get messages back (delivered to it before it left, and
// redelivered after their ack wait) is looked at again one ack wait later.
func (s *Service) reroute(ctx, work context.Context) error {
	if err := s.scanDeparted(ctx); err != nil {
		s.log.Warn().Err(err).Msg("look for the queues of workers that left; only departures seen from now on are routed again")
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := s.now()
		next := time.Time{}
		s.gone.mu.Lock()
		var ready []string
		for id, at := range s.gone.due {
			if !at.After(now) {
				ready = append(ready, id)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		s.gone.mu.Unlock()
		for _, id := range ready {
			again, err := s.drainWorker(work, id)
			s.gone.mu.Lock()
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Error().Err(err).Str("worker_id", id).Msg("routing again the work queued for a worker that left failed; trying again")
				s.gone.due[id] = s.now().Add(retryDelay)
			case again:
				s.gone.due[id] = s.now().Add(streams.DefaultAckWait)
			default:
				delete(s.gone.due, id)
			}
			if at := s.gone.due[id]; !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
			s.gone.mu.Unlock()
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(s.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.gone.wake:
		case <-timer.C:
		}
	}
}

// scanDeparted schedules the queues of the worker consumers on AX_DISPATCH
// whose workers are not live: one listing of the stream's consumers.
func (s *Service) scanDeparted(ctx context.Context) error {
	stream, err := s.js.Stream(ctx, s.top.DispatchStream())
	if err != nil {
		return err
	}
	infos := stream.ListConsumers(ctx)
	for ci := range infos.Info() {
		id := ci.Config.Metadata["ax_worker"]
		if id == "" {
			continue
		}
		if _, live := s.workers.live(id); !live && ci.NumPending+uint64(ci.NumAckPending) > 0 {
			s.departed(id)
		}
	}
	return infos.Err()
}

// drainWorker routes again the attempts queued on the own subject of
// worker id, which left, unless it is live again. It reports whether the
// queue should be looked at again later: messages delivered to the worker
// and not acknowledged come back only after their ack wait.
//
// Exactly once: the dispatcher takes each message from the worker's own
// consumer (from then on it is in flight to the dispatcher, and the worker,
// should it come back, cannot have it), publishes the attempt to its new
// route and awaits the stream's acknowledgement, and only then acknowledges
// the old message, which removes it from the work queue. Between the two, a
// dispatcher that crashes leaves the old message to be redelivered to the
// worker's consumer after its ack wait, and routed again by the next look
// (the new copy's message id, which names the old message's sequence,
// dedupes the second publish); should the worker come back and take it
// first, the lease of the attempt (created only if absent) lets one copy
// run, never two.
func (s *Service) drainWorker(ctx context.Context, id string) (bool, error) {
	if _, live := s.workers.live(id); live {
		return false, nil
	}
	cfg := s.top.WorkerConsumer(id)
	stream := s.top.DispatchStream()
	c, err := s.js.Consumer(ctx, stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Gone with its inactivity; its messages may still wait.
		st, serr := s.js.Stream(ctx, stream)
		if serr != nil {
			return false, fmt.Errorf("look up stream %s: %w", stream, serr)
		}
		info, serr := st.Info(ctx, jetstream.WithSubjectFilter(cfg.FilterSubject))
		if serr != nil {
			return false, fmt.Errorf("read stream %s: %w", stream, serr)
		}
		if info.State.Subjects[cfg.FilterSubject] == 0 {
			return false, nil
		}
		c, err = s.js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = s.js.Consumer(ctx, stream, cfg.Durable)
		}
	}
	if err != nil {
		return false, fmt.Errorf("consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	seen := make(map[uint64]bool)
	for {
		batch, err := c.FetchNoWait(s.opts.BatchSize)
		if err != nil {
			return false, fmt.Errorf("fetch from consumer %s: %w", cfg.Durable, err)
		}
		var fresh, again []jetstream.Msg
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err == nil && seen[md.Sequence.Stream] {
				again = append(again, m)
				continue
			}
			if err == nil {
				seen[md.Sequence.Stream] = true
			}
			fresh = append(fresh, m)
		}
		if err := batch.Error(); err != nil {
			for _, m := range append(fresh, again...) {
				_ = m.Nak()
			}
			return false, fmt.Errorf("fetch from consumer %s: %w", cfg.Durable, err)
		}
		// Pinned attempts, handed back, come again: they wait for the worker.
		for _, m := range again {
			_ = m.Nak()
		}
		if len(fresh) == 0 {
			break
		}
		if err := s.rerouteMsgs(ctx, id, fresh); err != nil {
			for _, m := range fresh {
				_ = m.Nak()
			}
			return false, err
		}
	}
	if err := s.opts.Conn.Flush(); err != nil {
		return true, nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return true, nil
	}
	return info.NumAckPending > 0, nil
}

// rerouteMsgs routes again the messages taken from the own queue of
// worker from, which left, by the route their Ax-Route header names: a
// hash or min_worker_version attempt to the eligible live worker that
// routing picks now, one that no live worker may take (or a message
// without the header) through a firing that routes it again after
// rerouteDelay. An attempt pinned to the worker by name is handed back to
// wait for it, with an event in its instance's timeline that says so.
func (s *Service) rerouteMsgs(ctx context.Context, from string, msgs []jetstream.Msg) error {
	batch := s.pub.Batch()
	rs := newRouting()
	rings := make(map[string]bool)
	var moved, pinned []jetstream.Msg
	var events []store.Event
	for _, m := range msgs {
		d, err := streams.Decode[schemas.Dispatch](m.Subject(), m.Data())
		if err != nil || d.InstanceID <= 0 {
			s.log.Error().Err(err).Str("subject", m.Subject()).Msg("undecodable dispatch message on a departed worker's queue; terminating it")
			_ = m.Term()
			continue
		}
		a := store.Attempt{ID: d.InstanceID, Task: d.Task, Attempt: d.Attempt, Priority: d.Priority,
			Handler: d.Handler, Payload: d.Payload}
		log := s.log.With().Int64("instance_id", a.ID).Int("attempt", a.Attempt).Str("task", a.Task).
			Str("departed_worker", from).Logger()
		header := m.Headers().Get(routeHeader)
		if header == "" {
			// Published by an older dispatcher: the store knows the route.
			if err := s.addReroute(batch, a); err != nil {
				return err
			}
			moved = append(moved, m)
			continue
		}
		if err := decodeRoute(&a, header); err != nil {
			log.Warn().Err(err).Msg("routing the attempt again from the store")
			if err := s.addReroute(batch, a); err != nil {
				return err
			}
			moved = append(moved, m)
			continue
		}
		if a.Strategy == schemas.DispatchWorker {
			log.Warn().Msg("the attempt is pinned to a worker that left; it waits for that worker")
			s.noteWorkerGone(a, from)
			pinned = append(pinned, m)
			events = append(events, store.Event{InstanceID: a.ID, Attempt: a.Attempt, Kind: EventWorkerGone,
				Operator: "dispatcher", At: s.now(),
				Reason: fmt.Sprintf("worker %s, which the attempt is pinned to, left; the attempt waits for it to come back", from)})
			continue
		}
		r, err := s.route(a, rs)
		if err != nil {
			s.noteNoWorker(a, err)
			if err := s.addReroute(batch, a); err != nil {
				return err
			}
			moved = append(moved, m)
			continue
		}
		out := nats.NewMsg(r.subject)
		out.Data = m.Data()
		msgID := r.msgID
		if md, err := m.Metadata(); err == nil {
			msgID += "~" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
		out.Header.Set(streams.HeaderMsgID, msgID)
		if r.header != "" {
			out.Header.Set(routeHeader, r.header)
		}
		s.noteRouted(a, r)
		log.Info().Str("worker_id", r.worker).Msg("attempt of a worker that left routed again")
		batch.Add(out)
		rings[r.ring] = true
		moved = append(moved, m)
	}
	s.flushWaits()
	n := batch.Len()
	if err := batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts of worker %s, which left: %w", n, from, err)
	}
	for _, m := range moved {
		if err := m.Ack(); err != nil {
			s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("ack a routed-again message; it comes back after its ack wait and is routed again, deduplicated")
		}
	}
	for _, m := range pinned {
		_ = m.Nak()
	}
	if err := s.opts.Store.RecordEvents(ctx, events); err != nil {
		s.log.Warn().Err(err).Msg("record that pinned attempts wait for a worker that left")
	}
	for ring := range rings {
		_ = s.opts.Conn.Publish(ring, nil)
	}
	s.metrics.rerouted.WithLabelValues("moved").Add(float64(len(moved)))
	s.metrics.rerouted.WithLabelValues("pinned").Add(float64(len(pinned)))
	return nil
}
