package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// publishAttempts sends the attempts (see [Service.sendAttempts]) and
// awaits them with whatever batch holds already.
func (s *Service) publishAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) error {
	sent, err := s.sendAttempts(ctx, batch, attempts)
	if err != nil {
		return err
	}
	return sent.await(ctx)
}

// sentAttempts is a batch of attempts sent and not yet acknowledged.
type sentAttempts struct {
	s     *Service
	batch *streams.AsyncBatch
	rings map[string]bool
}

// await awaits the acknowledgements of everything the batch holds
// together, then rings each doorbell of the attempts' queues once: an
// executor that the ring wakes finds the attempt stored.
func (sa sentAttempts) await(ctx context.Context) error {
	n := sa.batch.Len()
	if err := sa.batch.Wait(ctx); err != nil {
		return fmt.Errorf("publish %d attempts and firings: %w", n, err)
	}
	for ring := range sa.rings {
		// The doorbell is a hint: an idle executor that misses it polls anyway.
		_ = sa.s.opts.Conn.Publish(ring, nil)
	}
	return nil
}

// sendAttempts fans out the firings of sharded and broadcast tasks into
// their children (see [Service.fanOut]), routes every DISPATCHED attempt
// (see [router.route]) and publishes it into batch without awaiting the
// acknowledgement, which the sentAttempts it returns awaits.
// Re-publishing an attempt is harmless: its message id dedupes it. An attempt that no
// live worker may take now is routed again after rerouteDelay, with a
// warning naming its pool and min_worker_version.
func (s *Service) sendAttempts(ctx context.Context, batch *streams.AsyncBatch, attempts []store.Attempt) (sentAttempts, error) {
	var parents []store.Attempt
	routed := make([]store.Attempt, 0, len(attempts))
	for _, a := range attempts {
		switch {
		case a.Coordinates() && (a.State == schemas.StateDispatched || a.State == schemas.StateRunning):
			// A RUNNING parent comes back when its batch is retried:
			// its children may not have been published.
			parents = append(parents, a)
		case a.State == schemas.StateDispatched && !a.Coordinates():
			routed = append(routed, a)
		}
	}
	children, err := s.fanOut(ctx, batch, parents)
	if err != nil {
		return sentAttempts{}, fmt.Errorf("fan out %d firings: %w", len(parents), err)
	}
	fair := s.fair.newHold()
	rings := make(map[string]bool)
	rs := newRouting()
	// Headers (the message id, a route) ride in the same max payload.
	limit := s.opts.Conn.MaxPayload() - 1<<10
	var tooLarge []store.Failure
	batch.Grow(len(routed) + len(children))
	for _, a := range append(routed, children...) {
		if a.State != schemas.StateDispatched {
			continue
		}
		failure, err := s.sendAttempt(ctx, batch, fair, rings, rs, a, limit)
		if err != nil {
			return sentAttempts{}, err
		}
		if failure != nil {
			tooLarge = append(tooLarge, *failure)
		}
	}
	if err := fair.flush(ctx); err != nil {
		return sentAttempts{}, err
	}
	s.waits.flushWaits()
	if len(tooLarge) > 0 {
		if err := s.reaper.failAttempts(ctx, tooLarge, nil, nil, nil, "dispatch message too large"); err != nil {
			return sentAttempts{}, fmt.Errorf("fail %d attempts too large to dispatch: %w", len(tooLarge), err)
		}
	}
	return sentAttempts{s: s, batch: batch, rings: rings}, nil
}

// sendAttempt routes attempt a (see [router.route]) and adds its
// dispatch message to batch, under the span of its routing; one that no
// live worker may take now is routed again after rerouteDelay. It returns
// the failure of an attempt whose message is too large to publish: it
// would fail the batch on every try, so it fails alone.
func (s *Service) sendAttempt(ctx context.Context, batch *streams.AsyncBatch, fair *fairHold, rings map[string]bool,
	rs *routing, a store.Attempt, limit int64) (*store.Failure, error) {
	span := s.tracing.startDispatch(&a)
	r, err := s.router.route(a, rs)
	if err != nil {
		endDispatch(span, r, err)
		s.waits.noteNoWorker(a, err) // logged once per change of reason
		return nil, s.router.addReroute(batch, a)
	}
	s.waits.noteRouted(a, r)
	d := s.dispatchOf(a)
	d.Pool = r.poolOr(a.Pool)
	r.trace = traceOf(span).Parent
	err = fair.add(ctx, batch, rings, a, r, d, limit)
	endDispatch(span, r, err)
	if tl, ok := errors.AsType[errTooLarge](err); ok {
		return &store.Failure{InstanceID: a.ID, Attempt: a.Attempt, Reason: tl.Error(), At: s.now(), Permanent: true}, nil
	}
	return nil, err
}

// dispatchOf returns the dispatch message of attempt a.
func (s *Service) dispatchOf(a store.Attempt) schemas.Dispatch {
	return schemas.Dispatch{
		InstanceID:    a.ID,
		Task:          a.Task,
		TaskVersion:   a.TaskVersion,
		Handler:       a.Handler,
		Attempt:       a.Attempt,
		MaxAttempts:   a.MaxAttempts,
		EventID:       a.EventID,
		Priority:      a.Priority,
		Pool:          a.Pool,
		Payload:       a.Payload,
		TimeoutMS:     a.TimeoutMS,
		MutexTemplate: a.MutexTemplate,
		FiredAt:       a.FiredAt,
		DispatchedAt:  a.DispatchedAt,
		RunID:         a.RunID,
		Parents:       a.Parents,
		ShardIndex:    a.ShardIndex,
		ShardCount:    a.ShardCount,
		Protocol:      s.opts.Protocol,
		ReportBatches: !s.opts.SingleReports,
		Republished:   a.Republished,
	}
}

// dispatchHeadroom is what a dispatch message adds to its firing's payload
// and parents' outputs (ids, names, the mutex template, headers) at most:
// a firing whose payload leaves less under the NATS max payload could be
// stored but never dispatched.
const dispatchHeadroom = 4 << 10

// oversize says why ev's dispatch message would exceed the NATS max
// payload, or "" when it fits: a firing published straight to NATS may
// come within a few bytes of the limit, and its attempt then could never
// be published (issue 24: an instance stayed DISPATCHED for ever, the
// batch failing each 2 s).
func (it *intake) oversize(ev schemas.TriggerEvent) string {
	size := len(ev.Payload)
	for _, p := range ev.Parents {
		size += len(p.Output)
	}
	if limit := it.conn.MaxPayload() - dispatchHeadroom; int64(size) > limit {
		return fmt.Sprintf("the payload (and parents' outputs) has %d bytes, over the %d a dispatch message may carry "+
			"(the NATS max_payload of %d bytes less %d for the envelope); send a smaller payload, such as a reference to the data",
			size, limit, it.conn.MaxPayload(), dispatchHeadroom)
	}
	return ""
}

func dispatchMsgID(id int64, attempt int) string {
	var b [41]byte
	return string(strconv.AppendInt(append(strconv.AppendInt(b[:0], id, 10), '-'), int64(attempt), 10))
}
