package system

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/drill"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Result is what one scenario did and its verdict.
type Result struct {
	Scenario    string `json:"scenario"`
	Description string `json:"description"`
	// Fired counts the firings JetStream acknowledged (for a cron
	// scenario: the seconds from its first tick to its last).
	Fired int `json:"fired"`
	// Created counts the instances made.
	Created int `json:"created"`
	// Succeeded and Failed count the instances that ended so; Poisoned
	// the instances of the poison task among them.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Poisoned  int `json:"poisoned"`
	// Lost counts the firings without an instance and the instances of the
	// work task that did not succeed (its retry policy outlasts every fault).
	Lost int `json:"lost"`
	// Stuck counts the instances that had not ended when the settle time
	// was up.
	Stuck int `json:"stuck"`
	// Doubled counts the extra instances of a firing: instances beyond the
	// first with the same task and event id (a redelivered firing whose
	// instance was made again).
	Doubled int `json:"doubled_firings"`
	// Duplicates counts the extra runs, in the ledger, of the attempt an
	// instance succeeded with.
	Duplicates int `json:"duplicates"`
	// Untrue counts the successes recorded that are not the truth: no run
	// of the succeeded attempt, on the worker that reported it, had ended
	// with success in the ledger before the success was recorded.
	Untrue int `json:"untrue_outcomes"`
	// SuccessesLost counts the runs that ended with success on a worker
	// the fault never touched, whose attempt is yet not the instance's
	// recorded success (it was retried, or failed): a success lost between
	// the worker and PostgreSQL.
	SuccessesLost int `json:"successes_lost"`
	// Retried counts the instances that needed more than one attempt.
	Retried int `json:"retried"`
	// StaleRefused counts the reports the dispatcher refused as stale
	// (instance_events stale_*); StaleAccepted the transitions recorded
	// for an attempt older than one the instance had already reached, and
	// the final transitions a worker's report made for an attempt that
	// worker never ran.
	StaleRefused  int `json:"stale_refused"`
	StaleAccepted int `json:"stale_accepted"`
	// Illegal counts the transitions the state machine has no edge for
	// (schemas.CanTransition), that do not start from the state the
	// previous one ended in, that leave a terminal state, or that change
	// the attempt other than RETRYING → DISPATCHED by one.
	Illegal int `json:"illegal_transitions"`
	// SpentWithoutRun counts the attempts of the work task that spent one
	// of its max_attempts (a transition to RETRYING or FAILED that
	// [store.SpendsNoAttempt] does not excuse) without a run of theirs
	// that ended in the ledger: the attempt never ran, or its worker died
	// under it — a fault spent what the handler never used.
	SpentWithoutRun int `json:"attempts_spent_without_a_run"`
	// DoubledEffects counts the extra runs of the work task's instances
	// that ended with success in the ledger: a side effect done again by
	// a later attempt (or by a worker that continued after SIGSTOP).
	// At-least-once allows it; it is a fact, not a check.
	DoubledEffects int `json:"side_effects_doubled"`
	// WorkerDeaths counts the executors that exited by themselves (a
	// Supervise scenario replaces each); PoisonRuns the runs of a Killer
	// poison in the ledger; Quarantined its instances FAILED as
	// quarantined; Tied its deaths that tied with a neighbour's at the
	// quarantine (each costs one worker more, see store.TiedReason);
	// Suspects the suspect events of its instances; CutBeside the runs of
	// the work task that a worker death cut short.
	WorkerDeaths int `json:"worker_deaths"`
	PoisonRuns   int `json:"poison_runs"`
	Quarantined  int `json:"quarantined"`
	Tied         int `json:"tied"`
	Suspects     int `json:"suspect_events"`
	CutBeside    int `json:"runs_cut_by_deaths"`
	// Faults counts the faults injected.
	Faults int `json:"faults"`
	// Recovery is the distribution of recovery times: for an executor
	// crash, from the crash to the next attempt of each attempt it cut
	// short; for any other fault, from its end to the first success after.
	Recovery Durations `json:"recovery"`
	// Checks are the verdict's checks; Pass is whether every one passed.
	Checks []drill.Check `json:"checks"`
	Pass   bool          `json:"pass"`
	// Wall is how long the scenario took, settling included.
	Wall string `json:"wall"`
}

// Durations summarises a distribution of durations.
type Durations struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

func summarize(ds []time.Duration) Durations {
	if len(ds) == 0 {
		return Durations{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return Durations{N: len(ds), P50: q(0.5), P99: q(0.99), Max: ds[len(ds)-1]}
}

// String prints p50/p99/max, or "-" for no samples.
func (d Durations) String() string {
	if d.N == 0 {
		return "-"
	}
	r := func(x time.Duration) string { return x.Round(10 * time.Millisecond).String() }
	return r(d.P50) + "/" + r(d.P99) + "/" + r(d.Max)
}

// Report returns the scenario's verdict as a drill report: its checks, and
// its counts as facts.
func (r Result) Report() *drill.Report {
	rep := &drill.Report{Title: "ax drill system: " + r.Scenario + " (" + r.Description + ")", Checks: r.Checks}
	for _, f := range []struct {
		name  string
		value any
	}{
		{"fired", r.Fired}, {"created", r.Created}, {"succeeded", r.Succeeded}, {"failed", r.Failed},
		{"retried", r.Retried}, {"stale reports refused", r.StaleRefused}, {"faults", r.Faults},
		{"attempts spent without a run", r.SpentWithoutRun},
		{"side effects doubled (extra runs of an instance that ended with success)", r.DoubledEffects},
		{"worker deaths", r.WorkerDeaths}, {"poison runs", r.PoisonRuns}, {"ties", r.Tied}, {"suspect events", r.Suspects},
		{"recovery p50/p99/max", r.Recovery}, {"wall time", r.Wall},
	} {
		rep.Fact(f.name, f.value)
	}
	return rep
}

type instanceRow struct {
	id      int64
	task    string
	eventID string
	state   schemas.State
	attempt int
	firedAt time.Time
}

type transitionRow struct {
	instance int64
	from, to schemas.State
	attempt  int
	operator string
	reason   string
	at       time.Time
}

// collect reads what the scenario left in PostgreSQL and the ledger and
// gives its verdict.
func (r *run) collect(ctx context.Context) (Result, error) {
	res := Result{Scenario: r.sc.Name, Description: r.sc.Description}
	tasks := []string{r.task, r.pois}
	rows, err := r.sb.Pool.Query(ctx, `SELECT id, task, event_id, state, attempt, fired_at FROM instances WHERE task = ANY($1) ORDER BY id`, tasks)
	if err != nil {
		return res, fmt.Errorf("read the drill's instances: %w", err)
	}
	var insts []instanceRow
	for rows.Next() {
		var in instanceRow
		if err := rows.Scan(&in.id, &in.task, &in.eventID, &in.state, &in.attempt, &in.firedAt); err != nil {
			return res, fmt.Errorf("read the drill's instances: %w", err)
		}
		insts = append(insts, in)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("read the drill's instances: %w", err)
	}
	rows, err = r.sb.Pool.Query(ctx, `SELECT instance_id, COALESCE(from_state, ''), to_state, attempt, operator, reason, at
		FROM instance_transition_log WHERE task = ANY($1) ORDER BY instance_id, id`, tasks)
	if err != nil {
		return res, fmt.Errorf("read the drill's transitions: %w", err)
	}
	byInstance := make(map[int64][]transitionRow)
	for rows.Next() {
		var t transitionRow
		if err := rows.Scan(&t.instance, &t.from, &t.to, &t.attempt, &t.operator, &t.reason, &t.at); err != nil {
			return res, fmt.Errorf("read the drill's transitions: %w", err)
		}
		byInstance[t.instance] = append(byInstance[t.instance], t)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("read the drill's transitions: %w", err)
	}
	if err := r.sb.Pool.QueryRow(ctx, `SELECT count(*) FROM instance_events e JOIN instances i ON i.id = e.instance_id
		WHERE i.task = ANY($1) AND e.kind LIKE 'stale%'`, tasks).Scan(&res.StaleRefused); err != nil {
		return res, fmt.Errorf("read the drill's stale reports: %w", err)
	}
	if err := r.sb.Pool.QueryRow(ctx, `SELECT count(*) FROM instance_events e JOIN instances i ON i.id = e.instance_id
		WHERE i.task = $1 AND e.kind = 'suspect'`, r.pois).Scan(&res.Suspects); err != nil {
		return res, fmt.Errorf("read the drill's suspect events: %w", err)
	}
	runs, err := ReadLedger(r.sb.Ledger)
	if err != nil {
		return res, err
	}
	runsOf := make(map[RunKey][]LedgerRun)
	for _, run := range runs {
		k := RunKey{run.Instance, run.Attempt}
		runsOf[k] = append(runsOf[k], run)
	}
	// ranOn reports whether worker ran the attempt (by the end: with
	// success, ended before it).
	ranOn := func(k RunKey, worker string, by time.Time) bool {
		for _, run := range runsOf[k] {
			if run.Worker == worker && (by.IsZero() || !run.End.IsZero() && !run.Cancelled && !run.End.After(by)) {
				return true
			}
		}
		return false
	}

	// Firings, instances, outcomes.
	r.mu.Lock()
	fired := len(r.fired)
	events := make(map[string]bool, len(r.fired)) // the drill's firings not yet seen
	byDrill := make(map[string]bool, len(r.fired))
	for id := range r.fired {
		events[id], byDrill[id] = true, true
	}
	crashes, faults := slices.Clone(r.crashes), slices.Clone(r.faults)
	res.WorkerDeaths = r.deaths
	r.mu.Unlock()
	res.Created, res.Faults = len(insts), len(faults)
	var ticks []time.Time
	cronTicks := 0
	made := make(map[[2]string]bool, len(insts))
	var dups []string  // the runs of each attempt that ran more than once
	var lost []string  // the first lost instances and missing ticks
	var stuck []string // the first instances not ended, and how they stand
	for _, in := range insts {
		delete(events, in.eventID)
		if k := [2]string{in.task, in.eventID}; made[k] {
			res.Doubled++
		} else {
			made[k] = true
		}
		switch {
		case !in.state.Terminal():
			res.Stuck++
			if len(stuck) < 5 {
				stuck = append(stuck, describeStuck(in, byInstance[in.id], runsOf)+r.eventsOf(ctx, in.id)+r.logsOf(in))
			}
		case in.state == schemas.StateSucceeded:
			res.Succeeded++
			if rs := runsOf[RunKey{in.id, in.attempt}]; len(rs) > 1 {
				res.Duplicates += len(rs) - 1
				dups = append(dups, describeRuns(in.id, in.attempt, rs))
			}
		case in.state == schemas.StateFailed:
			res.Failed++
		}
		if in.task == r.pois {
			if in.state == schemas.StateFailed {
				res.Poisoned++
			}
		} else if in.state.Terminal() && in.state != schemas.StateSucceeded {
			res.Lost++
			if len(lost) < 10 {
				lost = append(lost, fmt.Sprintf("instance %d (event %s) %s at attempt %d", in.id, in.eventID, in.state, in.attempt))
			}
		}
		if in.attempt > 1 && in.task == r.task {
			res.Retried++
		}
		if !byDrill[in.eventID] {
			ticks = append(ticks, in.firedAt) // the cron trigger's
		}
	}
	if r.sc.Cron {
		// Every second from the first tick to the last has its instance.
		ticked := 0
		if len(ticks) > 0 {
			sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
			ticked = int(ticks[len(ticks)-1].Sub(ticks[0]).Round(time.Second)/time.Second) + 1
		}
		res.Lost += max(0, ticked-len(ticks)) + len(events)
		if missing := ticked - len(ticks); missing > 0 {
			lost = append(lost, fmt.Sprintf("%d seconds without a cron tick's instance", missing))
		}
		fired = ticked + len(byDrill)
		cronTicks = len(ticks)
	} else {
		res.Lost += len(events)
	}
	res.Fired = fired

	// The transitions against the state machine and the ledger.
	task := make(map[int64]string, len(insts))
	for _, in := range insts {
		task[in.id] = in.task
	}
	var successes []time.Time
	var spent []string                         // the attempts spent without a run, with their reason
	redispatched := make(map[RunKey]time.Time) // attempt → when its next one was dispatched
	// The attempts retried as suspects of worker deaths: their retry waits
	// a lease TTL and more on purpose, apart from their neighbours.
	suspects := make(map[RunKey]bool)
	for _, ts := range byInstance {
		var prev *transitionRow
		reached := 0
		for i := range ts {
			t := &ts[i]
			if t.attempt < reached {
				res.StaleAccepted++
			}
			reached = max(reached, t.attempt)
			if !legal(prev, t) {
				res.Illegal++
			}
			if t.from == schemas.StateRetrying && t.to == schemas.StateDispatched {
				redispatched[RunKey{t.instance, t.attempt - 1}] = t.at
			}
			if t.to == schemas.StateRetrying && strings.Contains(t.reason, "; suspect: ") {
				suspects[RunKey{t.instance, t.attempt}] = true
			}
			if task[t.instance] == r.pois && t.to == schemas.StateRetrying && strings.Contains(t.reason, store.TiedReason) {
				res.Tied++
			}
			if t.to == schemas.StateSucceeded {
				successes = append(successes, t.at)
			}
			if (t.to == schemas.StateRetrying || t.to == schemas.StateFailed) && !store.SpendsNoAttempt(t.reason) {
				if task[t.instance] == r.task && !ranToEnd(runsOf[RunKey{t.instance, t.attempt}]) {
					res.SpentWithoutRun++
					spent = append(spent, fmt.Sprintf("instance %d attempt %d (%s)", t.instance, t.attempt, t.reason))
				}
				if task[t.instance] == r.pois && t.to == schemas.StateFailed && strings.HasPrefix(t.reason, store.QuarantinedReasonPrefix) {
					res.Quarantined++
				}
			}
			// A worker's final report: that worker ran the attempt, and a
			// success had ended with success before it was recorded.
			if worker, ok := strings.CutPrefix(t.operator, "worker:"); ok && t.to.Terminal() || ok && t.to == schemas.StateRetrying {
				k := RunKey{t.instance, t.attempt}
				switch {
				case task[t.instance] != r.task: // the poison writes no ledger
				case !ranOn(k, worker, time.Time{}):
					res.StaleAccepted++
				case t.to == schemas.StateSucceeded && !ranOn(k, worker, t.at):
					res.Untrue++
				}
			}
			prev = t
		}
	}
	slices.SortFunc(successes, func(a, b time.Time) int { return a.Compare(b) })

	// Successes lost: workers the fault did not touch report every run.
	touched := make(map[string]bool)
	for _, c := range crashes {
		touched[c.worker] = true
	}
	final := make(map[int64]instanceRow, len(insts))
	for _, in := range insts {
		final[in.id] = in
	}
	var lostSuccesses []string
	for _, run := range runs {
		in, ok := final[run.Instance]
		if !ok || in.task != r.task || run.End.IsZero() || run.Cancelled || touched[run.Worker] {
			continue
		}
		if in.state != schemas.StateSucceeded || in.attempt != run.Attempt {
			res.SuccessesLost++
			lostSuccesses = append(lostSuccesses, describeLostSuccess(run, in, byInstance[run.Instance])+r.eventsOf(ctx, run.Instance))
		}
	}

	// Side effects done more than once; the poison's runs; the runs a
	// death cut short.
	dead := make(map[string]bool)
	for _, c := range crashes {
		dead[c.worker] = true
	}
	for k, rs := range runsOf {
		switch task[k.Instance] {
		case r.task:
			for _, run := range rs {
				if run.End.IsZero() && dead[run.Worker] {
					res.CutBeside++
				}
			}
		case r.pois:
			res.PoisonRuns += len(rs)
		}
	}
	ended := make(map[int64]int)
	for _, run := range runs {
		if task[run.Instance] == r.task && !run.End.IsZero() && !run.Cancelled {
			ended[run.Instance]++
		}
	}
	for _, n := range ended {
		res.DoubledEffects += max(0, n-1)
	}

	// Recovery.
	var recovery []time.Duration
	cut, held := 0, 0
	if r.sc.CrashRecovery {
		for _, c := range crashes {
			for _, run := range runs {
				// A run of the worker in flight at the fault: a stopped
				// worker's run may end after SIGCONT, too late.
				if run.Worker != c.worker || run.Start.After(c.at) || !run.End.IsZero() && run.End.Before(c.at) {
					continue
				}
				cut++
				if suspects[RunKey{run.Instance, run.Attempt}] {
					held++ // retried, late on purpose
					continue
				}
				if at, ok := redispatched[RunKey{run.Instance, run.Attempt}]; ok {
					recovery = append(recovery, at.Sub(c.at))
				}
			}
		}
	} else {
		for _, f := range faults {
			i, _ := slices.BinarySearchFunc(successes, f.end, func(a, b time.Time) int { return a.Compare(b) })
			if i < len(successes) {
				recovery = append(recovery, successes[i].Sub(f.end))
			}
		}
	}
	res.Recovery = summarize(recovery)

	// The verdict.
	named := func(c drill.Check, what []string) drill.Check {
		if len(what) > 0 {
			c.Observed += ": " + strings.Join(what, "; ")
		}
		return c
	}
	zero := func(name string, n int) drill.Check {
		return drill.Check{Name: name, Expected: "0", Observed: fmt.Sprint(n), Pass: n == 0}
	}
	res.Checks = []drill.Check{
		{Name: "firings made", Expected: "> 0", Observed: fmt.Sprint(res.Fired), Pass: res.Fired > 0},
		named(zero("lost", res.Lost), lost),
		named(zero("stuck", res.Stuck), stuck),
		zero("firings made into more than one instance (extra instances)", res.Doubled),
		named(zero("duplicate executions of a succeeded attempt", res.Duplicates), dups),
		zero("stale reports accepted", res.StaleAccepted),
		zero("successes without their run (untrue outcomes)", res.Untrue),
		named(zero("successes lost (ended runs of untouched workers not recorded)", res.SuccessesLost), lostSuccesses),
		zero("illegal transitions", res.Illegal),
		named(zero("attempts spent without a run (never ran, or cut short by a fault)", res.SpentWithoutRun), spent),
	}
	if r.sc.Fault != nil {
		res.Checks = append(res.Checks, drill.Check{Name: "faults injected", Expected: "> 0", Observed: fmt.Sprint(res.Faults), Pass: res.Faults > 0})
	}
	if r.sc.CrashRecovery {
		bound := r.sb.LeaseTTL() + r.opts.RecoverySlack
		res.Checks = append(res.Checks,
			drill.Check{Name: "attempts cut short by the fault, each retried", Expected: "> 0, all",
				Observed: fmt.Sprintf("%d cut, %d retried, %d held apart as suspects of worker deaths", cut, len(recovery), held),
				Pass:     cut > 0 && len(recovery)+held == cut},
			drill.Check{Name: "crash recovery max", Expected: "≤ " + bound.String(), Observed: res.Recovery.Max.Round(time.Millisecond).String(),
				Pass: res.Recovery.N > 0 && res.Recovery.Max <= bound})
	}
	if r.sc.Stale {
		res.Checks = append(res.Checks, drill.Check{Name: "stale reports refused", Expected: "> 0",
			Observed: fmt.Sprint(res.StaleRefused), Pass: res.StaleRefused > 0})
	}
	if r.sc.Cron {
		res.Checks = append(res.Checks, drill.Check{Name: "cron ticks fired", Expected: "> 0", Observed: fmt.Sprint(cronTicks), Pass: cronTicks > 0})
	}
	if r.sc.NoRetries {
		res.Checks = append(res.Checks, zero("instances retried (a retry storm)", res.Retried))
	}
	if r.sc.Poison {
		var poison int
		for _, in := range insts {
			if in.task == r.pois {
				poison++
			}
		}
		res.Checks = append(res.Checks, drill.Check{Name: "poison instances FAILED by their policy", Expected: "> 0, all",
			Observed: fmt.Sprintf("%d of %d", res.Poisoned, poison), Pass: poison > 0 && res.Poisoned == poison})
	}
	if r.sc.Killer {
		var poison int
		for _, in := range insts {
			if in.task == r.pois {
				poison++
			}
		}
		res.Checks = append(res.Checks,
			drill.Check{Name: "poison instances quarantined (FAILED: quarantined)", Expected: "> 0, all",
				Observed: fmt.Sprintf("%d of %d", res.Quarantined, poison), Pass: poison > 0 && res.Quarantined == poison},
			drill.Check{Name: "suspect events of the poison", Expected: "> 0", Observed: fmt.Sprint(res.Suspects), Pass: res.Suspects > 0},
			drill.Check{Name: "worker deaths the poison caused", Expected: fmt.Sprintf("> 0, ≤ %d a poison (one more a tie)", killerDeaths),
				Observed: fmt.Sprintf("%d deaths, %d poison runs, %d ties", res.WorkerDeaths, res.PoisonRuns, res.Tied),
				Pass:     res.PoisonRuns > 0 && res.PoisonRuns <= killerDeaths*poison+res.Tied},
			drill.Check{Name: "innocent runs cut short beside the poison", Expected: "> 0 (the fault reached neighbours)",
				Observed: fmt.Sprint(res.CutBeside), Pass: res.CutBeside > 0})
	}
	r.mu.Lock()
	res.Checks = append(res.Checks, r.checks...)
	r.mu.Unlock()
	res.Pass = res.Report().Passed()
	return res, nil
}

// killerDeaths is how many workers a poison that kills its process may
// take before the dispatcher quarantines it (its default QuarantineAfter),
// one more for each death it tied with a neighbour's at the quarantine.
const killerDeaths = 3

// ranToEnd reports whether one of the runs rs ended (with success, or
// because its context did).
func ranToEnd(rs []LedgerRun) bool {
	return slices.ContainsFunc(rs, func(r LedgerRun) bool { return !r.End.IsZero() })
}

// legal reports whether t may follow prev (nil: t is the first).
func legal(prev, t *transitionRow) bool {
	if prev == nil {
		// The first transition records the creation: from nothing or CREATED.
		return (t.from == "" || t.from == schemas.StateCreated) && schemas.CanTransition(t.from, t.to) && t.attempt == 1
	}
	if t.from != prev.to || !schemas.CanTransition(t.from, t.to) {
		return false
	}
	if t.from == schemas.StateRetrying && t.to == schemas.StateDispatched {
		return t.attempt == prev.attempt+1
	}
	return t.attempt <= prev.attempt // lower: stale, counted apart
}

// describeRuns says when and where each of the runs rs of one attempt ran,
// for a check that names what it counted.
func describeRuns(instance int64, attempt int, rs []LedgerRun) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		end := "never ended"
		if !r.End.IsZero() {
			end = "ended " + r.End.Format("15:04:05.000")
		}
		parts[i] = fmt.Sprintf("%s from %s, %s", r.Worker, r.Start.Format("15:04:05.000"), end)
	}
	return fmt.Sprintf("instance %d attempt %d ran on %s", instance, attempt, strings.Join(parts, " and "))
}

// describeLostSuccess names a lost success for the check's observation:
// the run, where its instance ended, and the instance's transitions, so a
// failure says which attempt was lost and how.
func describeLostSuccess(run LedgerRun, in instanceRow, ts []transitionRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance %d attempt %d on %s ended %s, recorded %s at attempt %d; transitions:",
		run.Instance, run.Attempt, run.Worker, run.End.UTC().Format("15:04:05.000"), in.state, in.attempt)
	for _, t := range ts {
		fmt.Fprintf(&b, " [%s %s→%s a%d %s %q]", t.at.UTC().Format("15:04:05.000"), t.from, t.to, t.attempt, t.operator, t.reason)
	}
	return b.String()
}

// describeStuck names an instance not ended for the check's observation:
// where it stands, its transitions and the runs of its attempts, so a
// failure says which step never came.
func describeStuck(in instanceRow, ts []transitionRow, runsOf map[RunKey][]LedgerRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance %d (event %s) %s at attempt %d; transitions:", in.id, in.eventID, in.state, in.attempt)
	for _, t := range ts {
		fmt.Fprintf(&b, " [%s %s→%s a%d %s %q]", t.at.UTC().Format("15:04:05.000"), t.from, t.to, t.attempt, t.operator, t.reason)
	}
	for attempt := 1; attempt <= in.attempt; attempt++ {
		if rs := runsOf[RunKey{in.id, attempt}]; len(rs) > 0 {
			b.WriteString("; " + describeRuns(in.id, attempt, rs))
		}
	}
	return b.String()
}

// logsOf quotes the sandbox processes' log lines that name instance in
// (its id or its event id), at most maxLogLines, for a stuck instance's
// observation: which step never came (a publish refused, a batch
// redelivered, a report refused) is in the dispatcher's and the
// executors' logs, which go with the sandbox. "" when none names it.
func (r *run) logsOf(in instanceRow) string {
	files, _ := filepath.Glob(filepath.Join(r.sb.Dir(), "logs", "*.log"))
	marks := []string{fmt.Sprintf(`"instance_id":%d,`, in.id), fmt.Sprintf(`"instance_id":%d}`, in.id),
		fmt.Sprintf("instance_id=%d ", in.id), fmt.Sprintf("instance_id=%d\n", in.id)}
	if in.eventID != "" {
		marks = append(marks, in.eventID)
	}
	var quoted []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(line, m) }) {
				continue
			}
			if len(quoted) == maxLogLines {
				return "; logs: " + strings.Join(quoted, " | ") + " | …"
			}
			line = strings.TrimSpace(line)
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			quoted = append(quoted, filepath.Base(f)+": "+line)
		}
	}
	if len(quoted) == 0 {
		return ""
	}
	return "; logs: " + strings.Join(quoted, " | ")
}

// maxLogLines bounds the log lines logsOf quotes for one instance.
const maxLogLines = 12

// eventsOf names the timeline events of instance id (a refused or stale
// report, a suspect), for a check's observation; "" when it has none.
func (r *run) eventsOf(ctx context.Context, id int64) string {
	rows, err := r.sb.Pool.Query(ctx, `SELECT attempt, kind, operator, reason FROM instance_events WHERE instance_id = $1 ORDER BY id`, id)
	if err != nil {
		return "; events not read: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var attempt int
		var kind, operator, reason string
		if err := rows.Scan(&attempt, &kind, &operator, &reason); err != nil {
			return "; events not read: " + err.Error()
		}
		fmt.Fprintf(&b, " [a%d %s %s %q]", attempt, kind, operator, reason)
	}
	if b.Len() == 0 {
		return "; no events"
	}
	return "; events:" + b.String()
}
