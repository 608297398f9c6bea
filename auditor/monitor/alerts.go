package monitor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Alert evaluation. Rules over transitions (consecutive_failures,
// duration_jitter) are evaluated on each batch of audit records that ends
// one of a task's instances; rules over a state (no_live_executor,
// failing_tasks, timeout_rate, backlog) every RefreshInterval. Only the
// auditor that leads monitoring evaluates, and every judgement is read
// from PostgreSQL, not from memory, so a new leader judges alike. An alert
// notifies when it opens and then at most once per its rule's throttle:
// the store claims the notification before it is sent, so the throttle
// holds whoever evaluates.

// rule is an alert rule with its params decoded.
type rule struct {
	schemas.AlertRule
	p schemas.AlertParams
}

// loadRules returns the enabled rules and the names of the others. A rule
// whose params no longer decode (changed in SQL by hand) counts as
// disabled, with a log line.
func (m *monitor) loadRules(ctx context.Context) (enabled []rule, disabled []string, err error) {
	all, err := m.opts.Store.ListAlertRules(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range all {
		p, err := r.DecodeParams()
		if err != nil {
			m.log.Error().Err(err).Str("rule", r.Name).Msg("alert rule ignored")
		}
		if err != nil || !r.Enabled {
			disabled = append(disabled, r.Name)
			continue
		}
		enabled = append(enabled, rule{AlertRule: r, p: p})
	}
	return enabled, disabled, nil
}

// raise records that r's condition holds for sig's key and sends the
// notification when the alert opened or its throttle has passed.
func (m *monitor) raise(ctx context.Context, r rule, sig store.AlertSignal) error {
	sig.Rule, sig.Level, sig.At = r.Name, r.Level, m.now()
	a, err := m.opts.Store.RaiseAlert(ctx, sig)
	if err != nil {
		return err
	}
	m.opened(a.Rule, a.Key)
	if a.State != schemas.AlertFiring {
		return nil
	}
	return m.notifyFiring(ctx, a, r.p.Throttle)
}

// opened notes that rule's alert for key is open.
func (m *monitor) opened(rule, key string) {
	if m.open == nil {
		return
	}
	if m.open[rule] == nil {
		m.open[rule] = map[string]bool{}
	}
	m.open[rule][key] = true
}

// mayChange returns the tasks whose alert of rule the records just seen
// may change: those for which raise holds (a rule fed by records raises
// an alert for a task only on that task's own new record of the kind it
// counts, a failure or a slow run), and those with an open alert to
// resolve. A task with neither is left alone: resolving what is not open
// changes nothing. Before the first refresh, when the open alerts are not
// known, every task may change. An alert that another auditor raised after
// this one's refresh read the open alerts (a leader deposed while it
// raised) is resolved once the next refresh (RefreshInterval) has read it.
func (m *monitor) mayChange(rule string, tasks []string, raise func(task string) bool) []string {
	if m.open == nil {
		return tasks
	}
	var out []string
	for _, t := range tasks {
		if raise(t) || m.open[rule][t] {
			out = append(out, t)
		}
	}
	return out
}

// notifyFiring sends the notification of firing alert a unless one went
// out within throttle.
func (m *monitor) notifyFiring(ctx context.Context, a schemas.Alert, throttle time.Duration) error {
	a, repeats, ok, err := m.opts.Store.ClaimNotification(ctx, a.ID, throttle, m.now())
	if err != nil || !ok {
		return err
	}
	m.log.Warn().Int64("alert_id", a.ID).Str("rule", a.Rule).Str("level", string(a.Level)).Str("key", a.Key).
		Str("reason", a.Reason).Msg("alert firing")
	m.enqueue(m.notification(a, StatusFiring, repeats))
	return nil
}

// resolved sends the resolution of each alert that was notified firing.
func (m *monitor) resolved(alerts []schemas.Alert, err error) error {
	for _, a := range alerts {
		delete(m.open[a.Rule], a.Key)
		m.log.Info().Int64("alert_id", a.ID).Str("rule", a.Rule).Str("key", a.Key).Msg("alert resolved")
		if a.LastNotifiedAt != nil {
			m.enqueue(m.notification(a, StatusResolved, 0))
		}
	}
	return err
}

// evaluateRecords evaluates the rules fed by transitions for the tasks
// whose instances ended in recs.
func (m *monitor) evaluateRecords(ctx context.Context, recs []schemas.AuditRecord) error {
	failed := map[string]int{} // FAILED instances in recs, by task
	var ended, succeeded []string
	for _, r := range recs {
		if r.Kind != schemas.AuditTransition {
			continue
		}
		switch r.To {
		case schemas.StateFailed:
			failed[r.Task]++
			ended = append(ended, r.Task)
		case schemas.StateSucceeded:
			ended = append(ended, r.Task)
			succeeded = append(succeeded, r.Task)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	slices.Sort(ended)
	ended = slices.Compact(ended)
	slices.Sort(succeeded)
	succeeded = slices.Compact(succeeded)
	rules, _, err := m.loadRules(ctx)
	if err != nil {
		return err
	}
	for _, r := range rules {
		switch r.Kind {
		case schemas.AlertConsecutiveFailures:
			err = m.consecutiveFailures(ctx, r, ended, failed)
		case schemas.AlertDurationJitter:
			err = m.durationJitter(ctx, r, succeeded)
		}
		if err != nil {
			return fmt.Errorf("evaluate alert rule %s: %w", r.Name, err)
		}
	}
	return nil
}

// maxErrorText bounds the error quoted in an alert's reason.
const maxErrorText = 500

// consecutiveFailures raises r for each of tasks whose latest
// r.p.Failures ended instances FAILED, and resolves it for the others:
// their latest end is a success. failed counts the failures just seen.
func (m *monitor) consecutiveFailures(ctx context.Context, r rule, tasks []string, failed map[string]int) error {
	// A task whose records here are successes only cannot have a new
	// streak: the rule can only resolve its open alert.
	tasks = m.mayChange(r.Name, tasks, func(task string) bool { return failed[task] > 0 })
	if len(tasks) == 0 {
		return nil
	}
	streaks, err := m.opts.Store.FailureStreaks(ctx, tasks, max(r.p.Failures, 100))
	if err != nil {
		return err
	}
	var broken []string
	for _, task := range tasks {
		st := streaks[task]
		if st.Failures < r.p.Failures {
			broken = append(broken, task)
			continue
		}
		if failed[task] == 0 {
			// An older instance ended: the streak of newer ones stands.
			continue
		}
		lastErr := st.LastError
		if len(lastErr) > maxErrorText {
			lastErr = lastErr[:maxErrorText] + "…"
		}
		times := fmt.Sprint(st.Failures)
		if st.Failures >= max(r.p.Failures, 100) {
			times += " or more"
		}
		// The count is the streak: it says the same whatever batches
		// the failures came in.
		err := m.raise(ctx, r, store.AlertSignal{Key: task, Task: task, InstanceID: st.LastInstanceID, Count: st.Failures,
			Reason: fmt.Sprintf("task %s failed %s times in a row; the last error: %s", task, times, lastErr)})
		if err != nil {
			return err
		}
	}
	return m.resolved(m.opts.Store.ResolveAlerts(ctx, r.Name, broken, m.now()))
}

// durationJitter raises r for each of tasks whose latest SUCCEEDED run
// took more than r.p.Factor times the p95 of the r.p.Runs before it and
// at least the rule's floor r.p.MinDuration, and resolves it for the others.
func (m *monitor) durationJitter(ctx context.Context, r rule, tasks []string) error {
	if len(tasks) == 0 {
		return nil
	}
	runs, err := m.opts.Store.RecentRuns(ctx, tasks, r.p.Runs+1)
	if err != nil {
		return err
	}
	var normal []string
	for _, task := range tasks {
		rs := runs[task]
		if len(rs) < 2 {
			normal = append(normal, task)
			continue
		}
		history := make([]time.Duration, len(rs)-1)
		for i, run := range rs[1:] {
			history[i] = run.Duration
		}
		st, slow := store.DurationOutlier(rs[0].Duration, history, r.p.Factor, r.p.MinRuns)
		if !slow || rs[0].Duration < r.p.MinDuration {
			normal = append(normal, task)
			continue
		}
		err := m.raise(ctx, r, store.AlertSignal{Key: task, Task: task, InstanceID: rs[0].InstanceID,
			Reason: fmt.Sprintf("the latest run of task %s took %v, more than %g × the p95 (%v) of its %d runs before it (median %v) "+
				"and more than the rule's floor of %v (params.min_duration)",
				task, rs[0].Duration.Round(time.Millisecond), r.p.Factor, st.P95.Round(time.Millisecond), st.Runs,
				st.Median.Round(time.Millisecond), r.p.MinDuration)})
		if err != nil {
			return err
		}
	}
	normal = m.mayChange(r.Name, normal, func(string) bool { return false })
	return m.resolved(m.opts.Store.ResolveAlerts(ctx, r.Name, normal, m.now()))
}

// evaluateStates evaluates the state rules, resolves the alerts of
// disabled rules, sends the grouped repeats of firing alerts whose
// throttle has passed, and sets the open-alert gauge.
func (m *monitor) evaluateStates(ctx context.Context, now time.Time) error {
	rules, disabled, err := m.loadRules(ctx)
	if err != nil {
		return err
	}
	for _, name := range disabled {
		if err := m.resolved(m.opts.Store.ResolveAlertsExcept(ctx, name, nil, now)); err != nil {
			return err
		}
	}
	ends := map[time.Duration][]store.TaskEnds{}
	recentEnds := func(window time.Duration) ([]store.TaskEnds, error) {
		if e, ok := ends[window]; ok {
			return e, nil
		}
		e, err := m.opts.Store.RecentEnds(ctx, now.Add(-window))
		ends[window] = e
		return e, err
	}
	throttles := map[string]time.Duration{}
	for _, r := range rules {
		throttles[r.Name] = r.p.Throttle
		var (
			holds []store.AlertSignal
			err   error
		)
		switch r.Kind {
		case schemas.AlertNoLiveExecutor:
			holds = m.noLiveExecutor(now)
		case schemas.AlertFailingTasks:
			holds, err = failingTasks(r, recentEnds)
		case schemas.AlertTimeoutRate:
			holds, err = timeoutRate(r, recentEnds)
		case schemas.AlertQuarantined:
			holds, err = quarantined(r, recentEnds)
		case schemas.AlertBacklog:
			holds, err = m.backlog(ctx, r, now)
		case schemas.AlertDeadlineMissed:
			holds, err = m.deadlines(ctx, r, now)
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("evaluate alert rule %s: %w", r.Name, err)
		}
		keys := make([]string, 0, len(holds))
		for _, sig := range holds {
			if err := m.raise(ctx, r, sig); err != nil {
				return fmt.Errorf("evaluate alert rule %s: %w", r.Name, err)
			}
			keys = append(keys, sig.Key)
		}
		if err := m.resolved(m.opts.Store.ResolveAlertsExcept(ctx, r.Name, keys, now)); err != nil {
			return fmt.Errorf("evaluate alert rule %s: %w", r.Name, err)
		}
	}
	return m.flushRepeats(ctx, throttles)
}

// flushRepeats notifies the firing alerts that have repeats not yet
// notified and whose throttle has passed, and sets the open-alert gauge.
func (m *monitor) flushRepeats(ctx context.Context, throttles map[string]time.Duration) error {
	open, err := m.opts.Store.OpenAlerts(ctx)
	if err != nil {
		return err
	}
	values := map[string]float64{}
	for _, lvl := range []schemas.AlertLevel{schemas.AlertP0, schemas.AlertP1, schemas.AlertP2} {
		for _, st := range []schemas.AlertState{schemas.AlertFiring, schemas.AlertAcked} {
			values[string(lvl)+labelSep+string(st)] = 0
		}
	}
	m.open = map[string]map[string]bool{}
	for _, a := range open {
		m.opened(a.Rule, a.Key)
		values[string(a.Level)+labelSep+string(a.State)]++
		throttle, enabled := throttles[a.Rule]
		if !enabled || a.State != schemas.AlertFiring || a.Count <= a.NotifiedCount {
			continue
		}
		if err := m.notifyFiring(ctx, a, throttle); err != nil {
			return err
		}
	}
	m.alertSeries = setGauges(m.metrics.alertsOpen, m.alertSeries, values)
	return nil
}

// noLiveExecutor holds for each pool that enabled tasks dispatch to and
// that has had no live worker for the workers bucket's TTL.
func (m *monitor) noLiveExecutor(now time.Time) []store.AlertSignal {
	var out []store.AlertSignal
	for pool, since := range m.fleet.empty {
		if now.Sub(since) < m.workerTTL {
			continue
		}
		var tasks []string
		for _, t := range m.tasks {
			// A task that any of several pools may run waits only when
			// none of them has a live worker.
			pools := t.Definition.Dispatch.Pools()
			if t.Enabled && slices.Contains(pools, pool) &&
				!slices.ContainsFunc(pools, func(p string) bool { _, empty := m.fleet.empty[p]; return !empty }) {
				tasks = append(tasks, t.Name)
			}
		}
		if len(tasks) == 0 {
			continue
		}
		out = append(out, store.AlertSignal{Key: pool,
			Reason: fmt.Sprintf("no live executor serves pool %s (none since %s); the instances of its tasks wait: %s",
				pool, since.UTC().Format(time.RFC3339), listNames(tasks))})
	}
	return out
}

// quarantined holds, for each task, when an instance of it was quarantined
// (failed because workers kept dying while running it) within
// r.p.Window.
func quarantined(r rule, recentEnds func(time.Duration) ([]store.TaskEnds, error)) ([]store.AlertSignal, error) {
	ends, err := recentEnds(r.p.Window)
	if err != nil {
		return nil, err
	}
	var out []store.AlertSignal
	for _, e := range ends {
		if e.Quarantined == 0 {
			continue
		}
		out = append(out, store.AlertSignal{Key: e.Task, Task: e.Task, InstanceID: e.LastQuarantinedID,
			Reason: fmt.Sprintf("%d instances of task %s were quarantined within %v: workers kept dying while running each "+
				"(its handler kills its process: os.Exit, a panic on a goroutine it started, memory); the latest is instance %d",
				e.Quarantined, e.Task, r.p.Window, e.LastQuarantinedID)})
	}
	return out, nil
}

// failingTasks holds, for key "", when at least r.p.Tasks tasks had an
// instance FAILED within r.p.Window.
func failingTasks(r rule, recentEnds func(time.Duration) ([]store.TaskEnds, error)) ([]store.AlertSignal, error) {
	ends, err := recentEnds(r.p.Window)
	if err != nil {
		return nil, err
	}
	var tasks []string
	var last int64
	for _, e := range ends {
		if e.Failed > 0 {
			tasks = append(tasks, e.Task)
			last = max(last, e.LastFailedID)
		}
	}
	if len(tasks) < r.p.Tasks {
		return nil, nil
	}
	return []store.AlertSignal{{Key: "", InstanceID: last,
		Reason: fmt.Sprintf("%d tasks had instances FAILED within %v: %s", len(tasks), r.p.Window, listNames(tasks))}}, nil
}

// timeoutRate holds for each task of which more than r.p.Rate of at least
// r.p.MinAttempts attempts that ended within r.p.Window timed out.
func timeoutRate(r rule, recentEnds func(time.Duration) ([]store.TaskEnds, error)) ([]store.AlertSignal, error) {
	ends, err := recentEnds(r.p.Window)
	if err != nil {
		return nil, err
	}
	var out []store.AlertSignal
	for _, e := range ends {
		if e.Attempts < r.p.MinAttempts || float64(e.Timeouts) <= r.p.Rate*float64(e.Attempts) {
			continue
		}
		out = append(out, store.AlertSignal{Key: e.Task, Task: e.Task, InstanceID: e.LastTimeoutID,
			Reason: fmt.Sprintf("%d of the %d attempts of task %s that ended within %v timed out (%.0f%%, above %.0f%%)",
				e.Timeouts, e.Attempts, e.Task, r.p.Window, 100*float64(e.Timeouts)/float64(e.Attempts), 100*r.p.Rate)})
	}
	return out, nil
}

// backlog holds for each task with at least r.p.Instances instances
// DISPATCHED, WAITING or RETRYING for longer than r.p.Age.
func (m *monitor) backlog(ctx context.Context, r rule, now time.Time) ([]store.AlertSignal, error) {
	counts, err := m.opts.Store.Backlog(ctx, r.p.Age, now)
	if err != nil {
		return nil, err
	}
	type sum struct {
		n      int
		oldest int64
		states []string
	}
	byTask := map[string]*sum{}
	for _, c := range counts {
		s := byTask[c.Task]
		if s == nil {
			s = &sum{oldest: c.OldestID}
			byTask[c.Task] = s
		}
		s.n += c.Count
		s.oldest = min(s.oldest, c.OldestID)
		s.states = append(s.states, fmt.Sprintf("%d %s in pool %s", c.Count, c.State, c.Pool))
	}
	var out []store.AlertSignal
	for task, s := range byTask {
		if s.n < r.p.Instances {
			continue
		}
		out = append(out, store.AlertSignal{Key: task, Task: task, InstanceID: s.oldest,
			Reason: fmt.Sprintf("%d instances of task %s have waited longer than %v (%s); the oldest is instance %d",
				s.n, task, r.p.Age, strings.Join(s.states, ", "), s.oldest)})
	}
	slices.SortFunc(out, func(a, b store.AlertSignal) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// listNames lists names for a reason, at most ten of them.
func listNames(names []string) string {
	if len(names) > 10 {
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}
