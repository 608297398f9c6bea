package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// fail adds a failed check for a step that could not go on.
func (d *taskDrill) fail(name, expected string, err error) {
	d.report.Expect(name, expected, "drill error: "+err.Error(), false)
}

// plainRuns fires the plain copy Runs times, checks every run succeeded,
// reports the run-time distribution against the timeout, and returns the
// start latencies (fired → started).
func (d *taskDrill) plainRuns(ctx context.Context) []time.Duration {
	const name = "plain runs: succeeded"
	expected := fmt.Sprintf("%d of %d SUCCEEDED", d.opts.Runs, d.opts.Runs)
	ids := make([]int64, 0, d.opts.Runs)
	for range d.opts.Runs {
		id, err := d.fire(ctx, kindBase)
		if err != nil {
			d.fail(name, expected, err)
			return nil
		}
		ids = append(ids, id)
	}
	var runs, lat []time.Duration
	succeeded := 0
	var errs []string
	for _, id := range ids {
		inst, err := d.waitEnd(ctx, id)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if inst.State == schemas.StateSucceeded {
			succeeded++
		} else {
			errs = append(errs, fmt.Sprintf("instance %d %s: %s", id, inst.State, inst.Error))
		}
		if inst.StartedAt != nil {
			lat = append(lat, inst.StartedAt.Sub(inst.FiredAt))
		}
		for k := 1; k <= inst.Attempt; k++ {
			if c, ok := d.callOf(callKey{id, k}); ok && !c.end.IsZero() {
				runs = append(runs, c.end.Sub(c.start))
			}
		}
	}
	observed := fmt.Sprintf("%d of %d SUCCEEDED", succeeded, d.opts.Runs)
	if len(errs) > 0 {
		observed += ": " + strings.Join(errs, "; ")
	}
	d.report.Expect(name, expected, observed, succeeded == d.opts.Runs)
	slices.Sort(runs)
	slices.Sort(lat)
	if len(runs) > 0 {
		p50, p99 := percentile(runs, 0.5), percentile(runs, 0.99)
		d.mu.Lock()
		d.runP50 = p50
		d.mu.Unlock()
		d.report.Fact("run time p50 / p99 / max", fmt.Sprintf("%s / %s / %s (timeout %s)", round(p50), round(p99), round(runs[len(runs)-1]), d.timeout))
		d.report.Add(Check{Name: "run time: p99 against the timeout", Expected: "p99 ≤ 50% of timeout " + d.timeout.String(),
			Observed: fmt.Sprintf("p99 %s = %.1f%% of the timeout", round(p99), 100*float64(p99)/float64(d.timeout)),
			Pass:     p99 <= d.timeout, Warn: p99 > d.timeout/2})
	}
	if len(lat) > 0 {
		d.report.Fact("start latency p50 / p99 (plain runs)", fmt.Sprintf("%s / %s", round(percentile(lat, 0.5)), round(percentile(lat, 0.99))))
	}
	return lat
}

// duplicateDelivery fires the plain copy and, as soon as its handler is
// called, delivers the same attempt a second time to another drill
// executor: the handler must be called once for the attempt.
func (d *taskDrill) duplicateDelivery(ctx context.Context) {
	const name = "duplicate delivery: handler called once"
	const expected = "1 call for the attempt; the instance SUCCEEDED at attempt 1"
	if d.opts.Dispatch == nil {
		d.report.Expect(name, expected, "not exercised: the drill has no NATS connection that may publish dispatch messages (give it a dispatcher's credentials)", false)
		return
	}
	id, err := d.fire(ctx, kindBase)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	key := callKey{id, 1}
	if err := d.awaitStart(ctx, key); err != nil {
		d.fail(name, expected, err)
		return
	}
	c, _ := d.callOf(key)
	target := d.liveExecutor(c.worker)
	if target == nil {
		d.fail(name, expected, errors.New("no second drill executor to deliver the attempt to"))
		return
	}
	inst, err := d.opts.Client.GetInstance(ctx, id)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	seq, err := d.redeliver(ctx, inst, target.id)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	end, err := d.waitEnd(ctx, id)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	if err := d.waitConsumed(ctx, target.id, seq); err != nil {
		d.fail(name, expected, err)
		return
	}
	c, _ = d.callOf(key)
	d.report.Expect(name, expected, fmt.Sprintf("%d call(s) for attempt 1 (delivered to %s and %s); the instance %s at attempt %d",
		c.calls, c.worker, target.id, end.State, end.Attempt), c.calls == 1 && end.State == schemas.StateSucceeded && end.Attempt == 1)
}

// redeliver publishes the dispatch of inst's attempt again, to worker's own
// queue, under a message id of its own (a redelivery, not a retried
// publish the stream would drop), and returns its stream sequence.
func (d *taskDrill) redeliver(ctx context.Context, inst schemas.Instance, worker string) (uint64, error) {
	msg := schemas.Dispatch{InstanceID: inst.ID, Task: inst.Task, TaskVersion: inst.TaskVersion, Handler: d.def.Execution.Handler,
		Attempt: inst.Attempt, MaxAttempts: inst.MaxAttempts, EventID: inst.EventID, Priority: inst.Priority, Payload: inst.Payload,
		TimeoutMS: d.timeout.Milliseconds(), FiredAt: inst.FiredAt, DispatchedAt: time.Now(), RunID: inst.RunID,
		MutexTemplate: d.def.Concurrency.MutexKey, Pool: inst.Pool, Protocol: schemas.ExecutorProtocol}
	m, err := streams.NewMsg(d.opts.Topology.DispatchWorker(worker), fmt.Sprintf("drill-dup-%d-%d", inst.ID, inst.Attempt), msg)
	if err != nil {
		return 0, err
	}
	js, err := jetstream.New(d.opts.Dispatch)
	if err != nil {
		return 0, err
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("deliver attempt %d of instance %d again: %w", inst.Attempt, inst.ID, err)
	}
	return ack.Sequence, nil
}

// waitConsumed waits until worker's own queue has taken (acked or
// terminated) the message at seq.
func (d *taskDrill) waitConsumed(ctx context.Context, worker string, seq uint64) error {
	js, err := jetstream.New(d.opts.Dispatch)
	if err != nil {
		return err
	}
	cfg := d.opts.Topology.WorkerConsumer(worker)
	deadline := time.Now().Add(d.opts.Wait)
	for {
		cons, err := js.Consumer(ctx, d.opts.Topology.DispatchStream(), cfg.Durable)
		if err == nil {
			info, err := cons.Info(ctx)
			if err == nil && info.AckFloor.Stream >= seq {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the second delivery was not taken by %s within %s", worker, d.opts.Wait)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// cancellation fires the plain copy, cancels it once its handler runs and
// checks the handler returned within the grace.
func (d *taskDrill) cancellation(ctx context.Context) {
	const name = "cancellation: honoured within the grace"
	expected := "the handler returns ≤ " + d.opts.Grace.String() + " after its context ends"
	id, err := d.fire(ctx, kindBase)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	key := callKey{id, 1}
	if err := d.awaitStart(ctx, key); err != nil {
		d.fail(name, expected, err)
		return
	}
	// A quarter into a plain run, cancel the instance through the API
	// and, as its control message would (which a loaded machine may
	// deliver late), end the handler's context. A quarter, not half: on
	// a loaded machine the wait overshoots, and a cancel that comes after
	// the handler returned exercises nothing.
	d.mu.Lock()
	early := d.runP50 / 4
	d.mu.Unlock()
	if err := sleep(ctx, early); err != nil {
		d.fail(name, expected, err)
		return
	}
	cancelled := make(chan error, 1)
	go func() {
		_, err := d.opts.Client.Cancel(ctx, id, "ax drill: cancellation")
		var apiErr *wire.Error
		if errors.As(err, &apiErr) && apiErr.Status == 409 {
			err = nil // it ended already
		}
		cancelled <- err
	}()
	d.mu.Lock()
	c := d.calls[key]
	cancel := c.cancel
	if cancel != nil && c.ctxDone.IsZero() && c.end.IsZero() {
		// Noted here, not by the context's AfterFunc, which may run
		// after a prompt handler returned.
		c.ctxDone = time.Now()
	}
	d.mu.Unlock()
	if cancel != nil {
		cancel(errors.New("ax drill: cancelled"))
	}
	if err := <-cancelled; err != nil {
		d.fail(name, expected, err)
		return
	}
	select {
	case <-c.returned:
	case <-time.After(d.opts.Wait):
	case <-ctx.Done():
	}
	got, _ := d.callOf(key)
	var observed string
	pass := false
	switch {
	case got.end.IsZero():
		observed = "still running " + d.opts.Wait.String() + " after the cancel"
	case got.ctxDone.IsZero() || !got.ctxDone.Before(got.end):
		// Nothing to judge: the handler had ended. Say so rather than pass.
		d.report.Add(Check{Name: name, Expected: expected, Info: true,
			Observed: fmt.Sprintf("not exercised: the handler returned in %s, before the cancel reached it", round(got.end.Sub(got.start)))})
		_, _ = d.waitEnd(ctx, id)
		return
	default:
		took := got.end.Sub(got.ctxDone)
		observed = fmt.Sprintf("returned %s after its context ended", round(took))
		pass = took <= d.opts.Grace
	}
	if !pass && !got.end.IsZero() {
		observed += " (it ignores cancellation: select on ctx.Done() in its waits)"
	}
	d.report.Expect(name, expected, observed, pass)
	_, _ = d.waitEnd(ctx, id)
}

// databaseJitter fires the jitter copy, whose reports the dispatcher
// refuses a few times: nothing may be failed, doubled or lost.
func (d *taskDrill) databaseJitter(ctx context.Context) {
	const injected = "database jitter: reports refused and redelivered"
	const name = "database jitter: nothing failed, doubled or lost"
	const expected = "SUCCEEDED at attempt 1, the handler called once"
	id, err := d.fire(ctx, kindJitter)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	inst, err := d.waitEnd(ctx, id)
	faults := 0
	for _, e := range inst.Events {
		if strings.HasPrefix(e.Kind, "drill_report_fault") {
			faults++
		}
	}
	d.report.Expect(injected, fmt.Sprintf("each report refused on its first %d deliveries", schemas.DrillReportFaults),
		fmt.Sprintf("%d report(s) refused (instance %d's timeline)%s", faults, id,
			map[bool]string{true: "", false: ": run the dispatcher with --drill-faults (ax dev does)"}[faults > 0]), faults > 0)
	if err != nil {
		d.fail(name, expected, err)
		return
	}
	calls := 0
	for k := 1; k <= inst.Attempt; k++ {
		if c, ok := d.callOf(callKey{id, k}); ok {
			calls += c.calls
		}
	}
	d.report.Expect(name, expected, fmt.Sprintf("%s at attempt %d, the handler called %d time(s)", inst.State, inst.Attempt, calls),
		inst.State == schemas.StateSucceeded && inst.Attempt == 1 && calls == 1)
}

// nodeCrash fires the crash copy, crashes the drill executor running its
// first attempt mid-run, and checks the retry started in time on another
// and the instance ended as the policy says; then judges idempotency under
// the re-run when the handler declares a check.
func (d *taskDrill) nodeCrash(ctx context.Context) {
	const retried = "node crash: retry started in time"
	const ended = "node crash: ended as the policy says"
	policy := d.def.Execution.Retry
	bound := d.opts.LeaseTTL + policy.Initial() + time.Second
	expectedRetry := fmt.Sprintf("attempt 2 RUNNING ≤ %s after the crash (lease TTL %s + backoff %s + 1s)", bound, d.opts.LeaseTTL, policy.Initial())
	wantState, wantAttempt := schemas.StateSucceeded, 2
	if max(policy.MaxAttempts, 1) < 2 {
		wantState, wantAttempt = schemas.StateFailed, 1
		expectedRetry = "no retry: max_attempts is 1"
	}
	id, err := d.fire(ctx, kindCrash)
	if err != nil {
		d.fail(retried, expectedRetry, err)
		return
	}
	inst, err := d.waitEnd(ctx, id)
	d.mu.Lock()
	crashAt, crashTo := d.crashAt, d.crashTo
	d.mu.Unlock()
	if crashAt.IsZero() {
		d.fail(retried, expectedRetry, fmt.Errorf("instance %d's first attempt never ran on a drill executor", id))
		return
	}
	d.report.Fact("node crash", fmt.Sprintf("worker crashed %s into attempt 1 of instance %d", round(crashTo), id))
	if wantAttempt == 2 {
		var at time.Time
		for _, tr := range inst.Transitions {
			if tr.Attempt == 2 && tr.To == schemas.StateRunning {
				at = tr.At
				break
			}
		}
		if at.IsZero() {
			d.report.Expect(retried, expectedRetry, "attempt 2 never ran", false)
		} else {
			took := at.Sub(crashAt)
			d.report.Expect(retried, expectedRetry, fmt.Sprintf("attempt 2 RUNNING %s after the crash", round(took)), took <= bound)
		}
	}
	observed := fmt.Sprintf("%s at attempt %d", inst.State, inst.Attempt)
	if err != nil {
		observed = err.Error()
	}
	d.report.Expect(ended, fmt.Sprintf("%s at attempt %d", wantState, wantAttempt), observed,
		err == nil && inst.State == wantState && inst.Attempt == wantAttempt)
	d.idempotency(ctx, inst)
	d.fenceCheck(inst)
}

// idempotency judges the handler's declared idempotency check on the
// crashed instance, whose first attempt the crash cut off and whose
// second ran the handler again.
func (d *taskDrill) idempotency(ctx context.Context, inst schemas.Instance) {
	const name = "idempotency: under a re-run"
	checker, ok := d.handler.(IdempotencyChecker)
	if !ok {
		d.report.Add(Check{Name: name, Expected: "the side effect applied once", Observed: "not verified: the handler declares no idempotency check (drill.IdempotencyChecker)", Info: true})
		return
	}
	// The crashed attempt's handler may still be running in this process.
	if c, ok := d.callOf(callKey{inst.ID, 1}); ok {
		select {
		case <-c.returned:
		case <-time.After(d.opts.Grace):
		}
	}
	n, err := checker.AppliedEffects(ctx, inst)
	if err != nil {
		d.fail(name, "the side effect applied once", err)
		return
	}
	runs := 0
	for k := 1; k <= inst.Attempt; k++ {
		if c, ok := d.callOf(callKey{inst.ID, k}); ok {
			runs += c.calls
		}
	}
	d.report.Expect(name, "the side effect applied once", fmt.Sprintf("applied %d time(s) over %d run(s) of the handler", n, runs), n == 1)
}

// retryStorm fires the storm copy, whose first StormFailures attempts fail,
// and plain firings beside it: backoff must follow the policy, the cap
// hold, and the plain firings' start latency stay within a bound.
func (d *taskDrill) retryStorm(ctx context.Context, plainLat []time.Duration) {
	const gaps = "retry storm: backoff follows the policy"
	const capName = "retry storm: attempts and interval capped"
	const latName = "retry storm: other firings' start latency"
	policy := d.def.Execution.Retry
	maxAttempts := max(policy.MaxAttempts, 1)
	wantState, wantAttempt := schemas.StateSucceeded, d.opts.StormFailures+1
	if maxAttempts <= d.opts.StormFailures {
		wantState, wantAttempt = schemas.StateFailed, maxAttempts
	}
	id, err := d.fire(ctx, kindStorm)
	if err != nil {
		d.fail(gaps, "", err)
		return
	}
	// Plain firings while the storm runs.
	var probes []int64
	for range d.opts.Runs {
		pid, err := d.fire(ctx, kindBase)
		if err != nil {
			d.fail(latName, "", err)
			return
		}
		probes = append(probes, pid)
		if err := sleep(ctx, min(policy.Initial(), time.Second)/2); err != nil {
			break
		}
	}
	inst, err := d.waitEnd(ctx, id)
	if err != nil {
		d.fail(gaps, "", err)
		return
	}
	// The gap before attempt k+1: from attempt k's RETRYING to k+1's
	// DISPATCHED, against backoff(k) less up to 10% jitter.
	retrying := map[int]time.Time{}
	dispatched := map[int]time.Time{}
	for _, tr := range inst.Transitions {
		switch tr.To {
		case schemas.StateRetrying:
			retrying[tr.Attempt] = tr.At
		case schemas.StateDispatched:
			if _, ok := dispatched[tr.Attempt]; !ok {
				dispatched[tr.Attempt] = tr.At
			}
		}
	}
	var observed []string
	ok := true
	over := false
	for k := 1; k < inst.Attempt; k++ {
		from, to := retrying[k], dispatched[k+1]
		if from.IsZero() || to.IsZero() {
			observed = append(observed, fmt.Sprintf("attempt %d→%d: no transition", k, k+1))
			ok = false
			continue
		}
		gap, want := to.Sub(from), policyBackoff(policy, k)
		low := time.Duration(float64(want)*0.9) - 100*time.Millisecond
		if gap < low || gap > want+gapSlack(want) {
			ok = false
		}
		if gap > policy.Max()+gapSlack(policy.Max()) {
			over = true
		}
		observed = append(observed, fmt.Sprintf("%s (backoff %s)", round(gap), round(want)))
	}
	if len(observed) == 0 {
		observed = append(observed, "no retry")
	}
	d.report.Expect(gaps, "each gap from RETRYING to the next DISPATCHED within [backoff − 10% jitter − 0.1s, backoff + max(2s, backoff/2)]", strings.Join(observed, ", "), ok && inst.Attempt > 1 || maxAttempts == 1)
	d.report.Expect(capName, fmt.Sprintf("%s at attempt %d of max %d; no gap over max_interval %s + max(2s, half of it)", wantState, wantAttempt, maxAttempts, policy.Max()),
		fmt.Sprintf("%s at attempt %d", inst.State, inst.Attempt), inst.State == wantState && inst.Attempt == wantAttempt && inst.Attempt <= maxAttempts && !over)

	var lat []time.Duration
	for _, pid := range probes {
		p, err := d.waitEnd(ctx, pid)
		if err == nil && p.StartedAt != nil {
			lat = append(lat, p.StartedAt.Sub(p.FiredAt))
		}
	}
	if len(lat) == 0 || len(plainLat) == 0 {
		d.report.Expect(latName, "", "no start latency measured", false)
		return
	}
	slices.Sort(lat)
	base, during := percentile(plainLat, 0.99), percentile(lat, 0.99)
	d.report.Expect(latName, fmt.Sprintf("p99 ≤ %s: the plain runs' p99 %s × 3 or + 1s", round(latencyBound(base)), round(base)),
		fmt.Sprintf("p99 %s over %d firings", round(during), len(lat)), during <= latencyBound(base))
}

// policyBackoff is the wait the dispatcher takes before the attempt after
// failed under p, before jitter (see docs/architecture.md): fixed waits
// the initial interval, linear initial × n, exp initial × 2^(n-1), each
// capped at the maximum.
func policyBackoff(p schemas.Retry, failed int) time.Duration {
	initial, maxWait := p.Initial(), p.Max()
	var d time.Duration
	switch p.Backoff {
	case schemas.BackoffLinear:
		d = initial * time.Duration(failed)
	case schemas.BackoffExponential:
		d = initial << (failed - 1)
		if failed > 40 || d < 0 {
			d = maxWait
		}
	default:
		d = initial
	}
	return min(d, maxWait)
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// round shortens d for a table cell.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// awaitStart waits until a drill executor calls the handler for key's
// attempt, for at most the drill's Wait.
func (d *taskDrill) awaitStart(ctx context.Context, key callKey) error {
	select {
	case <-d.startedCh(key):
		return nil
	case <-time.After(d.opts.Wait):
		return fmt.Errorf("instance %d never started on a drill executor", key.instance)
	case <-ctx.Done():
		return ctx.Err()
	}
}
