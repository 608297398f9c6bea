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
func (rt *router) departed(id string) {
	rt.gone.mu.Lock()
	rt.gone.due[id] = time.Time{}
	rt.gone.mu.Unlock()
	select {
	case rt.gone.wake <- struct{}{}:
	default:
	}
}

// reroute routes again, until ctx ends, the attempts queued on the own
// subjects of workers that left (see [router.drainWorker]). At start it
// looks at every worker consumer of AX_DISPATCH whose worker is not live,
// for workers that left while no dispatcher watched. A worker whose queue
// may still get messages back (delivered to it before it left, and
// redelivered after their ack wait) is looked at again one ack wait later.
func (rt *router) reroute(ctx, work context.Context) error {
	if err := rt.scanDeparted(ctx); err != nil {
		rt.log.Warn().Err(err).Msg("look for the queues of workers that left; only departures seen from now on are routed again")
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := rt.now()
		next := time.Time{}
		rt.gone.mu.Lock()
		var ready []string
		for id, at := range rt.gone.due {
			if !at.After(now) {
				ready = append(ready, id)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		rt.gone.mu.Unlock()
		for _, id := range ready {
			again, err := rt.drainWorker(work, id)
			rt.gone.mu.Lock()
			switch {
			case err != nil && ctx.Err() == nil:
				rt.log.Error().Err(err).Str("worker_id", id).Msg("routing again the work queued for a worker that left failed; trying again")
				rt.gone.due[id] = rt.now().Add(retryDelay)
			case again:
				rt.gone.due[id] = rt.now().Add(streams.DefaultAckWait)
			default:
				delete(rt.gone.due, id)
			}
			if at := rt.gone.due[id]; !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
			rt.gone.mu.Unlock()
		}
		if !next.IsZero() {
			timer.Reset(max(next.Sub(rt.now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rt.gone.wake:
		case <-timer.C:
		}
	}
}

// scanDeparted schedules the queues of the worker consumers on AX_DISPATCH
// whose workers are not live: one listing of the stream's consumers.
func (rt *router) scanDeparted(ctx context.Context) error {
	stream, err := rt.js.Stream(ctx, rt.top.DispatchStream())
	if err != nil {
		return err
	}
	infos := stream.ListConsumers(ctx)
	for ci := range infos.Info() {
		id := ci.Config.Metadata["ax_worker"]
		if id == "" {
			continue
		}
		if _, live := rt.workers.live(id); !live && ci.NumPending+uint64(ci.NumAckPending) > 0 {
			rt.departed(id)
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
func (rt *router) drainWorker(ctx context.Context, id string) (bool, error) {
	if _, live := rt.workers.live(id); live {
		return false, nil
	}
	c, ok, err := rt.departedQueue(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	durable := rt.top.WorkerConsumer(id).Durable
	seen := make(map[uint64]bool)
	for {
		fresh, err := fetchFresh(c, durable, rt.batchSize, seen)
		if err != nil {
			return false, err
		}
		if len(fresh) == 0 {
			break
		}
		if err := rt.rerouteMsgs(ctx, id, fresh); err != nil {
			for _, m := range fresh {
				_ = m.Nak()
			}
			return false, err
		}
	}
	if err := rt.conn.Flush(); err != nil {
		return true, nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return true, nil
	}
	return info.NumAckPending > 0, nil
}

// departedQueue returns the consumer of the own queue of worker id, which
// left: the one it had, or, gone with its inactivity, a new one when
// messages still wait on its subject; false when none wait.
func (rt *router) departedQueue(ctx context.Context, id string) (jetstream.Consumer, bool, error) {
	cfg := rt.top.WorkerConsumer(id)
	stream := rt.top.DispatchStream()
	c, err := rt.js.Consumer(ctx, stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Gone with its inactivity; its messages may still wait.
		st, serr := rt.js.Stream(ctx, stream)
		if serr != nil {
			return nil, false, fmt.Errorf("look up stream %s: %w", stream, serr)
		}
		info, serr := st.Info(ctx, jetstream.WithSubjectFilter(cfg.FilterSubject))
		if serr != nil {
			return nil, false, fmt.Errorf("read stream %s: %w", stream, serr)
		}
		if info.State.Subjects[cfg.FilterSubject] == 0 {
			return nil, false, nil
		}
		c, err = rt.js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = rt.js.Consumer(ctx, stream, cfg.Durable)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	return c, true, nil
}

// fetchFresh fetches up to size messages waiting on c (named durable) and
// returns those not seen before (noting them in seen); those seen before,
// pinned attempts handed back, are Nak'ed: they wait for their worker.
func fetchFresh(c jetstream.Consumer, durable string, size int, seen map[uint64]bool) ([]jetstream.Msg, error) {
	batch, err := c.FetchNoWait(size)
	if err != nil {
		return nil, fmt.Errorf("fetch from consumer %s: %w", durable, err)
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
		return nil, fmt.Errorf("fetch from consumer %s: %w", durable, err)
	}
	for _, m := range again {
		_ = m.Nak()
	}
	return fresh, nil
}

// rerouteMsgs routes again the messages taken from the own queue of
// worker from, which left, by the route their Ax-Route header names: a
// hash or min_worker_version attempt to the eligible live worker that
// routing picks now, one that no live worker may take (or a message
// without the header) through a firing that routes it again after
// rerouteDelay. An attempt pinned to the worker by name is handed back to
// wait for it, with an event in its instance's timeline that says so.
func (rt *router) rerouteMsgs(ctx context.Context, from string, msgs []jetstream.Msg) error {
	rr := &rerouting{rt: rt, from: from, batch: rt.next.newBatch(), rs: newRouting(), rings: make(map[string]bool)}
	for _, m := range msgs {
		if err := rr.add(m); err != nil {
			return err
		}
	}
	return rr.finish(ctx)
}

// rerouting is a batch of the messages of a departed worker's queue (from)
// on their way to other queues: those moved (published again, or left to
// the store's route), those pinned to the worker, which wait for it, and
// the events that say so.
type rerouting struct {
	rt            *router
	from          string
	batch         *streams.AsyncBatch
	rs            *routing
	rings         map[string]bool
	moved, pinned []jetstream.Msg
	events        []store.Event
}

// add routes m again: by its routeHeader, or by the store's route when it
// has none (an older dispatcher's) or one that does not decode; an
// attempt pinned to the worker waits for it.
func (rr *rerouting) add(m jetstream.Msg) error {
	rt := rr.rt
	d, err := streams.Decode[schemas.Dispatch](m.Subject(), m.Data())
	if err != nil || d.InstanceID <= 0 {
		rt.log.Error().Err(err).Str("subject", m.Subject()).Msg("undecodable dispatch message on a departed worker's queue; terminating it")
		_ = m.Term()
		return nil
	}
	a := store.Attempt{ID: d.InstanceID, Task: d.Task, Attempt: d.Attempt, Priority: d.Priority,
		Handler: d.Handler, Payload: d.Payload}
	log := rt.log.With().Int64("instance_id", a.ID).Int("attempt", a.Attempt).Str("task", a.Task).
		Str("departed_worker", rr.from).Logger()
	header := m.Headers().Get(routeHeader)
	if header == "" {
		// Published by an older dispatcher: the store knows the route.
		return rr.fromStore(m, a)
	}
	if err := decodeRoute(&a, header); err != nil {
		log.Warn().Err(err).Msg("routing the attempt again from the store")
		return rr.fromStore(m, a)
	}
	if a.Strategy == schemas.DispatchWorker {
		log.Warn().Msg("the attempt is pinned to a worker that left; it waits for that worker")
		rt.waits.noteWorkerGone(a, rr.from)
		rr.pinned = append(rr.pinned, m)
		rr.events = append(rr.events, store.Event{InstanceID: a.ID, Attempt: a.Attempt, Kind: EventWorkerGone,
			Operator: "dispatcher", At: rt.now(),
			Reason: fmt.Sprintf("worker %s, which the attempt is pinned to, left; the attempt waits for it to come back", rr.from)})
		return nil
	}
	r, err := rt.route(a, rr.rs)
	if err != nil {
		rt.waits.noteNoWorker(a, err) // logged once per change of reason
		return rr.fromStore(m, a)
	}
	out := nats.NewMsg(r.subject)
	if out.Data, err = repool(m.Data(), d, r); err != nil {
		return err
	}
	msgID := r.msgID
	if md, err := m.Metadata(); err == nil {
		msgID += "~" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	out.Header.Set(streams.HeaderMsgID, msgID)
	if r.header != "" {
		out.Header.Set(routeHeader, r.header)
	}
	streams.CopyTrace(out.Header, m.Headers())
	rt.waits.noteRouted(a, r)
	log.Info().Str("worker_id", r.worker).Msg("attempt of a worker that left routed again")
	rr.batch.Add(out)
	rr.rings[r.ring] = true
	rr.moved = append(rr.moved, m)
	return nil
}

// fromStore moves m, whose attempt a is routed again by the store's route
// after rerouteDelay.
func (rr *rerouting) fromStore(m jetstream.Msg, a store.Attempt) error {
	if err := rr.rt.addReroute(rr.batch, a); err != nil {
		return err
	}
	rr.moved = append(rr.moved, m)
	return nil
}

// finish publishes the batch, then acknowledges the messages moved, Naks
// those pinned, records the events and rings the doorbells.
func (rr *rerouting) finish(ctx context.Context) error {
	rt := rr.rt
	rt.waits.flushWaits()
	n := rr.batch.Len()
	if err := rr.batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts of worker %s, which left: %w", n, rr.from, err)
	}
	for _, m := range rr.moved {
		if err := m.Ack(); err != nil {
			rt.log.Warn().Err(err).Str("subject", m.Subject()).Msg("ack a routed-again message; it comes back after its ack wait and is routed again, deduplicated")
		}
	}
	for _, m := range rr.pinned {
		_ = m.Nak()
	}
	if err := rt.store.RecordEvents(ctx, rr.events); err != nil {
		rt.log.Warn().Err(err).Msg("record that pinned attempts wait for a worker that left")
	}
	for ring := range rr.rings {
		_ = rt.conn.Publish(ring, nil)
	}
	rt.metrics.rerouted.WithLabelValues("moved").Add(float64(len(rr.moved)))
	rt.metrics.rerouted.WithLabelValues("pinned").Add(float64(len(rr.pinned)))
	return nil
}
