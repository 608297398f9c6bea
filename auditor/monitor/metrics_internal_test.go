package monitor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ax-scheduler/ax/schemas"
)

// TestHandedBackIsNoFailure counts a hand-back (RUNNING → RETRYING with a
// "handed back" reason) as an attempt of outcome handed_back, and neither
// as a failure nor as a retry; a failure beside it counts as both.
func TestHandedBackIsNoFailure(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(reason string) schemas.AuditRecord {
		return schemas.AuditRecord{Kind: schemas.AuditTransition, InstanceID: 1, Task: "etl", Attempt: 1,
			From: schemas.StateRunning, To: schemas.StateRetrying, Reason: reason}
	}
	m.observe([]schemas.AuditRecord{
		rec("handed back: worker w1 stopped and its shutdown timeout of 30s passed before the handler returned"),
		rec("boom"),
	}, nil)
	for outcome, want := range map[string]float64{"handed_back": 1, "failed": 1} {
		if got := testutil.ToFloat64(m.attempts.WithLabelValues("etl", outcome)); got != want {
			t.Errorf("ax_attempts_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(m.retries.WithLabelValues("etl")); got != 1 {
		t.Errorf("ax_retries_total = %v, want 1: the failure's, not the hand-back's", got)
	}
}
