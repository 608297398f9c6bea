package executor_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestLeaseRenewalFollowsTheBucketsTTL changes the leases bucket's TTL
// while an attempt runs, as the dispatcher does when it starts with another
// --lease-ttl: the running worker renews every third of the new TTL from
// then on, not at the rate of the TTL it read at start, and the lease lives.
func TestLeaseRenewalFollowsTheBucketsTTL(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	const before, after = 6 * time.Second, 2400 * time.Millisecond
	if err := w.srv.Topology.Ensure(ctx, w.js, streams.Config{LeaseTTL: before, Reconfigure: true}); err != nil {
		t.Fatal(err)
	}
	watch, err := w.leases.Watch(ctx, "7.1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	g := w.holdInGate(7)
	w.nextOf(schemas.ReportStarted, 7)

	// The owner shortens the TTL. A worker that kept renewing every
	// before/3 (2 s) would still keep its lease, barely; one that follows
	// renews every after/3 (0.8 s). Three gaps in a row well under 2 s
	// tell the two apart.
	if err := w.srv.Topology.Ensure(ctx, w.js, streams.Config{LeaseTTL: after, Reconfigure: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(15 * time.Second)
	var last time.Time
	short := 0
	for short < 3 {
		select {
		case e := <-watch.Updates():
			if e.Operation() != jetstream.KeyValuePut {
				t.Fatalf("lease update %s after the TTL changed", e.Operation())
			}
			now := time.Now()
			if !last.IsZero() && now.Sub(last) < 1500*time.Millisecond {
				short++
			} else {
				short = 0
			}
			last = now
		case <-deadline:
			t.Fatalf("no three renewals in a row within 1.5 s of each other in 15 s after the TTL became %v", after)
		}
	}
	close(g.open)
	w.nextOf(schemas.ReportSucceeded, 7)
}
