package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ax-scheduler/ax/auditor"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/metrics/metricstest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// value returns the value of the sample of family name whose labels hold
// labels (a counter's, a gauge's, or a histogram's count), and whether
// there is one.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := families[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range labels {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsEndToEnd runs tasks through a system whose dispatcher and
// auditor share one registry, served on /metrics, and reads the fleet
// metrics from there as Prometheus would.
func TestMetricsEndToEnd(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	s := newSystem(t, func(o *dispatcher.Options) { o.Metrics = reg })
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)

	var attempts atomic.Int64
	mux := executor.NewMux()
	mux.HandleFunc("test.ok", func(context.Context, *executor.Job) (any, error) { return "ok", nil })
	mux.HandleFunc("test.fail", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.Permanent(errors.New("no"))
	})
	mux.HandleFunc("test.second", func(_ context.Context, task *executor.Job) (any, error) {
		attempts.Add(1)
		if task.Attempt == 1 {
			return nil, errors.New("not yet")
		}
		return "ok", nil
	})
	s.executor("w1", mux, 4)
	s.monitor(reg)
	s.apply("task_name: ok\nexecution: {handler: test.ok}\n")
	s.apply("task_name: fail\nexecution: {handler: test.fail}\n")
	s.apply("task_name: second\nexecution: {handler: test.second, retry: {max_attempts: 2, initial_interval_sec: 0}}\n")
	var second schemas.Instance
	for _, tt := range []struct {
		task  string
		state schemas.State
	}{{"ok", schemas.StateSucceeded}, {"ok", schemas.StateSucceeded}, {"fail", schemas.StateFailed}, {"second", schemas.StateSucceeded}} {
		second = s.waitState(s.fire(tt.task, nil), tt.state, 60*time.Second)
	}

	// The monitor counts the audit records as they come: every figure
	// below is waited for, and one that never comes is named with the
	// transitions of the instance of second.
	var (
		families map[string]*dto.MetricFamily
		failures []string
	)
	for deadline := time.Now().Add(60 * time.Second); ; {
		families = metricstest.Scrape(t, srv)
		failures = checkFleetCounts(families)
		if len(failures) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) > 0 {
		for _, tr := range second.Transitions {
			t.Logf("instance %d (second): %s → %s, attempt %d, %s, %q", second.ID, tr.From, tr.To, tr.Attempt, tr.Operator, tr.Reason)
		}
	}
	// The worker's gauges come from its heartbeats; the busy count settles
	// once a heartbeat follows the last run.
	waitFor(t, "the worker's gauges", 60*time.Second, func() (bool, error) {
		families = metricstest.Scrape(t, srv)
		workers, _ := value(families, "ax_workers", map[string]string{"pool": "default"})
		slots, _ := value(families, "ax_executor_slots", map[string]string{"pool": "default"})
		util, found := value(families, "ax_worker_slot_utilization", map[string]string{"worker": "w1"})
		return workers == 1 && slots == 4 && found && util == 0, nil
	})
	if got, _ := value(families, "ax_dispatcher_messages_total", map[string]string{"consumer": "triggers"}); got < 5 {
		t.Errorf("ax_dispatcher_messages_total{consumer=triggers} = %v, want at least the 5 firings", got)
	}
	if _, ok := families["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

// checkFleetCounts returns what the monitor's figures in families lack
// after TestMetricsEndToEnd's runs: two of ok, one of fail, and second
// failing once and then succeeding.
func checkFleetCounts(families map[string]*dto.MetricFamily) []string {
	var failures []string
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ax_instances_ended_total", map[string]string{"task": "ok", "state": "SUCCEEDED"}, 2},
		{"ax_instances_ended_total", map[string]string{"task": "second", "state": "SUCCEEDED"}, 1},
		{"ax_instances_ended_total", map[string]string{"task": "fail", "state": "FAILED"}, 1},
		{"ax_attempts_total", map[string]string{"task": "second", "outcome": "failed"}, 1},
		{"ax_attempts_total", map[string]string{"task": "second", "outcome": "succeeded"}, 1},
		{"ax_retries_total", map[string]string{"task": "second"}, 1},
		{"ax_scheduling_delay_seconds", map[string]string{"task": "ok"}, 2},
		{"ax_trigger_to_start_seconds", map[string]string{"task": "ok"}, 2},
		{"ax_trigger_to_start_seconds", map[string]string{"task": "second"}, 1},
		{"ax_monitor_leader", nil, 1},
	} {
		if got, ok := value(families, tt.name, tt.labels); !ok || got != tt.want {
			failures = append(failures, fmt.Sprintf("%s%v = %v (found %t), want %v", tt.name, tt.labels, got, ok, tt.want))
		}
	}
	// Attempt 2 of second counts its run. Attempt 1 failed at once, its
	// RUNNING row recorded with its end: it counts only if the auditor read
	// its end before attempt 2 replaced the instance's reported start (else
	// its run time is unknown), so 1 or 2.
	if got, ok := value(families, "ax_start_to_end_seconds", map[string]string{"task": "second"}); !ok || got < 1 || got > 2 {
		failures = append(failures, fmt.Sprintf("ax_start_to_end_seconds{task=second} = %v (found %t), want 1 or 2", got, ok))
	}
	return failures
}

// recorder is a prometheus.Registerer that keeps the names of the metrics
// registered with it.
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// exporterMetrics are the JetStream metrics prometheus-nats-exporter
// exports with -jsz=all (collector/jsz.go of nats-io/prometheus-nats-exporter:
// system "jetstream", subsystems server, stream and consumer).
var exporterMetrics = map[string]bool{
	"jetstream_server_jetstream_disabled": true, "jetstream_server_total_streams": true,
	"jetstream_server_total_consumers": true, "jetstream_server_total_messages": true,
	"jetstream_server_total_message_bytes": true, "jetstream_server_max_memory": true,
	"jetstream_server_max_storage": true, "jetstream_stream_total_messages": true,
	"jetstream_stream_total_bytes": true, "jetstream_stream_first_seq": true, "jetstream_stream_last_seq": true,
	"jetstream_stream_consumer_count": true, "jetstream_consumer_delivered_consumer_seq": true,
	"jetstream_consumer_delivered_stream_seq": true, "jetstream_consumer_num_ack_pending": true,
	"jetstream_consumer_num_redelivered": true, "jetstream_consumer_num_waiting": true,
	"jetstream_consumer_num_pending": true, "jetstream_consumer_ack_floor_stream_seq": true,
	"jetstream_consumer_ack_floor_consumer_seq": true,
}

// lagFallbacks maps each lag metric of AX's auditor to the exporter's
// metric a dashboard query falls back to.
var lagFallbacks = map[string]string{
	"ax_consumer_pending":     "jetstream_consumer_num_pending",
	"ax_consumer_ack_pending": "jetstream_consumer_num_ack_pending",
	"ax_consumer_redelivered": "jetstream_consumer_num_redelivered",
	"ax_pool_waiting":         "jetstream_consumer_num_pending",
}

// TestDashboardQueriesRegisteredMetrics reads the Grafana dashboard and
// checks that every ax_ metric its queries use is one the services
// register, that every jetstream_ metric is one prometheus-nats-exporter
// exports, that each lag figure falls back to the exporter's, and that it
// shows every fleet metric and the exporter's consumer metrics.
func TestDashboardQueriesRegisteredMetrics(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/grafana/ax.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/grafana/ax.json is not JSON: %v", err)
	}
	if dash["title"] == "" || dash["panels"] == nil {
		t.Fatalf("deploy/grafana/ax.json has no title or panels")
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" && strings.Contains(s, "(")) {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has %d queries; it looks truncated", len(exprs))
	}

	// The services register their metrics when they are made.
	rec := &recorder{names: map[string]bool{}}
	srv := streamstest.NewServer(t, streams.Config{})
	conn, _ := srv.Connect()
	st := store.New(nil)
	if _, err := auditor.New(auditor.Options{Conn: conn, Store: st, Metrics: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := dispatcher.New(dispatcher.Options{Conn: conn, Store: st, Metrics: rec}); err != nil {
		t.Fatal(err)
	}
	metricRE := regexp.MustCompile(`\b(ax_[a-z0-9_]+|jetstream_[a-z_]+)`)
	used := map[string]bool{}
	for _, e := range exprs {
		names := metricRE.FindAllString(e, -1)
		for _, name := range names {
			used[name] = true
		}
		// A lag figure works with AX's metrics and with the exporter's:
		// AX's where it is, the exporter's otherwise.
		for ax, exp := range lagFallbacks {
			if slices.Contains(names, ax) && !slices.Contains(names, exp) {
				t.Errorf("the query %q shows %s without the exporter's %s for when AX's is absent", e, ax, exp)
			}
		}
	}
	for name := range used {
		if strings.HasPrefix(name, "jetstream_") {
			if !exporterMetrics[name] {
				t.Errorf("the dashboard queries %s, which prometheus-nats-exporter -jsz=all does not export", name)
			}
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && rec.names[b] {
				base = b
			}
		}
		if !rec.names[base] {
			t.Errorf("the dashboard queries %s, which no service registers", name)
		}
	}
	for _, name := range []string{"jetstream_consumer_num_pending", "jetstream_consumer_num_ack_pending", "jetstream_consumer_num_redelivered"} {
		if !used[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
	// Every fleet metric is on the dashboard.
	for name := range rec.names {
		if !used[name] && !used[name+"_bucket"] && !used[name+"_count"] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}
