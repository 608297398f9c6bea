package drill

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

func TestPolicyBackoff(t *testing.T) {
	t.Parallel()
	sec := func(f float64) *float64 { return &f }
	tests := []struct {
		policy schemas.Retry
		failed int
		want   time.Duration
	}{
		{schemas.Retry{Backoff: schemas.BackoffFixed, InitialIntervalSec: sec(2)}, 3, 2 * time.Second},
		{schemas.Retry{Backoff: schemas.BackoffLinear, InitialIntervalSec: sec(2)}, 3, 6 * time.Second},
		{schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(10)}, 4, 80 * time.Second},
		{schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(10), MaxIntervalSec: sec(30)}, 4, 30 * time.Second},
		{schemas.Retry{Backoff: schemas.BackoffExponential, InitialIntervalSec: sec(1), MaxIntervalSec: sec(60)}, 100, time.Minute},
		{schemas.Retry{}, 1, 30 * time.Second}, // the defaults: fixed, 30 s
	}
	for _, tt := range tests {
		if got := policyBackoff(tt.policy, tt.failed); got != tt.want {
			t.Errorf("policyBackoff(%+v, %d) = %s, want %s", tt.policy, tt.failed, got, tt.want)
		}
	}
}

func TestCopyName(t *testing.T) {
	t.Parallel()
	if got := copyName("crash", "hello"); got != "drill-crash-hello" {
		t.Errorf("copyName = %q", got)
	}
	long := strings.Repeat("a", 64)
	a, b := copyName("jitter", long), copyName("jitter", long[:63]+"b")
	if len(a) > 64 || len(b) > 64 || a == b || !strings.HasPrefix(a, "drill-jitter-") {
		t.Errorf("copyName of long names = %q, %q: want distinct names of at most 64 characters", a, b)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(d, 0.5); p != 5 {
		t.Errorf("p50 = %d", p)
	}
	if p := percentile(d, 0.99); p != 10 {
		t.Errorf("p99 = %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %d", p)
	}
}
