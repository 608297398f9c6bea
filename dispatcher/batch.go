package dispatcher

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// consumeBatches pulls from cons and calls handle with batches of up to max
// messages: it waits for a first message, then takes whatever else is already
// there, so a busy stream is handled in large batches and a quiet one without
// delay. handle runs on work, which outlives ctx, so a batch in flight
// finishes; messages received but not handed over when ctx ends are Nak'ed.
// handle owns the acknowledgement of every message it is given.
func consumeBatches(ctx, work context.Context, cons jetstream.Consumer, max int,
	handle func(ctx context.Context, msgs []jetstream.Msg)) error {
	ch := make(chan jetstream.Msg, 2*max)
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-done:
			_ = m.Nak()
		}
	}, jetstream.PullMaxMessages(2*max))
	if err != nil {
		return fmt.Errorf("consume %s: %w", cons.CachedInfo().Name, err)
	}
	defer func() {
		close(done)
		cc.Stop()
		<-cc.Closed()
		for {
			select {
			case m := <-ch:
				_ = m.Nak()
			default:
				return
			}
		}
	}()
	batch := make([]jetstream.Msg, 0, max)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			batch = append(batch[:0], m)
		}
	fill:
		for len(batch) < max {
			select {
			case m := <-ch:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		handle(work, batch)
	}
}
