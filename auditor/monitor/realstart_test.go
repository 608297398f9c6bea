package monitor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestStartToEndFromTheHandlersStart: a 1.1 s attempt whose RUNNING row
// was recorded a second after its handler began (the started report waits
// a second, or comes with the final one) counts 1.1 s from the start its
// worker reported, not 0.1 s from the row. The trigger-to-start buckets
// cover 60-300 s.
func TestStartToEndFromTheHandlersStart(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	a := e.monitored(nil)
	m := a.metrics
	fired := time.Now().Add(-10 * time.Second)
	// The instance is written as the dispatcher leaves it, its started_at
	// the reported start, before the transitions the auditor reads it by.
	id := e.instance("etl", fired,
		tr{"", schemas.StateCreated, 1, "cron", "", fired},
		tr{schemas.StateCreated, schemas.StateDispatched, 1, "dispatcher", "", fired})
	if _, err := e.st.Pool().Exec(context.Background(), `UPDATE instances SET state = 'SUCCEEDED', started_at = $2, finished_at = $3
		WHERE id = $1`, id, fired.Add(2*time.Second), fired.Add(3100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	e.transitions(id, "etl",
		tr{schemas.StateDispatched, schemas.StateRunning, 1, "worker:w1", "", fired.Add(3 * time.Second)},
		tr{schemas.StateRunning, schemas.StateSucceeded, 1, "worker:w1", "", fired.Add(3100 * time.Millisecond)})
	waitUntil(t, "the instance counted", func() bool {
		return testutil.ToFloat64(m.instancesEnded.WithLabelValues("etl", "SUCCEEDED")) == 1
	})
	if count, sum := histogram(t, m.startToEnd, "etl"); count != 1 || sum < 1.09 || sum > 1.11 {
		t.Errorf("start to end: %d observations summing to %v s, want one of 1.1 s (from the reported start)", count, sum)
	}
	var pb dto.Metric
	if err := m.triggerToStart.WithLabelValues("etl").(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, b := range pb.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	for _, want := range []float64{60, 120, 180, 240, 300} {
		if !slices.Contains(bounds, want) {
			t.Errorf("trigger to start buckets %v lack %v s", bounds, want)
		}
	}
}
