package executor

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
)

// queue is one pool's work at one priority: a durable consumer on AX_DISPATCH.
type queue struct {
	pool     string
	priority schemas.Priority
	consumer jetstream.Consumer
}

// pullOrder returns the queues in the order a worker drains them: every
// pool's work of the highest priority first, then the next priority, pools
// in the order given.
func pullOrder(pools []string, priorities []schemas.Priority) []queue {
	qs := make([]queue, 0, len(pools)*len(priorities))
	for _, p := range priorities {
		for _, pool := range pools {
			qs = append(qs, queue{pool: pool, priority: p})
		}
	}
	return qs
}

// lowFirstEvery is the anti-starvation rule: every lowFirstEvery-th round
// that takes work drains the queues lowest priority first. Under sustained
// urgent load, low-priority work thus still gets the first pick of one round
// in five (and normal the second), so its backlog keeps moving; otherwise
// higher priorities always go first.
const lowFirstEvery = 5

// pull takes work while there are free slots, until ctx ends: it fetches
// no more messages than it has free slots, admits each (see admit), starts
// the attempts that need not wait in one batch and hands the others to
// prepare. It returns an error only when the NATS connection closed under it.
func (s *Service) pull(ctx context.Context) error {
	idle := time.NewTimer(s.opts.IdleWait)
	defer idle.Stop()
	rounds := 0 // rounds that took work
	for ctx.Err() == nil {
		if s.opts.Conn.IsClosed() {
			return errors.New("run executor: the NATS connection was closed")
		}
		free := s.opts.Slots - s.Busy()
		if free <= 0 {
			select {
			case <-s.freed:
			case <-ctx.Done():
			}
			continue
		}
		msgs := s.fetch(free, rounds%lowFirstEvery == lowFirstEvery-1)
		if len(msgs) == 0 {
			idle.Reset(s.opts.IdleWait)
			select {
			case <-s.doorbell:
			case <-s.freed:
			case <-idle.C:
			case <-ctx.Done():
			}
			continue
		}
		if ctx.Err() != nil {
			// Fetched but not started: give them back at once.
			for _, m := range msgs {
				s.nak(m)
			}
			break
		}
		rounds++
		var batch []*pending
		for _, m := range msgs {
			p := s.admit(m)
			switch {
			case p == nil:
			case p.waits():
				s.runners.Add(1)
				go s.prepare(ctx, p)
			default:
				batch = append(batch, p)
			}
		}
		s.start(ctx, batch)
	}
	return nil
}

// fetch takes up to n messages, without waiting, from the worker's own
// queue and then the pool queues in pull order, or in the reverse order
// (lowest priority first) when lowFirst.
func (s *Service) fetch(n int, lowFirst bool) []jetstream.Msg {
	var msgs []jetstream.Msg
	for i := -1; i < len(s.queues); i++ {
		if len(msgs) >= n {
			break
		}
		var q queue
		switch {
		case i < 0:
			q = s.own
		case lowFirst:
			q = s.queues[len(s.queues)-1-i]
		default:
			q = s.queues[i]
		}
		batch, err := q.consumer.FetchNoWait(n - len(msgs))
		if err != nil {
			s.log.Warn().Err(err).Str("pool", q.pool).Str("priority", string(q.priority)).Msg("fetch dispatch messages")
			continue
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil {
			s.log.Warn().Err(err).Str("pool", q.pool).Str("priority", string(q.priority)).Msg("fetch dispatch messages")
		}
	}
	return msgs
}

func (s *Service) nak(m jetstream.Msg) {
	if err := m.Nak(); err != nil {
		s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("nak dispatch message")
	}
}

func (s *Service) term(m jetstream.Msg) {
	if err := m.Term(); err != nil {
		s.log.Warn().Err(err).Str("subject", m.Subject()).Msg("terminate dispatch message")
	}
}
