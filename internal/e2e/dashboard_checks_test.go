package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/auditor/monitor"
	"github.com/ax-scheduler/ax/schemas"
)

// dashSel is a choice of the dashboard's variables: a task and a pool, ""
// for All.
type dashSel struct{ task, pool string }

func (s dashSel) taskOK(task string) bool { return s.task == "" || s.task == task }
func (s dashSel) poolOK(pool string) bool { return s.pool == "" || s.pool == pool }

// grafanaExpr substitutes the dashboard's variables in expr as Grafana
// does for a Prometheus query: All is the variable's allValue (".*"), one
// value is its regex-escaped self. $__rate_interval is what Grafana makes
// of the data source's default scrape interval (15 s): 4 × 15 s.
func grafanaExpr(t *testing.T, expr string, sel dashSel) string {
	t.Helper()
	vars := map[string]string{"task": ".*", "pool": ".*", "__rate_interval": "1m", "__interval": "15s", "__range": "6h"}
	if sel.task != "" {
		vars["task"] = regexp.QuoteMeta(sel.task)
	}
	if sel.pool != "" {
		vars["pool"] = regexp.QuoteMeta(sel.pool)
	}
	out := regexp.MustCompile(`\$\{(\w+)\}|\[\[(\w+)\]\]|\$([A-Za-z_]\w*)`).ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}[]")
		v, ok := vars[name]
		if !ok {
			t.Errorf("the query %q uses the variable %s, which the test does not know how Grafana fills", expr, m)
		}
		return v
	})
	return out
}

// bounds is the range a series' value must fall in.
type bounds struct{ lo, hi float64 }

func exact(v float64) bounds { return bounds{v, v} }

func (b bounds) holds(v float64) bool {
	eps := 1e-9 * math.Max(1, math.Abs(b.hi))
	return v >= b.lo-eps && v <= b.hi+eps
}

// dashTruth is what PostgreSQL, JetStream and the test's own handlers say
// at one moment.
type dashTruth struct {
	now time.Time
	// asked is when the query being checked was asked (checkAll sets it),
	// after now.
	asked       time.Time
	base        int64 // the last instance of the warm-up: its counts precede every series' first scrape
	instances   []dashInstance
	transitions []dashTransition
	runs        []handlerRun
	blocked     map[string]int
	consumers   []dashConsumer
	alerts      map[string]float64
	// records are the audit records (transitions and operator actions),
	// baseRecords those of the warm-up.
	records, baseRecords float64
	streamMsgs           float64
	// limits are the named limits' use in PostgreSQL, by the labels of
	// their series: running, admitted in the last second, waiting (by
	// key) and paused.
	limitRunning, limitAdmitted, limitWaiting, limitPaused map[string]float64
	storeUsed                                              float64
	storeLimit                                             float64
}

type dashInstance struct {
	id                             int64
	task, pool, priority, state    string
	firedAt, dispatchedAt, updated time.Time
}

type dashTransition struct {
	instance         int64
	task, from, to   string
	attempt          int
	reason, operator string
	at               time.Time
}

type dashConsumer struct {
	stream, name, pool, priority     string
	durable                          bool
	pending, ackPending, redelivered float64
	lastActive                       float64
}

func (tr *dashTruth) instance(id int64) dashInstance {
	for _, in := range tr.instances {
		if in.id == id {
			return in
		}
	}
	return dashInstance{}
}

// key is a series' labels as the comparison keys them.
func key(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+"="+kv[i+1])
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func labelsKey(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k, v)
	}
	return key(kv...)
}

// readTruth reads PostgreSQL and JetStream.
func (e *dashEnv) readTruth(base int64, baseRecords float64) (*dashTruth, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*jsTimeout)
	defer cancel()
	pool := e.store.Pool()
	tr := &dashTruth{base: base, baseRecords: baseRecords, blocked: e.handlers.blockedBy(), alerts: map[string]float64{}}
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&tr.now); err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT id, task, pool, priority, state, fired_at, coalesce(dispatched_at, created_at), updated_at FROM instances`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var in dashInstance
		if err := rows.Scan(&in.id, &in.task, &in.pool, &in.priority, &in.state, &in.firedAt, &in.dispatchedAt, &in.updated); err != nil {
			return nil, err
		}
		tr.instances = append(tr.instances, in)
	}
	rows, err = pool.Query(ctx, `SELECT instance_id, task, coalesce(from_state, ''), to_state, attempt, reason, operator, at FROM instance_transition_log ORDER BY id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var t dashTransition
		if err := rows.Scan(&t.instance, &t.task, &t.from, &t.to, &t.attempt, &t.reason, &t.operator, &t.at); err != nil {
			return nil, err
		}
		tr.transitions = append(tr.transitions, t)
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instance_transition_log) + (SELECT count(*) FROM operator_actions)`).Scan(&tr.records); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT level, state, count(*) FROM alerts WHERE state IN ('firing', 'acked') GROUP BY 1, 2`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var level, state string
		var n float64
		if err := rows.Scan(&level, &state, &n); err != nil {
			return nil, err
		}
		tr.alerts[key("level", level, "state", state)] = n
	}
	if err := tr.readLimits(ctx, pool); err != nil {
		return nil, err
	}
	e.handlers.mu.Lock()
	tr.runs = slices.Clone(e.handlers.runs)
	e.handlers.mu.Unlock()

	js := e.cluster.js
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		return nil, err
	}
	tr.storeUsed, tr.storeLimit = float64(ai.Store), float64(max(ai.Limits.MaxStore, 0))
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, "AX_") {
			continue
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		tr.streamMsgs += float64(info.State.LastSeq)
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			tr.consumers = append(tr.consumers, dashConsumer{stream: name, name: ci.Name, durable: ci.Config.Durable != "",
				pool: ci.Config.Metadata["ax_pool"], priority: ci.Config.Metadata["ax_priority"],
				pending: float64(ci.NumPending), ackPending: float64(ci.NumAckPending), redelivered: float64(ci.NumRedelivered),
				lastActive: lastActiveOf(ci).Seconds()})
		}
		if err := lister.Err(); err != nil {
			return nil, err
		}
	}
	return tr, names.Err()
}

// readLimits reads the named limits' use from their tables: an attempt
// holds a slot while its instance is DISPATCHED, RUNNING or RETRYING, and
// waits while it is WAITING.
func (tr *dashTruth) readLimits(ctx context.Context, pool *pgxpool.Pool) error {
	tr.limitRunning, tr.limitAdmitted = map[string]float64{}, map[string]float64{}
	tr.limitWaiting, tr.limitPaused = map[string]float64{}, map[string]float64{}
	rows, err := pool.Query(ctx, `SELECT l.name, l.paused, coalesce(il.key, ''), coalesce(i.state, ''),
		coalesce(il.admitted_at > now() - interval '1 second', false) FROM limits l
		LEFT JOIN instance_limits il ON il.limit_name = l.name LEFT JOIN instances i ON i.id = il.instance_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name, k, state string
		var paused, admitted bool
		if err := rows.Scan(&name, &paused, &k, &state, &admitted); err != nil {
			return err
		}
		if admitted {
			tr.limitAdmitted[key("limit", name)]++
		}
		tr.limitPaused[key("limit", name)] = map[bool]float64{true: 1}[paused]
		switch state {
		case "DISPATCHED", "RUNNING", "RETRYING":
			tr.limitRunning[key("limit", name)]++
		case "WAITING":
			tr.limitWaiting[key("limit", name, "key", k)]++
		}
	}
	return rows.Err()
}

func lastActiveOf(ci *jetstream.ConsumerInfo) time.Duration {
	last := ci.Created
	for _, t := range []*time.Time{ci.Delivered.Last, ci.AckFloor.Last} {
		if t != nil && t.After(last) {
			last = *t
		}
	}
	return max(ci.TimeStamp.Sub(last), 0)
}

// attemptOutcome is the outcome of an attempt a transition ends, or "".
func attemptOutcome(t dashTransition) string {
	if (t.from != "RUNNING" && t.from != "DISPATCHED") || (t.to != "SUCCEEDED" && t.to != "FAILED" && t.to != "RETRYING") {
		return ""
	}
	if t.to == "SUCCEEDED" {
		return "succeeded"
	}
	return "failed"
}

// counts counts, per key, the transitions after the warm-up that f keys
// ("" skips).
func (tr *dashTruth) counts(sel dashSel, f func(dashTransition) string) map[string]float64 {
	out := map[string]float64{}
	for _, t := range tr.transitions {
		if t.instance <= tr.base || !sel.taskOK(t.task) {
			continue
		}
		if k := f(t); k != "" {
			out[k]++
		}
	}
	return out
}

// rateWindow is the window of the dashboard's rates the test checks: every
// window covers the whole test. A rate times its window is the increase
// since the series' first scrape, extrapolated by at most half a scrape
// interval at the start and one at the end (the test runs well over 10
// scrapes): within [increase, 1.35 × increase].
func rateBounds(delta, window float64) bounds {
	return bounds{0.99 * delta / window, 1.35 * delta / window}
}

// auditRate bounds the rate over 5 minutes of a count of audit records
// (relayed, monitored), a series without labels that exists from its
// auditor's start: the window holds every record written after the
// warm-up, and as many of the warm-up's as were counted less than 5
// minutes before the query (all of them on a quick run, fewer on a slow
// one).
func auditRate(tr *dashTruth, _ dashSel) map[string]bounds {
	return map[string]bounds{key(): {rateBounds(tr.records-tr.baseRecords, 300).lo, rateBounds(tr.records, 300).hi}}
}

func rates(m map[string]float64, window float64) map[string]bounds {
	out := map[string]bounds{}
	for k, v := range m {
		out[k] = rateBounds(v, window)
	}
	return out
}

func exacts(m map[string]float64) map[string]bounds {
	out := map[string]bounds{}
	for k, v := range m {
		out[k] = exact(v)
	}
	return out
}

// ratios is num/den by key, within 0.03: both rates' series come from one
// target, their extrapolations differ by the few scrapes between their
// first samples.
func ratios(num, den map[string]float64) map[string]bounds {
	out := map[string]bounds{}
	for k, d := range den {
		if d > 0 {
			r := num[k] / d
			out[k] = bounds{r - 0.03, r + 0.03}
		}
	}
	return out
}

// observations are the latency samples of the dashboard's histograms since
// the warm-up, by task, as the truth has them.
func (tr *dashTruth) schedulingDelays(sel dashSel) map[string][]float64 {
	out := map[string][]float64{}
	for _, t := range tr.transitions {
		if t.instance > tr.base && t.from == "" && t.to == "CREATED" && sel.taskOK(t.task) {
			out[t.task] = append(out[t.task], t.at.Sub(tr.instance(t.instance).firedAt).Seconds())
		}
	}
	return out
}

// triggerToStart: from the firing's due time to the handler's start of
// the first attempt, as the handler saw it, less 50 ms (its worker reports
// the start just before calling it).
func (tr *dashTruth) triggerToStart(sel dashSel) map[string][]float64 {
	return tr.firstStarts(sel, func(r handlerRun, _ bool) time.Time { return r.start.Add(-50 * time.Millisecond) })
}

// triggerToStartLate is triggerToStart as the monitor may count it late:
// an attempt shorter than a second is recorded RUNNING with its end (the
// started report waits a second), and a monitor that reads the instance
// after its next attempt began no longer has the first one's start.
func (tr *dashTruth) triggerToStartLate(sel dashSel) map[string][]float64 {
	return tr.firstStarts(sel, func(r handlerRun, retried bool) time.Time {
		if retried && r.end.Sub(r.start) < time.Second {
			return r.end
		}
		return r.start
	})
}

func (tr *dashTruth) firstStarts(sel dashSel, at func(r handlerRun, retried bool) time.Time) map[string][]float64 {
	retried := map[int64]bool{}
	for _, r := range tr.runs {
		if r.attempt > 1 {
			retried[r.instance] = true
		}
	}
	out := map[string][]float64{}
	for _, r := range tr.runs {
		in := tr.instance(r.instance)
		if r.instance > tr.base && r.attempt == 1 && sel.taskOK(in.task) {
			out[in.task] = append(out[in.task], at(r, retried[r.instance]).Sub(in.firedAt).Seconds())
		}
	}
	return out
}

// startToEnd: how long the handlers ran, as they saw it; the blocked ones
// have not ended.
func (tr *dashTruth) startToEnd(sel dashSel) map[string][]float64 {
	out := map[string][]float64{}
	for _, r := range tr.runs {
		in := tr.instance(r.instance)
		if r.instance > tr.base && !r.end.IsZero() && sel.taskOK(in.task) {
			out[in.task] = append(out[in.task], r.end.Sub(r.start).Seconds())
		}
	}
	return out
}

// startToRecordedEnd is startToEnd up to the end as the monitor times it:
// each run from its handler's start to the transition that ended its
// attempt, recorded once the final report reached PostgreSQL — about a
// tenth of a second after the handler's own end on a quiet machine,
// seconds on a busy one.
func (tr *dashTruth) startToRecordedEnd(sel dashSel) map[string][]float64 {
	ends := map[[2]int64]time.Time{}
	for _, t := range tr.transitions {
		k := [2]int64{t.instance, int64(t.attempt)}
		if _, seen := ends[k]; !seen && t.from == "RUNNING" {
			ends[k] = t.at
		}
	}
	out := map[string][]float64{}
	for _, r := range tr.runs {
		in := tr.instance(r.instance)
		if r.instance <= tr.base || r.end.IsZero() || !sel.taskOK(in.task) {
			continue
		}
		end, ok := ends[[2]int64{r.instance, int64(r.attempt)}]
		if !ok || end.Before(r.end) {
			end = r.end
		}
		out[in.task] = append(out[in.task], end.Sub(r.start).Seconds())
	}
	return out
}

// The histograms' buckets (auditor/monitor/metrics.go).
var (
	delayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 90, 120, 180, 240, 300, 900}
	runBuckets   = []float64{.1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600}
)

// quantileBounds is where histogram_quantile(q) must fall, the samples
// being each within [lo[i], hi[i]]: within the bucket of the true quantile
// — of the samples ranked 10 % either side of it, the series of several
// tasks being extrapolated a little differently — and up to slack above
// it (a report's way to the dispatcher).
func quantileBounds(q float64, lo, hi []float64, buckets []float64, slack float64) (bounds, bool) {
	if len(lo) == 0 {
		return bounds{}, false
	}
	lo, hi = slices.Clone(lo), slices.Clone(hi)
	slices.Sort(lo)
	slices.Sort(hi)
	n := float64(len(lo))
	at := func(obs []float64, rank float64) float64 {
		return obs[int(math.Min(math.Max(math.Ceil(rank), 1), n))-1]
	}
	from, to := at(lo, 0.9*q*n), at(hi, 1.1*q*n)+slack
	b := bounds{0, buckets[len(buckets)-1]}
	for i, le := range buckets {
		if from <= le {
			if i > 0 {
				b.lo = buckets[i-1]
			}
			break
		}
	}
	for _, le := range buckets {
		if to <= le {
			b.hi = le
			break
		}
	}
	return b, true
}

// quantiles is quantileBounds per task (byTask) or of all the tasks.
func quantiles(q float64, lo, hi map[string][]float64, buckets []float64, slack float64, byTask bool) map[string]bounds {
	out := map[string]bounds{}
	var allLo, allHi []float64
	for task, o := range lo {
		allLo, allHi = append(allLo, o...), append(allHi, hi[task]...)
		if b, ok := quantileBounds(q, o, hi[task], buckets, slack); ok && byTask {
			out[key("task", task)] = b
		}
	}
	if b, ok := quantileBounds(q, allLo, allHi, buckets, slack); ok && !byTask {
		out[key()] = b
	}
	return out
}

// dashCheck is how the test knows a query's value: expected returns the
// bounds of every series the query must give (a series absent counts as
// 0; a NaN, Grafana's blank, counts as absent).
//
// exporterHalf marks a query that falls back (`or`) from the auditor's
// lag figures to prometheus-nats-exporter's (jetstream_consumer_*). The
// test evaluates it with the auditor's figures present, so it checks
// AX's half only: the exporter's half is not checked against the truth,
// because the Go module proxy refuses prometheus-nats-exporter's module
// and make test cannot run it. TestDashboardStatsAndExporterLeaders and
// TestDashboardQueriesRegisteredMetrics check that half's selectors.
type dashCheck struct {
	expected     func(tr *dashTruth, sel dashSel) map[string]bounds
	exporterHalf bool
	// why says how the value is known when it is not exact.
	why string
}

// zero is the check of a counter of what the test never causes.
func zero(why string) dashCheck {
	return dashCheck{expected: func(*dashTruth, dashSel) map[string]bounds { return nil }, why: "zero: " + why}
}

func (tr *dashTruth) pools(sel dashSel, f func(pool string, w dashWorker) float64) map[string]float64 {
	out := map[string]float64{}
	for _, w := range dashWorkers {
		if sel.poolOK(w.pool) {
			out[key("pool", w.pool)] += f(w.pool, w)
		}
	}
	return out
}

// dispatched counts the instances DISPATCHED by the labels of keyOf.
func (tr *dashTruth) dispatched(sel dashSel, keyOf func(dashInstance) string) map[string]float64 {
	out := map[string]float64{}
	for _, in := range tr.instances {
		if in.state == "DISPATCHED" && sel.poolOK(in.pool) {
			out[keyOf(in)]++
		}
	}
	return out
}

func (tr *dashTruth) running(sel dashSel) map[string]float64 {
	return tr.pools(sel, func(_ string, w dashWorker) float64 { return float64(tr.blocked[w.id]) })
}

// consumerFigure is a figure of every consumer of the AX_ streams.
func (tr *dashTruth) consumerFigure(f func(dashConsumer) float64) map[string]bounds {
	out := map[string]bounds{}
	for _, c := range tr.consumers {
		out[key("stream", c.stream, "consumer", c.name)] = exact(f(c))
	}
	return out
}

// poolConsumers sums a figure of the pools' dispatch consumers by the
// labels of keyOf.
func (tr *dashTruth) poolConsumers(sel dashSel, keyOf func(dashConsumer) string, f func(dashConsumer) float64) map[string]bounds {
	sums := map[string]float64{}
	for _, c := range tr.consumers {
		if c.stream == "AX_DISPATCH" && c.pool != "" && sel.poolOK(c.pool) {
			sums[keyOf(c)] += f(c)
		}
	}
	return exacts(sums)
}

var liveStates = []string{"CREATED", "WAITING", "DISPATCHED", "RUNNING", "RETRYING"}

func (tr *dashTruth) live(sel dashSel, keyOf func(dashInstance) string) map[string]bounds {
	out := map[string]float64{}
	for _, in := range tr.instances {
		if slices.Contains(liveStates, in.state) && sel.taskOK(in.task) {
			out[keyOf(in)]++
		}
	}
	return exacts(out)
}

func (tr *dashTruth) backlog(sel dashSel) map[string]bounds {
	return exacts(func() map[string]float64 {
		out := map[string]float64{}
		for _, in := range tr.instances {
			if slices.Contains([]string{"DISPATCHED", "WAITING", "RETRYING"}, in.state) && tr.now.Sub(in.updated) > 5*time.Minute && sel.taskOK(in.task) {
				out[key("task", in.task, "state", in.state)]++
			}
		}
		return out
	}())
}

func endedBy(t dashTransition) string {
	if schemas.State(t.to).Terminal() {
		return key("state", t.to)
	}
	return ""
}

func outcomeBy(t dashTransition) string {
	if o := attemptOutcome(t); o != "" {
		return key("outcome", o)
	}
	return ""
}

func timeoutOf(t dashTransition) bool {
	return attemptOutcome(t) == "failed" && strings.Contains(strings.ToLower(t.reason), "timeout")
}

// sumAll is the map of one series, {}, holding the sum of m.
func sumAll(m map[string]float64) map[string]float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return map[string]float64{key(): s}
}

// byTask rekeys per-transition counts by task.
func (tr *dashTruth) byTask(sel dashSel, f func(dashTransition) bool) map[string]float64 {
	return tr.counts(sel, func(t dashTransition) string {
		if f(t) {
			return key("task", t.task)
		}
		return ""
	})
}

func isSucceeded(t dashTransition) bool { return t.to == "SUCCEEDED" }
func isEnded(t dashTransition) bool     { return t.to == "SUCCEEDED" || t.to == "FAILED" }
func isAttempt(t dashTransition) bool   { return attemptOutcome(t) != "" }
func isRetry(t dashTransition) bool     { return attemptOutcome(t) == "failed" && t.to == "RETRYING" }
func isLeaseExpiry(t dashTransition) bool {
	return attemptOutcome(t) != "" && t.operator == "reaper" && strings.Contains(t.reason, "lease")
}

// mean is the mean of every task's samples, by task, from mean up to
// mean+slack.
func means(obs map[string][]float64, slack float64) map[string]bounds {
	out := map[string]bounds{}
	for task, o := range obs {
		s := 0.0
		for _, v := range o {
			s += v
		}
		m := s / float64(len(o))
		out[key("task", task)] = bounds{m, m + slack}
	}
	return out
}

func counted(obs map[string][]float64) map[string]float64 {
	out := map[string]float64{}
	for task, o := range obs {
		out[key("task", task)] = float64(len(o))
	}
	return out
}

// dashboardChecks holds a check for every query of deploy/grafana/ax.json,
// by panel title and refId. A query the dashboard gains fails the test
// until it is added here.
var dashboardChecks = map[string]dashCheck{
	"Dispatch success rate/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(sumAll(tr.byTask(sel, isSucceeded)), sumAll(tr.byTask(sel, isEnded)))
	}, why: "a ratio of rates: of the instances ended since the warm-up, ±0.03"},
	"Timeout rate/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(sumAll(tr.byTask(sel, timeoutOf)), sumAll(tr.byTask(sel, isAttempt)))
	}, why: "a ratio of rates, ±0.03"},
	"Retry rate/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(sumAll(tr.byTask(sel, isRetry)), sumAll(tr.byTask(sel, isAttempt)))
	}, why: "a ratio of rates, ±0.03"},
	"Backlog older than 5 minutes/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		out := map[string]float64{}
		for _, b := range tr.backlog(sel) {
			out[key()] += b.lo
		}
		return exacts(out)
	}},
	"Scheduling delay (firing due → instance created)/A": quantileCheck(0.5, (*dashTruth).schedulingDelays, delayBuckets, 0, false),
	"Scheduling delay (firing due → instance created)/B": quantileCheck(0.95, (*dashTruth).schedulingDelays, delayBuckets, 0, false),
	"Scheduling delay (firing due → instance created)/C": quantileCheck(0.99, (*dashTruth).schedulingDelays, delayBuckets, 0, false),
	"Lease expiries/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(tr.byTask(sel, isLeaseExpiry), 1)
	}, why: "an increase: of the reaper's lease expiries since the warm-up (none happen)"},
	"Heartbeat losses/A": zero("no worker stops during the test"),
	"Heartbeat losses/B": zero("no worker stops during the test"),
	"Executor slot utilisation/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		busy := tr.running(sel)
		slots := tr.pools(sel, func(_ string, w dashWorker) float64 { return float64(w.slots) })
		out := map[string]float64{}
		for k, s := range slots {
			out[k] = busy[k] / s
		}
		return exacts(out)
	}},
	"Instances ended, by state/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(tr.counts(sel, endedBy), 300)
	}, why: "a rate: the instances ended since the warm-up over 5m, within its extrapolation"},
	"Attempts ended, by outcome/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(tr.counts(sel, outcomeBy), 300)
	}, why: "a rate, within its extrapolation"},
	"Attempts ended, by outcome/B": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(sumAll(tr.byTask(sel, timeoutOf)), 300)
	}, why: "a rate, within its extrapolation"},
	"Attempts ended, by outcome/C": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(sumAll(tr.byTask(sel, isLeaseExpiry)), 300)
	}, why: "a rate (none happen)"},
	"Dispatch success rate by task/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(tr.byTask(sel, isSucceeded), tr.byTask(sel, isEnded))
	}, why: "a ratio of rates, ±0.03"},
	"Timeout rate by task/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(tr.byTask(sel, timeoutOf), tr.byTask(sel, isAttempt))
	}, why: "a ratio of rates, ±0.03"},
	"Retry rate by task/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return ratios(tr.byTask(sel, isRetry), tr.byTask(sel, isAttempt))
	}, why: "a ratio of rates, ±0.03"},
	"Backlog by task/A":         {expected: func(tr *dashTruth, sel dashSel) map[string]bounds { return tr.backlog(sel) }},
	"Trigger → start/A":         triggerToStartCheck(0.5, false),
	"Trigger → start/B":         triggerToStartCheck(0.95, false),
	"Trigger → start/C":         triggerToStartCheck(0.99, false),
	"Start → end/A":             startToEndCheck(0.5, false),
	"Start → end/B":             startToEndCheck(0.95, false),
	"Start → end/C":             startToEndCheck(0.99, false),
	"Start → end p95 by task/A": startToEndCheck(0.95, true),
	"Start → end p95 by task/B": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		out := means(tr.startToEnd(sel), 0)
		for k, b := range means(tr.startToRecordedEnd(sel), 0.5) {
			out[k] = bounds{out[k].lo, b.hi}
		}
		return out
	}, why: "the mean run time by task: the handlers' own, up to the recording of their ends and 0.5 s more"},
	"Scheduling delay p99 by task/A": quantileCheck(0.99, (*dashTruth).schedulingDelays, delayBuckets, 0, true),
	"Scheduling delay p99 by task/B": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return rates(counted(tr.schedulingDelays(sel)), 1800)
	}, why: "a rate: the instances created since the warm-up over 30m"},
	"Trigger → start p99 by task/A": triggerToStartCheck(0.99, true),
	"Live instances by state/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return tr.live(sel, func(in dashInstance) string { return key("state", in.state) })
	}},
	"Live instances by task/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return tr.live(sel, func(in dashInstance) string { return key("task", in.task) })
	}},
	"Live workers by pool/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return exacts(tr.pools(sel, func(string, dashWorker) float64 { return 1 }))
	}},
	"Slots by pool/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return exacts(tr.pools(sel, func(_ string, w dashWorker) float64 { return float64(w.slots) }))
	}},
	"Slots by pool/B": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds { return exacts(tr.running(sel)) }},
	"Slot utilisation by worker/A": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		out := map[string]float64{}
		for _, w := range dashWorkers {
			out[key("worker", w.id)] = float64(tr.blocked[w.id]) / float64(w.slots)
		}
		return exacts(out)
	}},
	"Pending by consumer/A": {exporterHalf: true, expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return tr.consumerFigure(func(c dashConsumer) float64 { return c.pending })
	}},
	"Ack pending by consumer/A": {exporterHalf: true, expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return tr.consumerFigure(func(c dashConsumer) float64 { return c.ackPending })
	}},
	"Redelivered by consumer/A": {exporterHalf: true, expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return tr.consumerFigure(func(c dashConsumer) float64 { return c.redelivered })
	}},
	"Dispatch backlog by pool/A": {exporterHalf: true, expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return tr.poolConsumers(sel, func(c dashConsumer) string { return key("pool", c.pool) }, func(c dashConsumer) float64 { return c.pending })
	}},
	"Dispatch backlog by pool/B": {exporterHalf: true, expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return tr.poolConsumers(sel, func(c dashConsumer) string { return key("pool", c.pool) }, func(c dashConsumer) float64 { return c.ackPending })
	}},
	"Dispatch backlog by pool/C": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		out := tr.dispatched(sel, func(in dashInstance) string { return key("pool", in.pool, "state", "DISPATCHED") })
		for _, w := range dashWorkers {
			if sel.poolOK(w.pool) {
				out[key("pool", w.pool, "state", "RUNNING")] += float64(tr.blocked[w.id])
			}
		}
		return exacts(out)
	}, why: "DISPATCHED from PostgreSQL, RUNNING from the handlers holding a slot"},
	"Dispatch backlog by pool/E": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		out := tr.dispatched(sel, func(in dashInstance) string { return key("pool", in.pool) })
		for k, v := range tr.running(sel) {
			out[k] += v
		}
		return exacts(out)
	}, why: "every task takes one slot: the attempts waiting and running"},
	"Dispatch backlog by pool/D": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return exacts(tr.dispatched(sel, func(in dashInstance) string { return key("pool", in.pool) }))
	}, why: "every task takes one slot: the attempts DISPATCHED, not running"},
	"Dispatch backlog by priority/A": {exporterHalf: true, expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return tr.poolConsumers(dashSel{}, func(c dashConsumer) string { return key("priority", c.priority) }, func(c dashConsumer) float64 { return c.pending })
	}},
	"Oldest waiting attempt by pool/A": {expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		oldest := map[string]time.Time{}
		for _, in := range tr.instances {
			k := key("pool", in.pool, "priority", in.priority)
			if in.state == "DISPATCHED" && sel.poolOK(in.pool) && (oldest[k].IsZero() || in.dispatchedAt.Before(oldest[k])) {
				oldest[k] = in.dispatchedAt
			}
		}
		out := map[string]bounds{}
		for k, at := range oldest {
			// The gauge is refreshed on, also after the truth was read
			// and before the query (seconds apart on a busy machine).
			out[k] = bounds{tr.now.Sub(at).Seconds() - 5, tr.asked.Sub(at).Seconds() + 1}
		}
		return out
	}, why: "an age: the oldest DISPATCHED instance's in PostgreSQL, from 5 s less than when the truth was read (the refresh and the scrape) to 1 s more than when the query was asked"},
	"Consumer last active/A": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		out := map[string]bounds{}
		for _, c := range tr.consumers {
			if c.durable && slices.Contains([]string{"AX_TRIGGERS", "AX_FIRINGS", "AX_DISPATCH", "AX_REPORTS", "AX_AUDIT"}, c.stream) {
				out[key("stream", c.stream, "consumer", c.name)] = bounds{c.lastActive - 5, c.lastActive + 5}
			}
		}
		return out
	}, why: "an age: JetStream's, ±5 s (the refresh and the scrape); the auditor's durable consumers of the lag streams only"},
	"Open alerts by level/A": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds { return exacts(tr.alerts) }},
	"Notifications/A":        zero("no alert rule fires"),
	"Dispatcher throughput/A": {expected: throughputBounds,
		why: "a rate: at most every message of the AX_ streams over 5m, and some"},
	"Dispatcher throughput/B": {expected: throughputBounds, why: "a rate: at most a batch per message"},
	"Dispatcher batch time/A": {expected: func(*dashTruth, dashSel) map[string]bounds { return nil },
		why: "a quantile of the dispatcher's own timings: checked to be within its buckets (0–10 s) below"},
	"Auditor/A": {expected: auditRate, why: "a rate: at least the audit records written since the warm-up, at most every one"},
	"Auditor/B": {expected: auditRate, why: "a rate: at least the audit records written since the warm-up, at most every one"},
	"Auditor/C": {expected: func(*dashTruth, dashSel) map[string]bounds { return map[string]bounds{key(): exact(1)} }},
	"Auditor/D": {expected: func(*dashTruth, dashSel) map[string]bounds { return map[string]bounds{key(): exact(1)} }},
	"Stale and refused reports, fence answers, hand-backs/A": zero("no attempt is fenced out"),
	"Stale and refused reports, fence answers, hand-backs/B": zero("no report comes from another worker"),
	"Stale and refused reports, fence answers, hand-backs/C": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		dispatched := 0.0
		for _, t := range tr.transitions {
			if t.to == "DISPATCHED" {
				dispatched++
			}
		}
		return map[string]bounds{key("answer", "start"): {0, dispatched}}
	}, why: "no answer but yes (start): a delivery after a reconnection asks too, and a busy machine makes some (the attempt never ran and runs once); at most one a dispatch"},
	"Stale and refused reports, fence answers, hand-backs/D": zero("no worker stops"),
	"Reaper: left to the report, retries recovered/A":        zero("no lease expires"),
	"Reaper: left to the report, retries recovered/B":        zero("no retry is lost"),
	"Refused firings, unstorable reports/A":                  zero("every firing is good"),
	"Refused firings, unstorable reports/B":                  zero("every report is good"),
	"Routed again from departed workers/A":                   zero("no worker departs"),
	"Progress reports/A":                                     zero("no handler reports progress"),
	"JetStream refusing writes/A":                            zero("JetStream takes every write"),
	"JetStream refusing writes/B": {expected: func(*dashTruth, dashSel) map[string]bounds {
		return map[string]bounds{key(): exact(1)}
	}},
	"Dispatcher batch failures/A": zero("PostgreSQL and JetStream take every batch"),
	"JetStream store/A": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return map[string]bounds{key(): {0.8 * tr.storeUsed, 1.25 * tr.storeUsed}}
	}, why: "the account's store in use, ±20 % (leases and heartbeats keep writing)"},
	"JetStream store/B": {expected: func(tr *dashTruth, _ dashSel) map[string]bounds {
		return map[string]bounds{key(): exact(tr.storeLimit)}
	}},
	"Named limits/A":                         {expected: func(tr *dashTruth, _ dashSel) map[string]bounds { return exacts(tr.limitRunning) }},
	"Named limits/B":                         {expected: func(tr *dashTruth, _ dashSel) map[string]bounds { return exacts(tr.limitAdmitted) }},
	"Named limits/C":                         {expected: func(tr *dashTruth, _ dashSel) map[string]bounds { return exacts(tr.limitWaiting) }},
	"Named limits/D":                         {expected: func(tr *dashTruth, _ dashSel) map[string]bounds { return exacts(tr.limitPaused) }},
	"Worker deaths, suspects, quarantines/A": zero("no worker dies"),
	"Worker deaths, suspects, quarantines/B": zero("no worker dies"),
	"Worker deaths, suspects, quarantines/C": zero("no worker dies"),
	"Topology and bucket integrity/A":        zero("the topology is the dispatcher's own"),
	"Topology and bucket integrity/B":        zero("no bucket is rolled up"),
}

func throughputBounds(tr *dashTruth, _ dashSel) map[string]bounds {
	return nil // checked by checkThroughput: the consumers' split is the dispatchers'
}

func quantileCheck(q float64, obs func(*dashTruth, dashSel) map[string][]float64, buckets []float64, slack float64, byTask bool) dashCheck {
	return rangeQuantileCheck(q, obs, obs, buckets, slack, byTask)
}

// startToEndCheck: the handlers' runs, up to the recording of their ends
// (startToRecordedEnd) and 0.5 s more.
func startToEndCheck(q float64, byTask bool) dashCheck {
	return rangeQuantileCheck(q, (*dashTruth).startToEnd, (*dashTruth).startToRecordedEnd, runBuckets, 0.5, byTask)
}

// triggerToStartCheck: the handlers' first starts, the monitor counting
// some late (triggerToStartLate), up to 0.25 s more (a report's way).
func triggerToStartCheck(q float64, byTask bool) dashCheck {
	return rangeQuantileCheck(q, (*dashTruth).triggerToStart, (*dashTruth).triggerToStartLate, delayBuckets, 0.25, byTask)
}

// rangeQuantileCheck is quantileCheck for samples known within a range.
func rangeQuantileCheck(q float64, lo, hi func(*dashTruth, dashSel) map[string][]float64, buckets []float64, slack float64, byTask bool) dashCheck {
	return dashCheck{expected: func(tr *dashTruth, sel dashSel) map[string]bounds {
		return quantiles(q, lo(tr, sel), hi(tr, sel), buckets, slack, byTask)
	}, why: fmt.Sprintf("a quantile of a histogram: within the bucket of the true p%g (of the samples since the warm-up), up to %g s above", q*100, slack)}
}

// dashQuery is one query of the dashboard.
type dashQuery struct{ panel, ref, expr string }

// dashboardQueries returns every query of deploy/grafana/ax.json.
func dashboardQueries(t *testing.T) []dashQuery {
	t.Helper()
	data, err := os.ReadFile("../../deploy/grafana/ax.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var out []dashQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				out = append(out, dashQuery{p.Title, tg.RefID, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return out
}

// compare checks a query's answer against bounds: each series within its
// bounds, each expected series present unless its bounds admit 0, no
// other series but zeros. It returns what differs.
func compare(got []promSample, want map[string]bounds) []string {
	var diffs []string
	seen := map[string]bool{}
	for _, s := range got {
		if math.IsNaN(s.value) {
			continue
		}
		k := labelsKey(s.labels)
		seen[k] = true
		b, ok := want[k]
		if !ok {
			b = exact(0)
		}
		if !b.holds(s.value) {
			diffs = append(diffs, fmt.Sprintf("{%s} = %g, want %s", k, s.value, b))
		}
	}
	for k, b := range want {
		if !seen[k] && !b.holds(0) {
			diffs = append(diffs, fmt.Sprintf("{%s} missing, want %s", k, b))
		}
	}
	sort.Strings(diffs)
	return diffs
}

func (b bounds) String() string {
	if b.lo == b.hi {
		return fmt.Sprintf("%g", b.lo)
	}
	return fmt.Sprintf("[%g, %g]", b.lo, b.hi)
}

// fire fires task n times with payload, and returns the instances.
func (e *dashEnv) fire(task string, n int, payload string) []int64 {
	e.t.Helper()
	var ids []int64
	for range n {
		res, err := e.client.Fire(context.Background(), task, wire.FireRequest{Payload: json.RawMessage(payload)})
		if err != nil {
			e.t.Fatalf("fire %s: %v", task, err)
		}
		ids = append(ids, res.InstanceID)
	}
	return ids
}

// waitEnded waits until every instance of ids ended.
func (e *dashEnv) waitEnded(ids []int64) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d instances to end", len(ids)), catchUpTimeout, func() (bool, error) {
		var n int
		err := e.store.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM instances WHERE id = ANY($1) AND state IN ('SUCCEEDED', 'FAILED')`, ids).Scan(&n)
		return n == len(ids), err
	})
}

// catchUpTimeout bounds the wait for the auditor to catch up: longer than
// the monitor consumer's AckWait (2 min), after which JetStream delivers
// again a message whose delivery a stalled machine lost.
const catchUpTimeout = 5 * time.Minute

// waitCaughtUp waits until the auditor has caught up — its relay has
// relayed every audit record PostgreSQL holds and its monitor has
// consumed and acknowledged every one on AX_AUDIT — and Prometheus has
// scraped every target since, and returns the number of records.
func (e *dashEnv) waitCaughtUp() float64 {
	e.t.Helper()
	var records, relayed, monitored float64
	var pending, ackPending uint64
	defer func() {
		e.t.Logf("audit records: %g in PostgreSQL, %g relayed, %g monitored; monitor consumer: %d pending, %d ack pending",
			records, relayed, monitored, pending, ackPending)
		if e.t.Failed() {
			e.logTargets()
		}
	}()
	waitFor(e.t, "the auditor to relay and monitor every audit record", catchUpTimeout, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), jsTimeout)
		defer cancel()
		var err error
		if records, err = e.auditRecords(ctx); err != nil {
			return false, err
		}
		relayed, monitored = e.counter("ax_audit_records_relayed_total"), e.counter("ax_audit_records_monitored_total")
		cons, err := e.cluster.js.Consumer(ctx, e.cluster.top.AuditStream(), monitor.MonitorConsumer)
		if err != nil {
			return false, nil // a request during an election
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false, nil
		}
		pending, ackPending = info.NumPending, uint64(info.NumAckPending)
		return relayed >= records && monitored >= records-e.unmonitored && pending == 0 && ackPending == 0, nil
	})
	e.waitScraped(time.Now())
	return records
}

// waitScraped waits until Prometheus has scraped every target since.
func (e *dashEnv) waitScraped(since time.Time) {
	e.t.Helper()
	waitFor(e.t, "Prometheus to scrape every target", 2*time.Minute, func() (bool, error) {
		targets, err := e.targets()
		if err != nil || len(targets) == 0 {
			return false, err
		}
		for _, tg := range targets {
			if tg.Health != "up" || !tg.LastScrape.After(since) {
				return false, nil
			}
		}
		return true, nil
	})
}

// auditRecords counts the audit records in PostgreSQL: transitions and
// operator actions.
func (e *dashEnv) auditRecords(ctx context.Context) (float64, error) {
	var n float64
	err := e.store.Pool().QueryRow(ctx,
		`SELECT (SELECT count(*) FROM instance_transition_log) + (SELECT count(*) FROM operator_actions)`).Scan(&n)
	return n, err
}

// waitMonitorConsumer waits until the monitor's consumer exists and notes
// how many audit records preceded it.
func (e *dashEnv) waitMonitorConsumer() {
	e.t.Helper()
	waitFor(e.t, "the auditor's monitor consumer", catchUpTimeout, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), jsTimeout)
		defer cancel()
		before, err := e.auditRecords(ctx)
		if err != nil {
			return false, err
		}
		if _, err := e.cluster.js.Consumer(ctx, e.cluster.top.AuditStream(), monitor.MonitorConsumer); err != nil {
			return false, nil
		}
		e.unmonitored = before
		return true, nil
	})
}

// counter sums a counter over the services' registries.
func (e *dashEnv) counter(name string) float64 {
	e.t.Helper()
	sum := 0.0
	for _, reg := range e.registries {
		families, err := reg.Gather()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				for _, m := range f.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// promTarget is a target as Prometheus's /api/v1/targets has it.
type promTarget struct {
	ScrapeURL, Health, LastError string
	LastScrape                   time.Time
}

// targets returns Prometheus's active targets.
func (e *dashEnv) targets() ([]promTarget, error) {
	resp, err := http.Get(e.promURL + "/api/v1/targets")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			ActiveTargets []promTarget `json:"activeTargets"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	return body.Data.ActiveTargets, err
}

// logTargets logs Prometheus's view of its targets.
func (e *dashEnv) logTargets() {
	targets, err := e.targets()
	if err != nil {
		e.t.Logf("targets: %v", err)
	}
	for _, tg := range targets {
		e.t.Logf("target %s: %s, last scrape %s %s", tg.ScrapeURL, tg.Health, tg.LastScrape.Format(time.RFC3339Nano), tg.LastError)
	}
}

// TestDashboardAgainstTheTruth evaluates every query of AX's Grafana
// dashboard, and the Prometheus alert rules, in a real Prometheus (Debian's)
// scraping what docker-compose.yml and the Helm chart have it scrape —
// both replicas of the dispatcher and of the auditor, all but
// prometheus-nats-exporter (notRun) — on a three-node NATS cluster with
// two pools, some attempts running (held by their handlers), some waiting
// for a slot and some for a paused named limit, and compares each value
// with the truth: PostgreSQL's instances, transitions and limits,
// JetStream's consumer infos, and the handlers' own times. Every query is
// checked with every variable at All and with one task and one pool
// chosen. A query the test does not know fails it.
//
// It compares once the auditor has caught up and Prometheus has scraped
// since (waitCaughtUp); the gauges refreshed on a timer are compared again
// until they agree or a deadline passes.
func TestDashboardAgainstTheTruth(t *testing.T) {
	t.Parallel()
	queries := dashboardQueries(t)
	for _, q := range queries {
		check, ok := dashboardChecks[q.panel+"/"+q.ref]
		if !ok {
			t.Errorf("panel %q query %s (%s) has no check: add one to dashboardChecks", q.panel, q.ref, q.expr)
		}
		if reads := strings.Contains(q.expr, "jetstream_consumer_"); reads != check.exporterHalf {
			t.Errorf("panel %q query %s: reads prometheus-nats-exporter's figures %v, its check's exporterHalf %v", q.panel, q.ref, reads, check.exporterHalf)
		}
	}
	known := map[string]bool{}
	for _, q := range queries {
		known[q.panel+"/"+q.ref] = true
	}
	for k := range dashboardChecks {
		if !known[k] {
			t.Errorf("dashboardChecks has %q, which the dashboard no longer has", k)
		}
	}
	if t.Failed() {
		return
	}
	e := startDashEnv(t)

	// The warm-up: each task once, to the end, so that every series the
	// test looks at exists (rate sees no increase before a series' first
	// sample).
	const done = `{"block": false, "k": "x"}`
	var warm []int64
	for _, task := range dashTasks {
		warm = append(warm, e.fire(task.name, 1, done)...)
	}
	e.waitEnded(warm)
	baseRecords := e.waitCaughtUp()
	base := slices.Max(warm)

	// Outcomes of every kind, then attempts that hold their slots, then
	// attempts of the named limit: one per key admitted (waiting for a
	// slot), one per key WAITING, the limit paused.
	var ended []int64
	for task, n := range map[string]int{"quick": 3, "retry": 2, "fail": 2, "hang": 1} {
		ended = append(ended, e.fire(task, n, done)...)
	}
	e.waitEnded(ended)
	e.fire("alpha-block", 4, `{"block": true}`)
	e.fire("beta-urgent", 3, `{"block": true}`)
	e.fire("beta-low", 2, `{"block": true}`)
	e.waitStates("5 attempts to run, 4 to wait", map[string]int{"DISPATCHED": 4}, map[string]int{"a1": 2, "b1": 2, "b2": 1})
	e.fire("limited", 2, `{"block": true, "k": "x"}`)
	e.fire("limited", 2, `{"block": true, "k": "y"}`)
	e.waitStates("the limit to admit one attempt per key", map[string]int{"DISPATCHED": 6, "WAITING": 2}, map[string]int{"a1": 2, "b1": 2, "b2": 1})
	if _, err := e.client.SetLimitPaused(context.Background(), dashLimit.Name, true); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()

	sels := []dashSel{{}, {task: "retry", pool: "beta"}}
	var failures []string
	for deadline := time.Now().Add(3 * time.Minute); ; {
		round := time.Now()
		tr, err := e.readTruth(base, baseRecords)
		if err != nil {
			failures = []string{"reading the truth: " + err.Error()} // a JetStream request during an election
		} else {
			failures = e.checkAll(queries, tr, sels)
		}
		if len(failures) == 0 || time.Now().After(deadline) {
			break
		}
		e.waitScraped(round) // the gauges' next refresh reaches Prometheus
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// waitStates waits until PostgreSQL has as many instances in each state of
// states and the handlers hold as many slots of each worker as blocked.
func (e *dashEnv) waitStates(what string, states map[string]int, blocked map[string]int) {
	e.t.Helper()
	waitFor(e.t, what, catchUpTimeout, func() (bool, error) {
		if !maps.Equal(e.handlers.blockedBy(), blocked) {
			return false, nil
		}
		for state, want := range states {
			var n int
			if err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE state = $1`, state).Scan(&n); err != nil {
				return false, err
			}
			if n != want {
				return false, nil
			}
		}
		return true, nil
	})
}

// checkAll evaluates every query with each choice of variables and
// returns what differs from the truth.
func (e *dashEnv) checkAll(queries []dashQuery, tr *dashTruth, sels []dashSel) []string {
	var failures []string
	for _, q := range queries {
		check := dashboardChecks[q.panel+"/"+q.ref]
		for i, sel := range sels {
			if i > 0 && !strings.Contains(q.expr, "$") {
				continue
			}
			expr := grafanaExpr(e.t, q.expr, sel)
			tr.asked = time.Now()
			got, err := e.query(expr)
			if err != nil {
				failures = append(failures, fmt.Sprintf("panel %q %s: %v", q.panel, q.ref, err))
				continue
			}
			diffs := compare(got, check.expected(tr, sel))
			if q.panel == "Dispatcher throughput" || q.panel == "Dispatcher batch time" {
				diffs = checkServiceFigure(q, got, tr)
			}
			if len(diffs) > 0 {
				failures = append(failures, fmt.Sprintf("panel %q %s, %s (task %q, pool %q):\n\t%s\n\t%s",
					q.panel, q.ref, check.why, sel.task, sel.pool, expr, strings.Join(diffs, "\n\t")))
			}
		}
	}
	return append(failures, e.checkRules()...)
}

// checkServiceFigure checks the dispatcher's own figures, which no store
// holds: its messages and batches per second are at most every message of
// the AX_ streams over 5 minutes, and some; its batch time's p99 is within
// its buckets.
func checkServiceFigure(q dashQuery, got []promSample, tr *dashTruth) []string {
	var diffs []string
	sum := 0.0
	for _, s := range got {
		hi := 10.0
		if q.panel == "Dispatcher throughput" {
			hi = 1.35 * tr.streamMsgs / 300
		}
		if s.value < 0 || s.value > hi {
			diffs = append(diffs, fmt.Sprintf("{%s} = %g, want [0, %g]", labelsKey(s.labels), s.value, hi))
		}
		sum += s.value
	}
	if sum == 0 {
		diffs = append(diffs, "no value above 0: the dispatchers took firings and reports")
	}
	return diffs
}

// checkRules checks the Prometheus alert rules (deploy/prometheus/alerts.yml,
// the chart's PrometheusRule): each loads, evaluates without error, and
// holds for nothing — JetStream takes every write, no batch fails, the
// store is far from full.
func (e *dashEnv) checkRules() []string {
	var failures []string
	var file struct {
		Groups []struct {
			Rules []struct {
				Expr string `json:"expr"`
				Name string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	readYAML(e.t, "deploy/prometheus/alerts.yml", &file)
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			n++
			got, err := e.query(r.Expr)
			if err != nil {
				failures = append(failures, fmt.Sprintf("alert %s: %v", r.Name, err))
				continue
			}
			if len(got) > 0 {
				failures = append(failures, fmt.Sprintf("alert %s holds for %v, though nothing of the sort happened: %s", r.Name, got, r.Expr))
			}
		}
	}
	// Prometheus loaded them and evaluates them without error.
	resp, err := http.Get(e.promURL + "/api/v1/rules")
	if err != nil {
		return append(failures, err.Error())
	}
	defer resp.Body.Close()
	var loaded struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&loaded); err != nil {
		return append(failures, err.Error())
	}
	for _, g := range loaded.Data.Groups {
		for _, r := range g.Rules {
			n--
			if r.Health != "ok" {
				failures = append(failures, fmt.Sprintf("alert %s: health %q %s", r.Name, r.Health, r.LastError))
			}
		}
	}
	if n != 0 {
		failures = append(failures, "Prometheus did not load every rule of deploy/prometheus/alerts.yml")
	}
	return failures
}
