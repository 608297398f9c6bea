package dispatcher

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// A batch handler does a batch's work in two parts. The first, the call
// itself, does everything whose order matters: it reads and writes
// PostgreSQL (the batch's statements commit in the order the batches came)
// and sends the batch's publishes, which the server takes in that order
// too. What it returns, the rest, awaits those publishes' acknowledgements
// and then acknowledges the batch's messages; nil when nothing is left.
// The rest of one batch may run while the next batch's first part does:
// see [consumeBatches].
type batchHandler func(ctx context.Context, msgs []jetstream.Msg) (rest func())

// consumeBatches pulls from cons and calls handle with batches of up to size
// messages: it waits for a first message, then takes whatever else is already
// there, so a busy stream is handled in large batches and a quiet one without
// delay. handle runs on work, which outlives ctx, so a batch in flight
// finishes; messages received but not handed over when ctx ends are Nak'ed.
// handle owns the acknowledgement of every message it is given.
//
// The rest that handle returns runs on a goroutine of its own, up to
// inFlight of them at once, while the next batch is taken and handled: a
// batch no longer waits for the acknowledgements of the one before it. A
// batch whose handle returns while inFlight rests run waits for one of them
// to end before the next batch is taken. consumeBatches returns once every
// rest has ended.
func consumeBatches(ctx, work context.Context, cons jetstream.Consumer, size, inFlight int, handle batchHandler) error {
	ch := make(chan jetstream.Msg, 2*size)
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-done:
			_ = m.Nak()
		}
	}, jetstream.PullMaxMessages(2*size))
	if err != nil {
		return fmt.Errorf("consume %s: %w", cons.CachedInfo().Name, err)
	}
	var rests sync.WaitGroup
	slots := make(chan struct{}, max(inFlight, 1))
	defer func() {
		close(done)
		cc.Stop()
		<-cc.Closed()
		for {
			select {
			case m := <-ch:
				_ = m.Nak()
			default:
				rests.Wait()
				return
			}
		}
	}()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			// A fresh slice each time: the rest of the batch before may
			// still hold its own.
			batch = append(make([]jetstream.Msg, 0, size), m)
		}
	fill:
		for len(batch) < size {
			select {
			case m := <-ch:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		rest := handle(work, batch)
		if rest == nil {
			continue
		}
		slots <- struct{}{}
		rests.Go(func() {
			defer func() { <-slots }()
			rest()
		})
	}
}
