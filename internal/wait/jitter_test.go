package wait

import (
	"context"
	"testing"
	"time"
)

// TestJitter: the delays stay within a fifth of d either way and are not
// all the same; SleepJitter ends with its context.
func TestJitter(t *testing.T) {
	t.Parallel()
	d := time.Second
	seen := map[time.Duration]bool{}
	for range 1000 {
		j := Jitter(d)
		if j < d*4/5 || j > d*6/5 {
			t.Fatalf("Jitter(%v) = %v, beyond a fifth", d, j)
		}
		seen[j] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct delays of 1000: loops would still retry in lockstep", len(seen))
	}
	if Jitter(0) != 0 {
		t.Error("Jitter(0) is not 0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if SleepJitter(ctx, time.Hour) {
		t.Error("SleepJitter on an ended context waited")
	}
}
