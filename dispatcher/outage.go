package dispatcher

import (
	"sync"
	"time"
)

// After the dispatcher's connection comes back from losing its server, the
// leases that no holder could renew meanwhile expire at once (a restarted
// nats-server ages them by its own clock), while the final reports of the
// attempts that ended during the outage are still on their way: an
// executor retries a report with a backoff of seconds while the server's
// JetStream starts again. Failing those attempts as lost at once would
// record a success that happened as lost, and run the attempt again
// (ax drill system's nats-kill did). So for the outage grace after a
// reconnect the reaper holds its expiries back and the fence does not
// answer "lost": a final report that lands meanwhile wins, and afterwards
// they are decided as before. An attempt whose worker did die is failed
// one grace later than it would have been.

// minOutageGrace is the least grace after a reconnect: the server's
// JetStream may take seconds more to take publishes again, and an executor
// tries a report again every second or so, each try awaited for at most 2 s
// (docs/executor-protocol.md).
const minOutageGrace = 10 * time.Second

// reconnects tracks the dispatcher connection's reconnections.
type reconnects struct {
	mu    sync.Mutex
	count uint64    // the connection's reconnections when last looked at
	back  time.Time // when a new one was first seen; zero before any
	ttl   time.Duration
}

// start records the connection's reconnections so far, which end no
// outage of this run, and the leases bucket's TTL.
func (r *reconnects) start(count uint64, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count, r.ttl = count, ttl
}

// graceLeft returns how long the grace after the connection's latest
// reconnection lasts from now: 0 when there was none or it is over. A
// reconnection is dated when first seen, which is no earlier than it
// happened, so the grace never ends early.
func (s *Service) graceLeft() time.Duration {
	r := &s.reconnects
	n := s.opts.Conn.Stats().Reconnects
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n != r.count {
		r.count, r.back = n, now
	}
	if r.back.IsZero() {
		return 0
	}
	return max(r.back.Add(max(r.ttl, minOutageGrace)).Sub(now), 0)
}
