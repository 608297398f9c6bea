package dispatcher

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// jitter is the most a retry interval is shortened at random, as a fraction
// of it, so that many attempts failing together do not retry in lockstep.
const jitter = 0.1

// backoff returns how long to wait before the attempt after failed, under p.
// Fixed waits the initial interval every time; linear waits initial × n;
// exponential waits initial × 2^(n-1); all are capped at the maximum and then
// shortened by up to 10% at random (r returns a number in [0, 1)).
func backoff(p schemas.Retry, failed int, r func() float64) time.Duration {
	initial, maxWait := p.Initial(), p.Max()
	n := float64(max(failed, 1))
	var d float64
	switch p.Backoff {
	case schemas.BackoffLinear:
		d = float64(initial) * n
	case schemas.BackoffExponential:
		d = float64(initial) * math.Pow(2, n-1)
	default:
		d = float64(initial)
	}
	d = math.Min(d, float64(maxWait))
	d -= d * jitter * r()
	return time.Duration(d)
}

func randFloat() float64 { return rand.Float64() }
