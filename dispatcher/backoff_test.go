package dispatcher

import (
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

func TestBackoff(t *testing.T) {
	sec := func(f float64) *float64 { return &f }
	zero := func() float64 { return 0 }
	most := func() float64 { return 0.999999 }
	cases := []struct {
		name   string
		policy schemas.Retry
		failed int
		r      func() float64
		want   time.Duration
	}{
		{"defaults: fixed 30s", schemas.Retry{}, 1, zero, 30 * time.Second},
		{"fixed stays", schemas.Retry{Backoff: schemas.BackoffFixed, InitialIntervalSec: sec(2)}, 5, zero, 2 * time.Second},
		{"fixed zero retries at once", schemas.Retry{InitialIntervalSec: sec(0)}, 3, zero, 0},
		{"linear grows by the initial", schemas.Retry{Backoff: schemas.BackoffLinear, InitialIntervalSec: sec(2)}, 3, zero, 6 * time.Second},
		{"exp doubles", schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(1)}, 4, zero, 8 * time.Second},
		{"exp capped", schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(1), MaxIntervalSec: sec(5)}, 10, zero, 5 * time.Second},
		{"linear capped by the default 30 min", schemas.Retry{Backoff: schemas.BackoffLinear, InitialIntervalSec: sec(600)}, 4, zero, 30 * time.Minute},
		{"exp never overflows", schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(1), MaxIntervalSec: sec(60)}, 5000, zero, time.Minute},
		{"jitter shortens by at most 10%", schemas.Retry{InitialIntervalSec: sec(10)}, 1, most, 9*time.Second + 10*time.Microsecond},
		{"attempt 0 counts as the first", schemas.Retry{Backoff: schemas.BackoffLinear, InitialIntervalSec: sec(3)}, 0, zero, 3 * time.Second},
	}
	for _, c := range cases {
		got := backoff(c.policy, c.failed, c.r)
		if diff := got - c.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("%s: backoff = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRetryWait(t *testing.T) {
	sec := func(f float64) *float64 { return &f }
	zero := func() float64 { return 0 }
	slow := schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(600), MaxIntervalSec: sec(3600)}
	cases := []struct {
		name    string
		policy  schemas.Retry
		ms      int64
		want    time.Duration
		refused bool
	}{
		{"no ask: the backoff", slow, 0, 1200 * time.Second, false},
		{"an ask replaces the backoff", slow, 1500, 1500 * time.Millisecond, false},
		{"an ask is capped at the max interval", slow, 7200_000, time.Hour, false},
		{"capped at the default 30 min", schemas.Retry{}, 1 << 62, 30 * time.Minute, false},
		{"a negative ask is refused: the backoff", slow, -5, 1200 * time.Second, true},
	}
	for _, c := range cases {
		got, refused := retryWait(c.policy, 2, c.ms, zero)
		if got != c.want || refused != c.refused {
			t.Errorf("%s: retryWait = %v, %v; want %v, %v", c.name, got, refused, c.want, c.refused)
		}
	}
}
