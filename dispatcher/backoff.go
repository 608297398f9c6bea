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

// retryWait returns how long to wait before the attempt after failed,
// whose final report asked for retryAfterMS (0 when it did not): that
// wait, capped at the policy's max interval, in place of the backoff
// (executor.RetryAfter). A negative ask is refused: the backoff applies,
// and refused says so.
func retryWait(p schemas.Retry, failed int, retryAfterMS int64, r func() float64) (wait time.Duration, refused bool) {
	switch {
	case retryAfterMS < 0:
		return backoff(p, failed, r), true
	case retryAfterMS == 0:
		return backoff(p, failed, r), false
	case retryAfterMS > p.Max().Milliseconds():
		return p.Max(), false
	}
	return time.Duration(retryAfterMS) * time.Millisecond, false
}

func randFloat() float64 { return rand.Float64() }
