package monitor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// BacklogAge is how long an instance must have waited (DISPATCHED, WAITING
// or RETRYING) to count in ax_backlog_instances.
const BacklogAge = 5 * time.Minute

// Buckets of the latency histograms, in seconds.
var (
	// delayBuckets cover scheduling and start delays: milliseconds to minutes.
	// Between 60 and 300 s too: a p95 of 185 s read 285 s with none there.
	delayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 90, 120, 180, 240, 300, 900}
	// runBuckets cover how long attempts run: a tenth of a second to hours.
	runBuckets = []float64{.1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600}
)

// metrics are the monitor's Prometheus metrics. The fleet metrics are
// computed by the auditor that leads monitoring only: from the audit
// trail (counters and histograms, each record counted once by the durable
// consumer), from PostgreSQL (gauges refreshed every RefreshInterval),
// from ax-workers (gauges and counters, on each change) and from
// JetStream's consumer infos (gauges refreshed every LagInterval). Labels
// are bounded: task (tasks exist in PostgreSQL), pool (the tasks' dispatch
// tags), worker (the live workers only), stream and consumer (durable
// consumers only), state, level; never an instance.
type metrics struct {
	schedulingDelay *prometheus.HistogramVec
	triggerToStart  *prometheus.HistogramVec
	startToEnd      *prometheus.HistogramVec
	instancesEnded  *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	timeouts        *prometheus.CounterVec
	leaseExpiries   *prometheus.CounterVec
	retries         *prometheus.CounterVec
	instances       *prometheus.GaugeVec
	backlog         *prometheus.GaugeVec
	heartbeatsLost  *prometheus.CounterVec
	workersStopped  *prometheus.CounterVec
	workers         *prometheus.GaugeVec
	slots           *prometheus.GaugeVec
	slotsBusy       *prometheus.GaugeVec
	slotUtilization *prometheus.GaugeVec
	workerSlotUtil  *prometheus.GaugeVec
	alertsOpen      *prometheus.GaugeVec
	notifications   *prometheus.CounterVec
	recordsSeen     prometheus.Counter
	monitorLeader   prometheus.Gauge

	consumerPending     *prometheus.GaugeVec
	consumerAckPending  *prometheus.GaugeVec
	consumerRedelivered *prometheus.GaugeVec
	consumerLastActive  *prometheus.GaugeVec
	poolWaiting         *prometheus.GaugeVec
	poolOldest          *prometheus.GaugeVec
	poolAttempts        *prometheus.GaugeVec
	poolSlots           *prometheus.GaugeVec
	poolWaitingSlots    *prometheus.GaugeVec
}

// newMetrics makes the monitor's metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"task"})
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		schedulingDelay: hist("ax_scheduling_delay_seconds",
			"Time from a firing's due time (fired_at) to its instance's creation.", delayBuckets),
		triggerToStart: hist("ax_trigger_to_start_seconds",
			"Time from a firing's due time to its first attempt running.", delayBuckets),
		startToEnd: hist("ax_start_to_end_seconds",
			"Time from an attempt's reported start to its end (succeeded, failed or retrying); an attempt whose start is no longer known is left out.", runBuckets),
		instancesEnded: counter("ax_instances_ended_total",
			"Instances that ended, by final state (SUCCEEDED, FAILED, SKIPPED, CANCELLED, SHADOW: a task in shadow mode, recorded, not run).", "task", "state"),
		attempts: counter("ax_attempts_total",
			"Attempts that ended, by outcome (succeeded, failed, handed_back: its executor stopped and handed it back).", "task", "outcome"),
		timeouts: counter("ax_attempt_timeouts_total",
			"Attempts that ended because they outlived the task's timeout.", "task"),
		leaseExpiries: counter("ax_lease_expiries_total",
			"Attempts the reaper failed because their lease expired (the worker died, hung or lost its connection).", "task"),
		retries: counter("ax_retries_total",
			"Attempts that ended RETRYING: a next attempt follows.", "task"),
		instances: gauge("ax_instances",
			"Instances in each live state (CREATED, WAITING, DISPATCHED, RUNNING, RETRYING).", "task", "state"),
		backlog: gauge("ax_backlog_instances",
			"Instances DISPATCHED, WAITING or RETRYING for longer than 5 minutes.", "task", "state"),
		heartbeatsLost: counter("ax_worker_heartbeats_lost_total",
			"Workers whose ax-workers key expired without the worker deleting it: heartbeats stopped.", "pool"),
		workersStopped: counter("ax_workers_stopped_total",
			"Workers that stopped cleanly, deleting their ax-workers key.", "pool"),
		workers: gauge("ax_workers",
			"Live workers serving each pool.", "pool"),
		slots: gauge("ax_executor_slots",
			"Slots of the live workers serving each pool.", "pool"),
		slotsBusy: gauge("ax_executor_slots_busy",
			"Busy slots of the live workers serving each pool, as of their last heartbeat.", "pool"),
		slotUtilization: gauge("ax_executor_slot_utilization",
			"Busy slots over slots of the live workers serving each pool (0-1).", "pool"),
		workerSlotUtil: gauge("ax_worker_slot_utilization",
			"Busy slots over slots of each live worker (0-1).", "worker"),
		alertsOpen: gauge("ax_alerts_open",
			"Alerts firing or acknowledged, by level.", "level", "state"),
		notifications: counter("ax_alert_notifications_total",
			"Alert notifications sent, by channel kind and result (ok, error).", "kind", "result"),
		recordsSeen: prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_audit_records_monitored_total",
			Help: "Audit records this auditor's monitor consumed from AX_AUDIT."}),
		monitorLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_monitor_leader",
			Help: "1 while this auditor computes the fleet metrics and evaluates alert rules, else 0."}),
		consumerPending: gauge("ax_consumer_pending",
			"Messages of the stream that the durable consumer has yet to deliver (JetStream's num_pending).", "stream", "consumer"),
		consumerAckPending: gauge("ax_consumer_ack_pending",
			"Messages the durable consumer delivered that are not acknowledged yet (num_ack_pending).", "stream", "consumer"),
		consumerRedelivered: gauge("ax_consumer_redelivered",
			"Messages the durable consumer delivered more than once that are not acknowledged yet (num_redelivered).", "stream", "consumer"),
		consumerLastActive: gauge("ax_consumer_last_active_seconds",
			"Seconds since the durable consumer last delivered a message or had one acknowledged (since its creation when never).", "stream", "consumer"),
		poolWaiting: gauge("ax_pool_waiting",
			"Attempts waiting on AX_DISPATCH for a worker of the pool at the priority: not yet delivered to any.", "pool", "priority"),
		poolWaitingSlots: gauge("ax_pool_waiting_slots",
			"Worker slots that the pool's dispatched attempts not yet running take at the priority (a task's execution.slots each; "+
				"attempts held back for fairness included): the figure to scale a pool on.", "pool", "priority"),
		poolOldest: gauge("ax_pool_oldest_waiting_seconds",
			"Age of the oldest attempt waiting for the pool at the priority, in seconds (0 when none waits).", "pool", "priority"),
		poolAttempts: gauge("ax_pool_attempts",
			"Attempts of the pool by state in PostgreSQL: DISPATCHED (waiting, delivered or taken, not yet started) and RUNNING.", "pool", "state"),
		poolSlots: gauge("ax_pool_slots",
			"Worker slots that the pool's attempts take, by state in PostgreSQL (DISPATCHED and RUNNING; a task's execution.slots each, 1 by default). Their sum is the work the pool's executors have: autoscale on it.", "pool", "state"),
	}
	for _, c := range []prometheus.Collector{m.schedulingDelay, m.triggerToStart, m.startToEnd, m.instancesEnded, m.attempts,
		m.timeouts, m.leaseExpiries, m.retries, m.instances, m.backlog, m.heartbeatsLost, m.workersStopped, m.workers,
		m.slots, m.slotsBusy, m.slotUtilization, m.workerSlotUtil, m.alertsOpen, m.notifications,
		m.recordsSeen, m.monitorLeader, m.consumerPending, m.consumerAckPending, m.consumerRedelivered,
		m.consumerLastActive, m.poolWaiting, m.poolOldest, m.poolAttempts, m.poolSlots, m.poolWaitingSlots} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// resetFleet drops the gauges that only the monitoring leader keeps, so an
// auditor that stopped leading exports no stale values.
func (m *metrics) resetFleet() {
	for _, g := range []*prometheus.GaugeVec{m.instances, m.backlog, m.workers, m.slots, m.slotsBusy, m.slotUtilization,
		m.workerSlotUtil, m.alertsOpen, m.poolWaiting, m.poolOldest, m.poolAttempts, m.poolSlots, m.poolWaitingSlots} {
		g.Reset()
	}
	for _, g := range m.consumerGauges() {
		g.Reset()
	}
}

// consumerGauges returns the gauges labelled by stream and consumer.
func (m *metrics) consumerGauges() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.consumerPending, m.consumerAckPending, m.consumerRedelivered, m.consumerLastActive}
}

// attemptEnded reports whether a transition ends an attempt.
func attemptEnded(r schemas.AuditRecord) bool {
	return (r.From == schemas.StateRunning || r.From == schemas.StateDispatched) &&
		(r.To == schemas.StateSucceeded || r.To == schemas.StateFailed || r.To == schemas.StateRetrying)
}

// timedRecord is what a record's latency needs of its instance's times: a
// creation and the first attempt's →RUNNING the firing's time (and the
// latter the handler's start), a record ending a running attempt when that
// attempt was recorded RUNNING and its handler's start. Other records need
// none (timed false).
func timedRecord(r schemas.AuditRecord) (timed, fired bool) {
	switch {
	case r.Kind != schemas.AuditTransition:
		return false, false
	case r.From == "" && r.To == schemas.StateCreated, r.To == schemas.StateRunning && r.Attempt == 1:
		return true, true
	}
	return r.From == schemas.StateRunning && attemptEnded(r), false
}

// recordTimes returns the times of recs' instances as the records carry
// them, and the instances of timed records that lack some, whose times the
// caller reads from PostgreSQL. The relay puts the firing's time and the
// handler's reported start on the records that need them
// (schemas.AuditRecord), and an attempt's →RUNNING record comes before the
// one that ends it, in the same page when one report carried both. A
// record lacks them when an earlier relay wrote it, when its attempt ended
// in a later page than it started, when its worker reported no start, or
// when the instance moved to a later attempt before the relay read it.
func recordTimes(recs []schemas.AuditRecord) (map[int64]store.InstanceTimes, []int64) {
	times := map[int64]store.InstanceTimes{}
	for _, r := range recs {
		if r.Kind != schemas.AuditTransition {
			continue
		}
		it := times[r.InstanceID]
		if !r.FiredAt.IsZero() {
			it.FiredAt = r.FiredAt
		}
		if !r.StartedAt.IsZero() {
			it.StartedAt, it.StartedAttempt = r.StartedAt, r.Attempt
		}
		if r.To == schemas.StateRunning {
			if it.Running == nil { // most instances have one attempt's
				it.Running = make(map[int]time.Time, 1)
			}
			it.Running[r.Attempt] = r.At
		}
		times[r.InstanceID] = it
	}
	var lacking []int64
	for _, r := range recs {
		timed, fired := timedRecord(r)
		if !timed {
			continue
		}
		it := times[r.InstanceID]
		_, running := it.Running[r.Attempt]
		switch {
		case fired && it.FiredAt.IsZero(),
			r.To == schemas.StateRunning && it.StartedAttempt != r.Attempt,
			r.From == schemas.StateRunning && (!running || it.StartedAttempt != r.Attempt):
			lacking = append(lacking, r.InstanceID)
		}
	}
	slices.Sort(lacking)
	return times, slices.Compact(lacking)
}

// observe counts the transitions of recs; times holds the times of their
// instances (recordTimes).
func (m *metrics) observe(recs []schemas.AuditRecord, times map[int64]store.InstanceTimes) {
	since := func(from time.Time, to time.Time) float64 { return max(to.Sub(from).Seconds(), 0) }
	for _, r := range recs {
		if r.Kind != schemas.AuditTransition {
			continue
		}
		it, timed := times[r.InstanceID]
		switch {
		case r.From == "" && r.To == schemas.StateCreated:
			if timed {
				observeTraced(m.schedulingDelay.WithLabelValues(r.Task), since(it.FiredAt, r.At), r.Traceparent)
			}
		case r.To == schemas.StateRunning:
			if timed && r.Attempt == 1 {
				// To the handler's start as its worker reported it, when
				// known: the RUNNING row waits for the started report
				// (after a second, or with the final one).
				observeTraced(m.triggerToStart.WithLabelValues(r.Task), since(it.FiredAt, startOf(it, r.Attempt, r.At)), r.Traceparent)
			}
		}
		if attemptEnded(r) {
			outcome := "failed"
			switch {
			case r.To == schemas.StateSucceeded:
				outcome = "succeeded"
			case store.IsHandedBackReason(r.Reason):
				// Its worker stopped: nothing failed (not a retry either,
				// below: the next attempt is not one of max_attempts').
				outcome = "handed_back"
			}
			m.attempts.WithLabelValues(r.Task, outcome).Inc()
			if r.To != schemas.StateSucceeded && store.IsTimeoutReason(r.Reason) {
				m.timeouts.WithLabelValues(r.Task).Inc()
			}
			if r.Operator == store.OperatorReaper && store.IsLeaseExpiredReason(r.Reason) {
				m.leaseExpiries.WithLabelValues(r.Task).Inc()
			}
			if r.To == schemas.StateRetrying && outcome != "handed_back" {
				m.retries.WithLabelValues(r.Task).Inc()
			}
			if running, ok := it.Running[r.Attempt]; ok && r.From == schemas.StateRunning {
				// From the handler's start as its worker reported it, when
				// known: the RUNNING row waits for the started report. An
				// attempt whose start the instance no longer holds (a later
				// one started since) and whose RUNNING row came with its end
				// is left out: it ran for an unknown time, not for 0 s.
				if started := startOf(it, r.Attempt, running); started.Before(r.At) || it.StartedAttempt == r.Attempt {
					observeTraced(m.startToEnd.WithLabelValues(r.Task), since(started, r.At), r.Traceparent)
				}
			}
		}
		if r.To.Terminal() {
			m.instancesEnded.WithLabelValues(r.Task, string(r.To)).Inc()
		}
	}
}

// observeTraced observes v on h with an exemplar naming the trace of
// traceparent (the record's, its instance's: the span that created it)
// when that trace is sampled, so that a slow bucket links to a firing's
// trace; plainly otherwise. Exemplars are served in the OpenMetrics
// format only (internal/metrics.Handler).
func observeTraced(h prometheus.Observer, v float64, traceparent string) {
	if traceparent != "" {
		sc := trace.SpanContextFromContext(streams.WithTraceHeaders(context.Background(), traceparent, ""))
		if e, ok := h.(prometheus.ExemplarObserver); ok && sc.IsValid() && sc.IsSampled() {
			e.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
			return
		}
	}
	h.Observe(v)
}

// startOf returns when an attempt's handler began: its worker's report where
// the instance holds it and it is before running (when the attempt was
// recorded RUNNING), else running.
func startOf(it store.InstanceTimes, attempt int, running time.Time) time.Time {
	if it.StartedAttempt == attempt && !it.StartedAt.IsZero() && it.StartedAt.Before(running) {
		return it.StartedAt
	}
	return running
}

// setGauges sets vec to exactly the series of values (label values joined
// by labelSep → value), deleting the series it had that values lacks.
func setGauges(vec *prometheus.GaugeVec, prev map[string]bool, values map[string]float64) map[string]bool {
	next := make(map[string]bool, len(values))
	for k, v := range values {
		vec.WithLabelValues(strings.Split(k, labelSep)...).Set(v)
		next[k] = true
	}
	for k := range prev {
		if !next[k] {
			vec.DeleteLabelValues(strings.Split(k, labelSep)...)
		}
	}
	return next
}

// labelSep joins label values into a map key; it never occurs in a task,
// pool or state name.
const labelSep = "\x00"
