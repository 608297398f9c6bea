package wait

import (
	"context"
	"math/rand/v2"
	"time"
)

// JitterFraction is how far [Jitter] moves a delay: up to a fifth either
// way.
const JitterFraction = 0.2

// Jitter returns d moved by a random amount of up to JitterFraction of d
// either way, so that loops that all began to retry at one moment (a fleet
// restarted, a server back) spread their tries instead of arriving
// together each round.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + JitterFraction*(2*rand.Float64()-1)))
}

// SleepJitter is [Sleep] for Jitter(d): the wait of a retry loop. It
// reports whether the wait passed; false when ctx ended (the retry is
// cancelled).
func SleepJitter(ctx context.Context, d time.Duration) bool {
	return Sleep(ctx, Jitter(d))
}
