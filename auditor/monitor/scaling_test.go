package monitor

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// kedaReplicas is the replica count KEDA and the HPA it drives settle on
// for a ScaledObject with one Prometheus trigger whose query reads value,
// written from KEDA's code:
//   - pkg/scalers/prometheus_scaler.go, GetMetricsAndActivity: the trigger
//     is active when value > activationThreshold; GetMetricSpecForScaling:
//     the HPA's external metric target is an AverageValue of threshold;
//   - pkg/scaling/executor/scale_scaledobjects.go: a target at 0 replicas
//     that turns active is scaled to max(minReplicaCount, 1), and an
//     inactive one with minReplicaCount 0 is scaled to 0;
//   - the HPA (its replica calculator, for an AverageValue target) asks
//     for ceil(value/threshold), keeps the current count while
//     value/(threshold*current) is within its 0.1 tolerance of 1, and
//     clamps to [max(minReplicaCount, 1), maxReplicaCount].
func kedaReplicas(value, threshold, activation float64, current, minReplicas, maxReplicas int) int {
	active := value > activation
	if !active && minReplicas == 0 {
		return 0
	}
	if current == 0 {
		current = max(minReplicas, 1)
	}
	desired := current
	if ratio := value / (threshold * float64(current)); math.Abs(ratio-1) > 0.1 {
		desired = int(math.Ceil(value / threshold))
	}
	return min(max(desired, minReplicas, 1), maxReplicas)
}

// evalScalingQuery evaluates the query of ScalingQuery — sum(NAME{pool="P"})
// — over what reg gathers: the sum of the samples of NAME labelled pool P.
// It reports false when the query has another form or matches no sample
// (Prometheus would answer an empty vector).
func evalScalingQuery(t *testing.T, reg *prometheus.Registry, query string) (float64, bool) {
	t.Helper()
	m := regexp.MustCompile(`^sum\(([a-z_]+)\{pool="([^"]*)"\}\)$`).FindStringSubmatch(query)
	if m == nil {
		t.Fatalf("query %q is not of the form sum(name{pool=\"p\"})", query)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, f := range families {
		if f.GetName() != m[1] {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == m[2] {
					sum, found = sum+s.GetGauge().GetValue(), true
				}
			}
		}
	}
	return sum, found
}

// TestKEDAScalesPoolsOnTheirAttempts drives KEDA's scaling decision over
// the monitoring auditor's gauges, read through the query the chart's
// ScaledObjects send (ScalingQuery), with the chart's defaults (threshold
// 10, activation 0, up to 10 replicas): a pool whose 16 attempts run with
// nothing queued keeps its 2 replicas, even allowed to scale to zero; 104
// attempts waiting across 3 priorities × 3 handlers (9 consumers) ask for
// 11 replicas; a pool whose handler no worker registers is scaled on its
// 2 attempts, not pinned at its maximum. The pools' dispatch-consumer lag
// (what the chart read before) gives 0, 4 and the stream's length.
func TestKEDAScalesPoolsOnTheirAttempts(t *testing.T) {
	t.Parallel()
	e := newMonitorEnv(t, streams.Config{})
	e.apply("task_name: busy\nexecution: {handler: long.run}\ndispatch: {tags: [busy]}\n")
	e.apply("task_name: wide\nexecution: {handler: h1}\ndispatch: {tags: [wide]}\n")
	e.apply("task_name: ghost\nexecution: {handler: nobody.registers}\ndispatch: {tags: [ghost]}\n")
	e.apply("task_name: idle\nexecution: {handler: h}\ndispatch: {tags: [idle]}\n")
	insert := func(task, pool, handler string, prio schemas.Priority, state schemas.State, n int) {
		t.Helper()
		_, err := e.st.Pool().Exec(context.Background(), `
			INSERT INTO instances (task, task_version, event_id, source, state, attempt, max_attempts, priority, pool, handler, timeout_ms, fired_at)
			SELECT $1, 1, gen_random_uuid()::text, 'event', $2, 1, 1, $3, $4, $5, 60000, now() FROM generate_series(1, $6)`,
			task, string(state), string(prio), pool, handler, n)
		if err != nil {
			t.Fatal(err)
		}
	}
	// busy: 16 of 16 slots run long attempts, already acknowledged; 2
	// more were taken and are not yet reported started.
	insert("busy", "busy", "long.run", schemas.PriorityNormal, schemas.StateRunning, 14)
	insert("busy", "busy", "long.run", schemas.PriorityNormal, schemas.StateDispatched, 2)
	// wide: 104 waiting, split over every priority and three handlers.
	n := 0
	for i, p := range schemas.Priorities {
		for j, h := range []string{"h1", "h2", "h3"} {
			k := 11 + i + j
			if i == 2 && j == 2 {
				k = 104 - n
			}
			insert("wide", "wide", h, p, schemas.StateDispatched, k)
			n += k
		}
	}
	// ghost: two attempts for a handler no worker registers.
	insert("ghost", "ghost", "nobody.registers", schemas.PriorityNormal, schemas.StateDispatched, 2)

	a := e.monitored(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.metrics.poolAttempts)
	waitUntil(t, "the pools' attempts", func() bool {
		return testutil.ToFloat64(a.metrics.poolAttempts.WithLabelValues("wide", "DISPATCHED")) == 104 &&
			testutil.ToFloat64(a.metrics.poolAttempts.WithLabelValues("busy", "RUNNING")) == 14
	})

	const threshold, activation, maxReplicas = 10, 0, 10
	for _, c := range []struct {
		pool                 string
		current, minReplicas int
		want                 int
	}{
		{"busy", 2, 0, 2},  // scaleToZero: still active, keeps its 2 replicas
		{"busy", 2, 1, 2},  // no scale-in
		{"wide", 4, 1, 11}, // clamped to maxReplicas below
		{"ghost", 1, 1, 1}, // not pinned at the maximum
		{"idle", 1, 0, 0},  // nothing to do: scaled to zero when allowed
		{"idle", 1, 1, 1},
	} {
		value, ok := evalScalingQuery(t, reg, ScalingQuery(c.pool))
		if !ok {
			t.Errorf("pool %s: %s matches nothing", c.pool, ScalingQuery(c.pool))
			continue
		}
		got := kedaReplicas(value, threshold, activation, c.current, c.minReplicas, 100)
		if got != c.want {
			t.Errorf("pool %s (value %v, %d replicas, min %d): KEDA wants %d replicas, want %d", c.pool, value, c.current, c.minReplicas, got, c.want)
		}
		if capped := kedaReplicas(value, threshold, activation, c.current, c.minReplicas, maxReplicas); capped > maxReplicas ||
			(c.pool == "ghost" && capped == maxReplicas) {
			t.Errorf("pool %s: %d replicas of at most %d", c.pool, capped, maxReplicas)
		}
	}
	if got := fmt.Sprint(kedaReplicas(104, threshold, activation, 4, 1, maxReplicas)); got != "10" {
		t.Errorf("104 attempts with maxReplicas 10: %s replicas, want 10", got)
	}
}
