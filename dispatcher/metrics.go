package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the dispatcher's own counters: how much each of its
// consumers handles. The fleet's metrics (instances, latencies, failures)
// are the auditor's, from the audit trail.
type metrics struct {
	batches  *prometheus.CounterVec
	messages *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	// stale counts the reports refused because their attempt was no
	// longer the instance's, by kind.
	stale *prometheus.CounterVec
	// refusedReports counts the reports refused because they came from
	// another pool or worker than the attempt's, by kind.
	refusedReports *prometheus.CounterVec
	// progress counts the progress reports, by what became of them.
	progress *prometheus.CounterVec
	// reaperLeft counts the expired leases and overdue attempts the reaper
	// did not fail because their final report waited in AX_REPORTS.
	reaperLeft *prometheus.CounterVec
	// retriesRecovered counts the retries the reaper sent again because
	// their dispatcher died before it published them (see unsent.go).
	retriesRecovered prometheus.Counter
	// refused counts firings refused for what they hold, by stage and action.
	refused *prometheus.CounterVec
	// unstorable counts reports holding what PostgreSQL cannot store, by
	// kind and action.
	unstorable *prometheus.CounterVec
	// rerouted counts the attempts taken from the queues of workers that
	// left, by outcome.
	rerouted *prometheus.CounterVec
	// handedBack counts the attempts handed back by leaving workers.
	handedBack prometheus.Counter
	// fence counts the fence questions about redelivered attempts, by answer.
	fence *prometheus.CounterVec
	// batchFailures counts the batches that failed and are tried again,
	// by stage (triggers, reports, reaper).
	batchFailures *prometheus.CounterVec
	// publishRefusals counts the dispatcher's writes JetStream refused,
	// by stream and reason (see refusalReason).
	publishRefusals *prometheus.CounterVec
	// writable is 1 while the probe's writes are taken, 0 while refused.
	writable prometheus.Gauge
	// storeUsed and storeLimit are the account's JetStream file store use
	// and limit (0: none set on the account).
	storeUsed, storeLimit prometheus.Gauge
	// settingMismatch is 1 for a topology setting the options state
	// differently from the installation, refused.
	settingMismatch *prometheus.GaugeVec
	// rollups counts the roll-ups found in ax-leases and ax-workers, by
	// bucket (see rollups.go).
	rollups *prometheus.CounterVec
	// workerDeaths counts the workers whose lapsed leases the reaper
	// failed attempts of; suspects the attempts of instances that several
	// of them died running; quarantined the instances failed for it (see
	// deaths.go).
	workerDeaths, suspects, quarantined prometheus.Counter
}

// newMetrics makes the dispatcher's metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	m.batchMetrics()
	m.reportMetrics()
	m.healthMetrics()
	m.deathMetrics()
	m.writable.Set(1)
	for _, stage := range []string{"triggers", "reports", "reaper"} {
		m.batchFailures.WithLabelValues(stage) // shown at 0 before the first failure
	}
	for _, answer := range []string{fenceStart, fenceNo, fenceLostAnswer, fenceRefused, fenceUnanswered} {
		m.fence.WithLabelValues(answer) // shown at 0 before the first question
	}
	for _, result := range []string{"applied", "dropped", "refused"} {
		m.progress.WithLabelValues(result) // shown at 0 before the first report
	}
	for _, c := range []prometheus.Collector{m.batches, m.messages, m.seconds, m.stale, m.refusedReports, m.progress, m.reaperLeft, m.retriesRecovered, m.refused, m.unstorable, m.rerouted, m.handedBack, m.fence,
		m.batchFailures, m.publishRefusals, m.writable, m.storeUsed, m.storeLimit, m.settingMismatch, m.rollups,
		m.workerDeaths, m.suspects, m.quarantined} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// batchMetrics makes the metrics of the batches of the intake and the recorder, and what they refused or moved.
func (m *metrics) batchMetrics() {
	m.batches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_batches_total",
		Help: "Batches the dispatcher handled, by consumer (triggers, reports)."}, []string{"consumer"})
	m.messages = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_messages_total",
		Help: "Messages the dispatcher handled, by consumer (triggers, reports)."}, []string{"consumer"})
	m.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ax_dispatcher_batch_seconds",
		Help:    "Time the dispatcher took to handle a batch, by consumer (triggers, reports).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"consumer"})
	m.batchFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_batch_failures_total",
		Help: "Batches the dispatcher could not complete and tries again (PostgreSQL or JetStream failed), by stage " +
			"(triggers, reports: redelivered after a short delay; reaper: a pass of the reaper)."}, []string{"stage"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_refused_firings_total",
		Help: "Firings refused for what they hold, by stage (validate: the dispatcher's checks; postgres: a value " +
			"PostgreSQL refused, found by splitting the batch) and action (skipped: recorded as a SKIPPED instance " +
			"with the reason; terminated: not recordable, logged and dropped)."}, []string{"stage", "action"})
	m.unstorable = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_unstorable_reports_total",
		Help: "Executor reports holding what PostgreSQL cannot store, by kind as sent and action (mended: its text " +
			"made storable before the write, an unstorable output dropped and a success with one recorded as a permanent " +
			"failure; bare: refused by PostgreSQL, found by splitting the batch, and recorded as a failure without output; " +
			"terminated: not recordable even so, logged and dropped)."}, []string{"kind", "action"})
	m.rerouted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_rerouted_total",
		Help: "Attempts taken from the own queue of a worker that left, by outcome (moved: routed again; " +
			"pinned: pinned to that worker by name, left to wait for it)."}, []string{"outcome"})
}

// reportMetrics makes the metrics of the reports, the reaper's and the fence's answers.
func (m *metrics) reportMetrics() {
	m.stale = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_stale_reports_total",
		Help: "Executor reports refused as stale (their attempt was fenced out), by kind (started, succeeded, failed)."}, []string{"kind"})
	m.refusedReports = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_refused_reports_total",
		Help: "Executor reports refused because they did not come from the attempt's holder (another pool, another worker, a subject that does not name the report's worker, or a worker whose credential does not grant the handler of an attempt no worker holds yet), by kind (started, succeeded, failed, progress); never applied."}, []string{"kind"})
	m.progress = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_progress_reports_total",
		Help: "Progress reports, by result (applied: now the instance's progress; dropped: the attempt was not RUNNING, " +
			"or a newer progress was stored; refused: not from the attempt's holder)."}, []string{"result"})
	m.reaperLeft = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_dispatcher_reaper_left_to_report_total",
		Help: "Expired leases and overdue attempts the reaper did not fail because their final report waited in AX_REPORTS, by cause (lease expired, timeout); counted at each look."}, []string{"cause"})
	m.retriesRecovered = prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_dispatcher_retries_recovered_total",
		Help: "Retries of attempts the reaper failed that were never sent (a dispatcher died between its write and the publish) and that a reaper sent later."})
	m.handedBack = prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_dispatcher_handed_back_total",
		Help: "Attempts handed back by a worker that stopped (SIGTERM) before they ended: each started again at once as a new attempt that spends none of the task's max_attempts."})
	m.fence = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_fence_answers_total",
		Help: "Fence questions of executors about redelivered dispatch messages, by answer (start: the attempt never ran; " +
			"no: it ran, runs or is over; lost: no, and it was failed as lost because it may have run and its lease is gone; " +
			"refused: about another pool's attempt, or malformed; unanswered: PostgreSQL or NATS failed, the executor asks again)."}, []string{"answer"})
}

// healthMetrics makes the metrics of JetStream's health as the dispatcher sees it.
func (m *metrics) healthMetrics() {
	m.publishRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_publish_refusals_total",
		Help: "Writes of the dispatcher that JetStream refused, by stream and reason (store_full: insufficient storage; " +
			"unavailable: no quorum, no leader or no answer; other). The dispatcher probes the leases bucket every quarter " +
			"of the lease TTL (at most 5 s)."}, []string{"stream", "reason"})
	m.writable = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_jetstream_writable",
		Help: "1 while JetStream takes the dispatcher's probe writes to the leases bucket, 0 while it refuses them " +
			"(then, and for a grace after, the reaper fails no attempt as lost)."})
	m.storeUsed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_jetstream_store_used_bytes",
		Help: "Bytes of JetStream file store the NATS account uses, read with every probe."})
	m.storeLimit = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_jetstream_store_limit_bytes",
		Help: "The NATS account's JetStream file store limit in bytes; 0 when the account has none (the server's " +
			"max_file_store still bounds it: watch ax_publish_refusals_total{reason=\"store_full\"})."})
	m.settingMismatch = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_topology_setting_mismatch",
		Help: "1 for a topology setting (replicas, lease_ttl, logs_max_bytes, ...) that this dispatcher's flags state differently from the installed streams and buckets, which it refused to change (it needs --reconfigure)."}, []string{"setting"})
	m.rollups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ax_kv_rollups_detected_total",
		Help: "Keys of ax-leases or ax-workers found vanished without a marker (a roll-up by a writer of the bucket: Nats-Rollup purged it), by bucket; " +
			"counted at most once per sweep. AX restores or reaps what the roll-up removed; find the writer (an executor's credential)."}, []string{"bucket"})
}

// deathMetrics makes the metrics of the worker deaths (see deaths.go).
func (m *metrics) deathMetrics() {
	m.workerDeaths = prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_worker_deaths_total",
		Help: "Workers that died (their leases expired with attempts unfinished) and whose attempts the reaper retried; a death spends no attempt."})
	m.suspects = prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_death_suspects_total",
		Help: "Attempts whose worker died while the instance had already been running on another worker that died: suspects of killing their workers (an event 'suspect' on the instance's timeline)."})
	m.quarantined = prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_instances_quarantined_total",
		Help: "Instances failed as quarantined: --quarantine-after workers (default 3) died while running each."})
}

// counted wraps handle so that its batches are counted under consumer.
func (m *metrics) counted(consumer string, handle batchHandler) batchHandler {
	batches, messages, seconds := m.batches.WithLabelValues(consumer), m.messages.WithLabelValues(consumer), m.seconds.WithLabelValues(consumer)
	return func(ctx context.Context, msgs []jetstream.Msg, t *turn) {
		start := time.Now()
		handle(ctx, msgs, t)
		seconds.Observe(time.Since(start).Seconds())
		batches.Inc()
		messages.Add(float64(len(msgs)))
	}
}
