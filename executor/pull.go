package executor

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// queue is one pool's work at one priority for one handler (or, with no
// handler, the worker's own subject): a durable consumer on AX_DISPATCH.
//
// A worker fetches only from queues that may hold work, so that a round
// costs a fetch per queue with work, not one per queue: a queue is hot
// when its doorbell rang since its last fetch (rung moved past seen), or
// when that fetch took all it asked for (more), or when the last sweep
// (see [intake.sweep]) found messages on its subject.
type queue struct {
	pool     string
	priority schemas.Priority
	handler  string // "" for the worker's own queue
	subject  string
	consumer jetstream.Consumer

	rung atomic.Uint64 // doorbells heard; written by the doorbell's callback
	seen uint64        // rung as the last fetch began; the pull loop's
	more bool          // the last fetch may have left work; the pull loop's
}

// hot reports whether the queue may hold work. Only the pull loop calls it.
func (q *queue) hot() bool { return q.more || q.rung.Load() != q.seen }

// pullOrder returns the queues in the order a worker drains them: every
// pool's work of the highest priority first, then the next priority, pools
// in the order given, handlers by name.
func pullOrder(pools []string, priorities []schemas.Priority, handlers []string) []*queue {
	qs := make([]*queue, 0, len(pools)*len(priorities)*len(handlers))
	for _, p := range priorities {
		for _, pool := range pools {
			for _, h := range handlers {
				qs = append(qs, &queue{pool: pool, priority: p, handler: h})
			}
		}
	}
	return qs
}

// queueKey names a queue in [Service.byRing].
func queueKey(pool string, p schemas.Priority, handler string) string {
	return pool + "\x00" + string(p) + "\x00" + handler
}

// intake is the worker's dispatch queues: its own, then its pools' per
// priority and handler in pull order; the doorbells that mark them hot;
// and the sweeps that find what a missed doorbell left. It fetches what
// the pull loop asks for and knows nothing of slots beyond the counts it
// is given.
type intake struct {
	topo         streams.Topology
	pools        []string
	idleWait     time.Duration
	doorbellWait time.Duration
	log          *slog.Logger
	doorbell     chan struct{} // rung by the dispatcher's ready messages

	// Set by the worker's start, before any doorbell can ring.
	own       *queue            // the worker's own subject, drained first
	queues    []*queue          // its pools' queues of its handlers, in pull order
	byRing    map[string]*queue // the pool queues by queueKey, for the doorbells
	dispatch  jetstream.Stream  // AX_DISPATCH, for the sweeps' queue depths
	lastSweep time.Time         // the pull loop's
}

// newIntake returns the intake of a worker with options o.
func newIntake(o Options, log *slog.Logger) *intake {
	return &intake{topo: o.Topology, pools: o.Pools, idleWait: o.IdleWait, doorbellWait: o.DoorbellWait,
		log: log, doorbell: make(chan struct{}, 1)}
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
		msgs := s.in.fetch(free, rounds%lowFirstEvery == lowFirstEvery-1, s.handlersFree)
		if len(msgs) == 0 {
			idle.Reset(s.opts.IdleWait)
			select {
			case <-s.in.doorbell:
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
// (lowest priority first) when lowFirst. It asks only the hot queues (see
// [queue]), every queue whose subject holds messages once a sweep is due,
// and no queue of a handler whose slots are full: the worker takes no
// more of a handler's work than it can start: handlersFree returns the
// free slots of each handler that has a concurrency limit, by name.
func (in *intake) fetch(n int, lowFirst bool, handlersFree func() map[string]int) []jetstream.Msg {
	if now := time.Now(); now.Sub(in.lastSweep) >= in.idleWait {
		in.lastSweep = now
		in.sweep()
	}
	free := handlersFree()
	var msgs []jetstream.Msg
	for i := -1; i < len(in.queues); i++ {
		if len(msgs) >= n {
			break
		}
		var q *queue
		switch {
		case i < 0:
			q = in.own
		case lowFirst:
			q = in.queues[len(in.queues)-1-i]
		default:
			q = in.queues[i]
		}
		if !q.hot() {
			continue
		}
		ask := n - len(msgs)
		if f, limited := free[q.handler]; limited {
			if f <= 0 {
				continue
			}
			ask = min(ask, f)
		}
		rung := q.rung.Load()
		got, err := in.fetchFrom(q, ask, &msgs)
		more := err != nil || got == ask
		if got == 0 && err == nil && rung != q.seen {
			// Rung, yet empty: the server may not count the attempt
			// yet (see Options.DoorbellWait). Wait on the server for it.
			got, err = in.awaitRung(q, &msgs)
			more = err != nil || got > 0
		}
		q.seen = rung
		q.more = more
		if _, limited := free[q.handler]; limited {
			free[q.handler] -= got
		}
	}
	return msgs
}

// fetchFrom appends up to n messages of q to msgs, without waiting, and
// returns how many it took.
func (in *intake) fetchFrom(q *queue, n int, msgs *[]jetstream.Msg) (int, error) {
	batch, err := q.consumer.FetchNoWait(n)
	if err != nil {
		in.log.Warn("fetch dispatch messages", "error", err, "pool", q.pool, "priority", string(q.priority), "handler", q.handler)
		return 0, err
	}
	got := 0
	for m := range batch.Messages() {
		*msgs = append(*msgs, m)
		got++
	}
	if err := batch.Error(); err != nil {
		in.log.Warn("fetch dispatch messages", "error", err, "pool", q.pool, "priority", string(q.priority), "handler", q.handler)
		return got, err
	}
	return got, nil
}

// awaitRung appends the next message of q to msgs, waiting up to
// DoorbellWait for it on the server, and returns how many it took (0 or 1).
// It asks for one message: a pull request the server still holds when the
// worker stops waiting would send what it finds after to no one, and that
// message would wait out its ack wait.
func (in *intake) awaitRung(q *queue, msgs *[]jetstream.Msg) (int, error) {
	m, err := q.consumer.Next(jetstream.FetchMaxWait(in.doorbellWait))
	switch {
	case err == nil:
		*msgs = append(*msgs, m)
		return 1, nil
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoMessages):
		return 0, nil
	default:
		in.log.Warn("fetch dispatch messages", "error", err, "pool", q.pool, "priority", string(q.priority), "handler", q.handler)
		return 0, err
	}
}

// handlersFree returns the free slots of each handler that has a
// concurrency limit, by name.
func (s *Service) handlersFree() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	free := make(map[string]int)
	for name, hs := range s.handlerStates {
		if hs.limits.concurrency > 0 {
			free[name] = hs.limits.concurrency - hs.busy
		}
	}
	return free
}

// sweep marks hot the queues whose subjects hold messages, with one
// request per pool (the stream's per-subject counts over the pool's
// subjects), and the worker's own queue: so that work whose doorbell was
// missed, and messages given back with a delay or redelivered after their
// ack wait, are found within IdleWait without fetching every queue. If a
// pool's counts cannot be read, all its queues are fetched.
func (in *intake) sweep() {
	in.own.more = true
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, pool := range in.pools {
		info, err := in.dispatch.Info(ctx, jetstream.WithSubjectFilter(in.topo.Dispatch(pool, "*", ">")))
		for _, q := range in.queues {
			if q.pool == pool && (err != nil || info.State.Subjects[q.subject] > 0) {
				q.more = true
			}
		}
		if err != nil {
			in.log.Warn("read the pool's queue depths; fetching every queue", "error", err, "pool", pool)
		}
	}
}

// onReady is the doorbell of a pool's queue: it marks the queue hot and
// wakes the pull loop.
func (in *intake) onReady(pool, subject string) {
	p, handler, ok := in.topo.ReadyQueue(pool, subject)
	if q := in.byRing[queueKey(pool, p, handler)]; ok && q != nil {
		q.rung.Add(1)
	}
	signal(in.doorbell)
}

// onOwnReady is the doorbell of the worker's own queue.
func (in *intake) onOwnReady() {
	in.own.rung.Add(1)
	signal(in.doorbell)
}

func (s *Service) nak(m jetstream.Msg) {
	if err := m.Nak(); err != nil {
		s.log.Warn("nak dispatch message", "error", err, "subject", m.Subject())
	}
}

func (s *Service) term(m jetstream.Msg) {
	if err := m.Term(); err != nil {
		s.log.Warn("terminate dispatch message", "error", err, "subject", m.Subject())
	}
}
