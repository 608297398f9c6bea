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

// fenceAsker asks the dispatchers whether a redelivered attempt may start
// (see [Service.fence]), and dates the connection's reconnections, after
// which every delivery asks. Its inputs are the connection, the topology,
// the worker's id and the lease TTL as last read.
type fenceAsker struct {
	conn     *nats.Conn
	topo     streams.Topology
	workerID string
	ttl      func() time.Duration // the leases bucket's, as last read
	back     reconnects
}

// reconnects dates the connection's reconnections: the count last seen,
// and when a new one was first seen.
type reconnects struct {
	count atomic.Uint64
	mu    sync.Mutex
	seen  time.Time
}

// reconnectWindow is the least time after a reconnection during which
// every dispatch message asks the fence (see [fenceAsker.justReconnected]).
const reconnectWindow = 10 * time.Second

// justReconnected reports whether the connection came back from losing its
// server within the last lease TTL (at least reconnectWindow). A server
// killed with kill -9 writes its consumers' state only every so often, and
// can lose the removal of a message whose ack it had confirmed: that
// message comes again after the restart as a first delivery (NumDelivered
// 1), of an attempt that ran, while the lease that would fence it aged out
// in the outage. So for a while after a reconnection a first delivery is
// asked about as a redelivery is.
func (f *fenceAsker) justReconnected() bool {
	n := f.conn.Stats().Reconnects
	now := time.Now()
	f.back.mu.Lock()
	defer f.back.mu.Unlock()
	if f.back.count.Swap(n) != n {
		f.back.seen = now
	}
	return !f.back.seen.IsZero() && now.Sub(f.back.seen) < max(f.ttl(), reconnectWindow)
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
	recent := s.fences.justReconnected()
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
		wg.Go(func() { answers[i], errs[i] = s.fences.ask(ps[i].d) })
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

// ask asks the dispatchers whether attempt d may start, on this worker's
// fence subject of d's pool.
func (f *fenceAsker) ask(d schemas.Dispatch) (schemas.FenceAnswer, error) {
	subject := f.topo.Fence(poolOf(&d), f.workerID, d.InstanceID)
	data, err := json.Marshal(schemas.FenceQuestion{InstanceID: d.InstanceID, Attempt: d.Attempt, WorkerID: f.workerID})
	if err != nil {
		return schemas.FenceAnswer{}, err
	}
	reply, err := f.conn.Request(subject, data, fenceTimeout)
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
