package monitor

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
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

// TestLatencyExemplarsNameTheSampledTrace gives an observation of a record
// whose instance's trace is sampled an exemplar with its trace and span
// ids, and none to one not sampled, malformed or without a trace.
func TestLatencyExemplarsNameTheSampledTrace(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	fired := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	created := func(task string, id int64, traceparent string) schemas.AuditRecord {
		return schemas.AuditRecord{Kind: schemas.AuditTransition, InstanceID: id, Task: task, Attempt: 1,
			To: schemas.StateCreated, At: fired.Add(time.Duration(id) * time.Second), Traceparent: traceparent}
	}
	recs := []schemas.AuditRecord{created("sampled", 1, "00-"+tid+"-"+sid+"-01"),
		created("unsampled", 2, "00-"+tid+"-"+sid+"-00"), created("malformed", 3, "00-"+tid+"-nothex-01"),
		created("untraced", 4, "")}
	times := map[int64]store.InstanceTimes{}
	for _, r := range recs {
		times[r.InstanceID] = store.InstanceTimes{FiredAt: fired}
	}
	m.observe(recs, times)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exemplars := map[string][]*dto.Exemplar{}
	for _, f := range families {
		if f.GetName() != "ax_scheduling_delay_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			task := metric.GetLabel()[0].GetValue()
			for _, b := range metric.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					exemplars[task] = append(exemplars[task], e)
				}
			}
			if metric.GetHistogram().GetSampleCount() != 1 {
				t.Errorf("task %s: %d observations, want 1", task, metric.GetHistogram().GetSampleCount())
			}
		}
	}
	if len(exemplars) != 1 || len(exemplars["sampled"]) != 1 {
		t.Fatalf("exemplars by task = %v, want one of task sampled", exemplars)
	}
	e := exemplars["sampled"][0]
	labels := map[string]string{}
	for _, l := range e.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["trace_id"] != tid || labels["span_id"] != sid || e.GetValue() != 1 {
		t.Errorf("exemplar %v = %v, want trace_id %s, span_id %s, value 1", labels, e.GetValue(), tid, sid)
	}
}

// TestRecordTimesAsTheRelayCarriesThem takes an instance's times from its
// records where they carry all that its timed records need, and lists for
// a read from PostgreSQL every instance whose timed records lack some.
func TestRecordTimesAsTheRelayCarriesThem(t *testing.T) {
	fired := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	started, running := fired.Add(20*time.Millisecond), fired.Add(25*time.Millisecond)
	tr := func(id int64, from, to schemas.State, attempt int, at time.Time) schemas.AuditRecord {
		return schemas.AuditRecord{Kind: schemas.AuditTransition, InstanceID: id, Task: "etl", From: from, To: to,
			Attempt: attempt, At: at}
	}
	with := func(r schemas.AuditRecord, firedAt, startedAt time.Time) schemas.AuditRecord {
		r.FiredAt, r.StartedAt = firedAt, startedAt
		return r
	}
	const created, dispatched, run, ok, retry = schemas.StateCreated, schemas.StateDispatched, schemas.StateRunning,
		schemas.StateSucceeded, schemas.StateRetrying
	recs := []schemas.AuditRecord{
		// 1: all it needs, its attempt started and ended in one report.
		with(tr(1, "", created, 1, fired), fired, time.Time{}), tr(1, created, dispatched, 1, fired),
		with(tr(1, dispatched, run, 1, running), fired, started), with(tr(1, run, ok, 1, running), time.Time{}, started),
		// 2: its attempt ends here, recorded RUNNING in an earlier page.
		with(tr(2, run, ok, 1, running), time.Time{}, started),
		// 3: a creation from a relay that carried no times.
		tr(3, "", created, 1, fired),
		// 4: a first start whose worker reported no start.
		with(tr(4, dispatched, run, 1, running), fired, time.Time{}),
		// 5: a second attempt's start: not timed.
		tr(5, dispatched, run, 2, running),
		// 6: an attempt the instance had left when the relay read it.
		tr(6, dispatched, run, 3, running), tr(6, run, retry, 3, running),
		{Kind: schemas.AuditAction, Task: "etl", Action: schemas.ActionFire},
	}
	times, lacking := recordTimes(recs)
	if want := []int64{2, 3, 4, 6}; !slices.Equal(lacking, want) {
		t.Errorf("lacking = %v, want %v", lacking, want)
	}
	it := times[1]
	if !it.FiredAt.Equal(fired) || !it.StartedAt.Equal(started) || it.StartedAttempt != 1 || len(it.Running) != 1 ||
		!it.Running[1].Equal(running) {
		t.Errorf("times of instance 1 = %+v, want fired %v, started %v at attempt 1, RUNNING at %v", it, fired, started, running)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.observe(recs[:4], times)
	for name, h := range map[string]prometheus.Observer{"trigger_to_start": m.triggerToStart.WithLabelValues("etl"),
		"start_to_end": m.startToEnd.WithLabelValues("etl")} {
		var metric dto.Metric
		if err := h.(prometheus.Histogram).Write(&metric); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"trigger_to_start": 0.020, "start_to_end": 0.005}[name]
		if got := metric.GetHistogram(); got.GetSampleCount() != 1 || math.Abs(got.GetSampleSum()-want) > 1e-9 {
			t.Errorf("%s: %d observations summing to %v s, want one of %v s", name, got.GetSampleCount(), got.GetSampleSum(), want)
		}
	}
}
