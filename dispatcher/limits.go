package dispatcher

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/store"
)

// limiter is the part that starts what waits for named limits
// (schemas.Limit): the intake admits a firing at once when its limits have
// room (store.CreateAdmittedInstances) and creates it WAITING otherwise;
// the limiter promotes the WAITING ones (store.PromoteLimited) when a slot
// frees (the completer pokes it after ends when instances wait for limits:
// store.Due.Limited), when a rate's window moves
// on (it sleeps until the moment the store names) and, at the least,
// every limiterIdle (a limit resumed or raised by the API, a slot freed
// on another dispatcher). Every dispatcher runs one; the limits' row locks
// in PostgreSQL make their admissions one sequence.
type limiter struct {
	store   *store.Store
	next    completer
	log     zerolog.Logger
	metrics *limitMetrics
	// wake is poked (without blocking) when something may have freed a
	// slot.
	wake chan struct{}
}

// limiterIdle is the longest the limiter sleeps without a poke.
const limiterIdle = 250 * time.Millisecond

// limitMetricsEvery is how often the limiter reads the limits' use for
// the metrics.
const limitMetricsEvery = 5 * time.Second

func newLimiter(st *store.Store, next completer, log zerolog.Logger, m *limitMetrics) *limiter {
	return &limiter{store: st, next: next, log: log, metrics: m, wake: make(chan struct{}, 1)}
}

// poke asks the limiter for a round soon; it never blocks.
func (l *limiter) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run promotes until ctx ends. A failed round is logged and tried again
// after limiterIdle: the WAITING instances stay in PostgreSQL meanwhile.
func (l *limiter) run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastMetrics, lastForget time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-l.wake:
		}
		wait := l.round(ctx)
		if time.Since(lastMetrics) >= limitMetricsEvery {
			lastMetrics = time.Now()
			l.observe(ctx)
		}
		if time.Since(lastForget) >= time.Minute {
			lastForget = time.Now()
			if _, err := l.store.ForgetLimitAdmissions(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn().Err(err).Msg("forgetting old limit admissions failed; trying again in a minute")
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// round promotes once and returns how long to sleep.
func (l *limiter) round(ctx context.Context) time.Duration {
	attempts, next, more, err := l.store.PromoteLimited(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("promoting instances waiting for limits failed; trying again")
		}
		return limiterIdle
	}
	if len(attempts) > 0 {
		if err := l.next.publishAttempts(ctx, l.next.newBatch(), attempts); err != nil && ctx.Err() == nil {
			// Promoted and stored DISPATCHED: the fence and the reaper's
			// sweep treat an attempt whose message was lost as any other.
			l.log.Warn().Err(err).Int("attempts", len(attempts)).Msg("publishing attempts admitted by their limits failed")
		}
	}
	switch {
	case more:
		return 0
	case next > 0 && next < limiterIdle+store.RateLead:
		// Early by the lead the store waits out under the lock.
		return max(next-store.RateLead, time.Millisecond)
	}
	return limiterIdle
}

// limitMetrics are the limits' gauges, read from PostgreSQL every
// limitMetricsEvery by each dispatcher (the same values on each).
type limitMetrics struct {
	running, admitted, paused *prometheus.GaugeVec
	waiting                   *prometheus.GaugeVec
}

func newLimitMetrics(reg prometheus.Registerer) (*limitMetrics, error) {
	m := &limitMetrics{
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_limit_running",
			Help: "Attempts holding a slot of the named limit (DISPATCHED, RUNNING or RETRYING), over all its keys."}, []string{"limit"}),
		admitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_limit_admitted_per_second",
			Help: "Attempts the named limit admitted in the last second, over all its keys."}, []string{"limit"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_limit_paused",
			Help: "1 while the named limit is paused (it admits nothing)."}, []string{"limit"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ax_limit_waiting",
			Help: "WAITING instances of the named limit by key: the 10 keys with the most, the rest as key=\"other\"."}, []string{"limit", "key"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.running, m.admitted, m.paused, m.waiting} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// metricKeys is how many keys of a limit have a waiting series of their
// own; the others add up in key="other", so the series stay bounded
// whatever the payloads' keys.
const metricKeys = 10

// observe sets the gauges from the limits' use.
func (l *limiter) observe(ctx context.Context) {
	limits, err := l.store.ListLimits(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("reading the limits' use for the metrics failed")
		}
		return
	}
	m := l.metrics
	m.waiting.Reset()
	m.running.Reset()
	m.admitted.Reset()
	m.paused.Reset()
	for _, u := range limits {
		m.running.WithLabelValues(u.Name).Set(float64(u.Running))
		m.admitted.WithLabelValues(u.Name).Set(float64(u.AdmittedLastSecond))
		paused := 0.0
		if u.Paused {
			paused = 1
		}
		m.paused.WithLabelValues(u.Name).Set(paused)
		other := u.Waiting
		for i, k := range u.Keys {
			if i == metricKeys || k.Waiting == 0 {
				break
			}
			m.waiting.WithLabelValues(u.Name, k.Key).Set(float64(k.Waiting))
			other -= k.Waiting
		}
		m.waiting.WithLabelValues(u.Name, "other").Set(float64(other))
	}
}
