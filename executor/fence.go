package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// reconnects dates the connection's reconnections: the count last seen,
// and when a new one was first seen.
type reconnects struct {
	count atomic.Uint64
	mu    sync.Mutex
	seen  time.Time
}

// reconnectWindow is the least time after a reconnection during which
// every dispatch message asks the fence (see [Service.justReconnected]).
const reconnectWindow = 10 * time.Second

// justReconnected reports whether the connection came back from losing its
// server within the last lease TTL (at least reconnectWindow). A server
// killed with kill -9 writes its consumers' state only every so often, and
// can lose the removal of a message whose ack it had confirmed: that
// message comes again after the restart as a first delivery (NumDelivered
// 1), of an attempt that ran, while the lease that would fence it aged out
// in the outage. So for a while after a reconnection a first delivery is
// asked about as a redelivery is.
func (s *Service) justReconnected() bool {
	n := s.opts.Conn.Stats().Reconnects
	now := time.Now()
	s.back.mu.Lock()
	defer s.back.mu.Unlock()
	if s.back.count.Swap(n) != n {
		s.back.seen = now
	}
	return !s.back.seen.IsZero() && now.Sub(s.back.seen) < max(s.leases.ttl(), reconnectWindow)
}

// fenceTimeout bounds the wait for a dispatcher's answer to a fence
// question. No dispatcher at all is known at once (no responders).
const fenceTimeout = 5 * time.Second

// fence asks the dispatchers, for each attempt of ps whose dispatch message
// was delivered more than once or says it is republished
// ([schemas.Dispatch.Republished]), whether it may start, and returns the
// attempts that may: every first delivery of a first dispatch (no
// question, no round trip) and the others a dispatcher said start to. The questions of one batch
// go out together.
//
// The lease alone fences a redelivery only while the leases bucket keeps
// the attempt's history: a server that lost an acknowledged ack of the
// dispatch message can also have lost the lease put or its expiry marker
// (a kill -9, a cluster leader's restart), and the create-only lease write
// then succeeds for an attempt that already ran. The dispatcher knows from
// PostgreSQL, AX_REPORTS and the leases it watched whether it ran.
//
// An attempt told not to start is terminated; one that gets no answer (no
// dispatcher, a timeout) is given back for IdleWait and asks again on its
// next delivery. Either way it gives its slots back, and it has no lease
// yet: the lease is taken after the answer.
func (s *Service) fence(ps []*pending) []*pending {
	var asks []int
	recent := s.justReconnected()
	for i, p := range ps {
		if md, err := p.msg.Metadata(); (err == nil && md.NumDelivered > 1) || p.d.Republished || recent {
			asks = append(asks, i)
		}
	}
	if len(asks) == 0 {
		return ps
	}
	answers := make([]schemas.FenceAnswer, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for _, i := range asks {
		wg.Go(func() { answers[i], errs[i] = s.askFence(ps[i].d) })
	}
	wg.Wait()
	out := ps[:0:0]
	for i, p := range ps {
		asked := slices.Contains(asks, i)
		switch {
		case !asked || (errs[i] == nil && answers[i].Start):
			if asked {
				log := s.taskLogger(&p.d)
				log.Info("redelivered attempt may start: the dispatcher says it never ran", "reason", answers[i].Reason)
			}
			out = append(out, p)
		case errs[i] == nil:
			s.taskLogger(&p.d).Info("redelivered attempt must not start; terminating this delivery", "reason", answers[i].Reason)
			s.drop(p, termMsg)
		default:
			s.taskLogger(&p.d).Warn("redelivered attempt not started: no dispatcher answered whether it ran; giving it back to ask again", "error", errs[i], "delay", s.opts.IdleWait)
			s.drop(p, nakLater)
		}
	}
	return out
}

// askFence asks the dispatchers whether attempt d may start, on this
// worker's fence subject of d's pool.
func (s *Service) askFence(d schemas.Dispatch) (schemas.FenceAnswer, error) {
	pool := d.Pool
	if pool == "" {
		pool = schemas.DefaultPool
	}
	subject := s.opts.Topology.Fence(pool, s.opts.WorkerID, d.InstanceID)
	data, err := json.Marshal(schemas.FenceQuestion{InstanceID: d.InstanceID, Attempt: d.Attempt, WorkerID: s.opts.WorkerID})
	if err != nil {
		return schemas.FenceAnswer{}, err
	}
	reply, err := s.opts.Conn.Request(subject, data, fenceTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		return schemas.FenceAnswer{}, fmt.Errorf("ask %s: no dispatcher is listening", subject)
	}
	if err != nil {
		return schemas.FenceAnswer{}, fmt.Errorf("ask %s: %w", subject, err)
	}
	a, err := streams.Decode[schemas.FenceAnswer](reply.Subject, reply.Data)
	if err != nil {
		return schemas.FenceAnswer{}, fmt.Errorf("ask %s: %w", subject, err)
	}
	return a, nil
}
