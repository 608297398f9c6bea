package executor

import (
	"log/slog"
	"math"
	"testing"

	"github.com/ax-scheduler/ax/streams"
)

// TestLeaseSubject builds the subject of a lease and its key, the key
// being streams.LeaseKey's, in one allocation.
func TestLeaseSubject(t *testing.T) {
	top := streams.Default()
	s := newLeaseKeeper(Options{Topology: top}, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		id      int64
		attempt int
	}{{1, 1}, {42, 3}, {123456789, 12}, {math.MaxInt64, math.MaxInt32}} {
		subject, key := s.leaseSubject(c.id, c.attempt)
		want := streams.LeaseKey(c.id, c.attempt)
		if key != want || subject != "$KV."+top.LeasesBucket()+"."+want {
			t.Errorf("leaseSubject(%d, %d) = %q, %q; want key %q", c.id, c.attempt, subject, key, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { s.leaseSubject(123456789, 2) }); n != 1 {
		t.Errorf("leaseSubject allocates %v times, want 1", n)
	}
}
