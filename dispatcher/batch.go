package dispatcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// A batchHandler handles one batch of messages and owns the
// acknowledgement of each. It runs on a goroutine of its own, while the
// batches taken before and after it may still run (see [consumeBatches]);
// what must go in the order of the batches it does in its turn: it calls
// t.wait before it, and t.pass once it is done.
type batchHandler func(ctx context.Context, msgs []jetstream.Msg, t *turn)

// A turn orders a batch after the one taken before it. [turn.wait]
// returns once that batch has passed its turn; [turn.pass] passes this
// batch's, after the batch before it has passed (a batch that fails before
// its turn may not let the next one overtake the one before it). A batch's
// turn is used by its own goroutine only; nil is a turn that never waits.
type turn struct {
	prev           <-chan struct{}
	done           chan struct{}
	waited, passed bool
}

// wait returns once the batch before has passed its turn, or ctx's error
// when ctx ends first.
func (t *turn) wait(ctx context.Context) error {
	if t == nil || t.waited {
		return nil
	}
	select {
	case <-t.prev:
		t.waited = true
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the batch before: %w", ctx.Err())
	}
}

// pass passes the batch's turn, once the batch before has passed its own;
// passing it again does nothing.
func (t *turn) pass() {
	if t == nil || t.passed {
		return
	}
	if !t.waited {
		<-t.prev
		t.waited = true
	}
	t.passed = true
	close(t.done)
}

// consumeBatches pulls from cons and calls handle with batches of up to size
// messages: it waits for a first message, then takes whatever else is already
// there, so a busy stream is handled in large batches and a quiet one without
// delay. A message that is a batch of firings (up to
// schemas.MaxTriggerBatch of them) ends the batch it is taken into, so that
// a batch holds at most size-1 messages and one such message's firings.
// handle runs on work, which outlives ctx, so a batch in flight
// finishes; messages received but not handed over when ctx ends are Nak'ed.
// handle owns the acknowledgement of every message it is given.
//
// What it holds is bounded by bytes as well as by messages (see
// [pullByteLimit]): each pull asks the server for at most maxBytes, and
// the messages received but not yet taken into a batch hold at most
// maxBytes of data (one message larger than that passes alone), so a
// stream of bulk messages, each up to the server's max_payload, is not
// read into memory 2*size at a time.
//
// Up to inFlight batches are handled at once, each on a goroutine of its
// own, their turns (see [turn]) in the order they were taken; the next
// batch is taken once fewer are in flight. With inFlight 1 each batch is
// handled after the one before has ended. consumeBatches returns once every
// batch it handed over has ended.
func consumeBatches(ctx, work context.Context, cons jetstream.Consumer, size, inFlight, maxBytes int, handle batchHandler) error {
	in := newInbox(size, maxBytes)
	cc, err := cons.Consume(in.receive, jetstream.PullMaxMessagesWithBytesLimit(2*size, maxBytes))
	if err != nil {
		return fmt.Errorf("consume %s: %w", cons.CachedInfo().Name, err)
	}
	var batches sync.WaitGroup
	slots := make(chan struct{}, max(inFlight, 1))
	defer func() {
		close(in.done)
		cc.Stop()
		<-cc.Closed()
		in.nakAll()
		batches.Wait()
	}()
	prev := make(chan struct{})
	close(prev)
	for {
		select {
		case <-ctx.Done():
			return nil
		case slots <- struct{}{}:
		}
		batch, ok := in.take(ctx, size)
		if !ok {
			<-slots
			return nil
		}
		t := &turn{prev: prev, done: make(chan struct{})}
		prev = t.done
		batches.Go(func() {
			defer func() { <-slots }()
			defer t.pass()
			handle(work, batch, t)
		})
	}
}

// inbox holds the messages a consumer of [consumeBatches] received and
// has not yet taken into a batch, at most maxBytes of data (one message
// larger than that passes alone).
type inbox struct {
	ch   chan jetstream.Msg
	done chan struct{} // closed when the consumer stops
	// queued is the data of the messages in ch; taken tells receive,
	// waiting for room, that the loop took one. receive runs on one
	// goroutine at a time (the subscription's), so while it waits the
	// client takes no more from the server than its pull asked for.
	queued   atomic.Int64
	taken    chan struct{}
	maxBytes int64
}

func newInbox(size, maxBytes int) *inbox {
	return &inbox{ch: make(chan jetstream.Msg, 2*size), done: make(chan struct{}), taken: make(chan struct{}, 1), maxBytes: int64(maxBytes)}
}

// receive queues m once there is room for its data; a message received
// after the consumer stopped is Nak'ed.
func (b *inbox) receive(m jetstream.Msg) {
	n := int64(len(m.Data()))
	for q := b.queued.Load(); q > 0 && q+n > b.maxBytes; q = b.queued.Load() {
		select {
		case <-b.taken:
		case <-b.done:
			_ = m.Nak()
			return
		}
	}
	b.queued.Add(n)
	select {
	case b.ch <- m:
	case <-b.done:
		b.queued.Add(-n)
		_ = m.Nak()
	}
}

// take waits for a first message, then takes whatever else is queued, up
// to size messages, ending the batch at a message that is a batch of
// firings; false when ctx ended first.
func (b *inbox) take(ctx context.Context, size int) ([]jetstream.Msg, bool) {
	var batch []jetstream.Msg
	select {
	case <-ctx.Done():
		return nil, false
	case m := <-b.ch:
		batch = append(make([]jetstream.Msg, 0, size), m)
	}
fill:
	for len(batch) < size && !schemas.IsTriggerBatch(batch[len(batch)-1].Data()) {
		select {
		case m := <-b.ch:
			batch = append(batch, m)
		default:
			break fill
		}
	}
	var n int64
	for _, m := range batch {
		n += int64(len(m.Data()))
	}
	b.queued.Add(-n)
	select {
	case b.taken <- struct{}{}:
	default:
	}
	return batch, true
}

// nakAll returns the messages still queued, once the consumer stopped.
func (b *inbox) nakAll() {
	for {
		select {
		case m := <-b.ch:
			_ = m.Nak()
		default:
			return
		}
	}
}

// pullByteLimit is the most bytes a consumer of [consumeBatches] asks the
// server for in one pull, and holds received before they are taken into a
// batch, given the connection's max_payload: 8 MiB, or 4 max_payloads if
// more. A pull's max_bytes counts a message's subject, reply and headers
// besides its data, and the server neither splits a message nor skips
// one larger than a pull's max_bytes: it ends the pull (409 Message Size
// Exceeds MaxBytes) and would end every pull after it the same way, the
// consumer wedged on that message. The limit therefore stays well above
// the largest message a client can publish (max_payload, which a server
// of the cluster configured otherwise than the one we are connected to
// may set higher), and 8 MiB is far above what 2*BatchSize single firings
// or reports take, so it bounds only streams of bulk messages.
func pullByteLimit(maxPayload int64) int {
	return int(max(8<<20, 4*maxPayload))
}
