package dispatcher

import (
	"testing"
	"time"
)

// TestLeaseBookReachesBackTheBucketsHistory: a dispatcher that began to
// watch the leases knows the attempts dispatched up to two TTLs (less a
// slack) before, whose lease puts or expiry markers the bucket still held
// when the watch read it; not those dispatched earlier.
func TestLeaseBookReachesBackTheBucketsHistory(t *testing.T) {
	since := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ttl, before time.Duration
		knows       bool
	}{
		{30 * time.Second, 0, true},
		{30 * time.Second, 58 * time.Second, true},
		{30 * time.Second, 59 * time.Second, false},
		{5 * time.Second, 8 * time.Second, true},
		{5 * time.Second, 9 * time.Second, false},
		{2 * time.Second, 3 * time.Second, true},
		{2 * time.Second, 3*time.Second + time.Millisecond, false},
		{0, time.Millisecond, false},
		{30 * time.Second, -time.Second, true}, // dispatched after the watch began
	} {
		b := newLeaseBook()
		if b.knows(since.Add(-c.before)) {
			t.Errorf("a book whose watch has not begun knows an attempt")
		}
		b.began(since)
		b.retains(c.ttl)
		if got := b.knows(since.Add(-c.before)); got != c.knows {
			t.Errorf("TTL %v: knows an attempt dispatched %v before the watch = %v, want %v", c.ttl, c.before, got, c.knows)
		}
	}
}

// TestLeaseBookNotesAnExpiryMarker: a lease the watch first saw as its
// expiry marker (put before a restart) is known until the reaper dealt
// with it, so that the fence never takes its attempt for one that never
// ran; the marker names no worker and leaves the last one named alone.
func TestLeaseBookNotesAnExpiryMarker(t *testing.T) {
	b := newLeaseBook()
	b.put([2]int64{1, 1}, "w1")
	b.expired([2]int64{2, 1})
	b.expired([2]int64{1, 1})
	if !b.known([2]int64{2, 1}) || b.holder([2]int64{2, 1}) != "" {
		t.Errorf("an expiry marker without a put: known %v, holder %q; want known, no holder", b.known([2]int64{2, 1}), b.holder([2]int64{2, 1}))
	}
	if b.holder([2]int64{1, 1}) != "w1" || b.lastWorker() != "w1" {
		t.Errorf("the marker of a lease put changed its holder (%q) or the last worker (%q), want w1", b.holder([2]int64{1, 1}), b.lastWorker())
	}
}
