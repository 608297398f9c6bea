package drill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// Pool is the executor pool of a drill's task copies: only the drill's
// own executors serve it, so that no real executor runs a drill's attempts
// and no drill executor runs real work. Run one task drill at a time per
// installation.
const Pool = "drill"

// IdempotencyChecker is what a handler implements to declare how a drill
// verifies it is idempotent under a re-run: AppliedEffects says how many
// times the handler's side effect was applied for the instance (1 for an
// idempotent handler however often the instance's attempts ran; the
// instance's event id tells it from an instance of another installation
// with the same id). A handler that does not implement it is reported
// "not verified".
type IdempotencyChecker interface {
	AppliedEffects(ctx context.Context, inst schemas.Instance) (int, error)
}

// TaskOptions configures [Task]. Zero fields take the stated defaults.
type TaskOptions struct {
	// Task names the task to drill. Required.
	Task string
	// Client talks to the AX API, with a token that may apply tasks, fire
	// and cancel (operator or admin). Required.
	Client *api.Client
	// Connect opens a NATS connection for one drill executor, with an
	// executor's credentials. Each executor gets its own, so that a node
	// crash closes one. Required.
	Connect func(name string) (*nats.Conn, error)
	// Dispatch is a NATS connection allowed to publish to the dispatch
	// subjects (a dispatcher's), used to deliver an attempt a second
	// time. Nil skips the duplicate-delivery check, which then fails.
	Dispatch *nats.Conn
	// Topology names the subjects (default streams.Default()).
	Topology streams.Topology
	// Payload is the payload of every firing (default none).
	Payload json.RawMessage
	// Runs is how many plain runs measure the handler's run time and the
	// start latency (default 3).
	Runs int
	// LeaseTTL is the installation's lease TTL (default
	// streams.DefaultLeaseTTL): a crashed attempt's retry must start
	// within it, the backoff and 1 s.
	LeaseTTL time.Duration
	// Grace is how soon after its cancel a handler must return (default
	// 5 s, the dispatcher's default timeout grace).
	Grace time.Duration
	// StormFailures is how many attempts in a row the retry storm fails
	// (default 3).
	StormFailures int
	// Wait bounds the wait for each instance to end (default 2 min plus
	// the task's retries' backoff).
	Wait time.Duration
	// Logger receives the drill executors' log lines (default: none).
	Logger zerolog.Logger
}

// The kinds of task copy a drill applies; each is its own task, so that a
// drill executor knows what to inject from the task name alone.
const (
	kindBase   = "run"
	kindCrash  = "crash"
	kindJitter = "jitter"
	kindStorm  = "storm"
)

// startLatencySlack is how much a retry storm may add to other firings'
// start latency p99 over the plain runs' before the check fails.
const startLatencySlack = time.Second

// Task drills one task on a running AX: it applies copies of the task
// under the drill's pool (task type drill), runs two drill executors
// serving mux's handlers there, and fires the copies with the four faults
// injected: node crash, database jitter, retry storm and duplicate
// delivery, plus a cancellation. It returns the verdict; an error only
// when the drill could not run (bad options, the API or NATS not there).
// It blocks until every instance it fired ended or its wait ran out.
func Task(ctx context.Context, opts TaskOptions, mux *executor.Mux) (*Report, error) {
	if opts.Task == "" {
		return nil, errors.New("drill task: name the task to drill")
	}
	if opts.Client == nil || opts.Connect == nil {
		return nil, errors.New("drill task: TaskOptions.Client and TaskOptions.Connect are required")
	}
	if mux == nil {
		return nil, errors.New("drill task: the mux of the handlers to drill is required")
	}
	if opts.Topology == (streams.Topology{}) {
		opts.Topology = streams.Default()
	}
	if opts.Runs <= 0 {
		opts.Runs = 3
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = streams.DefaultLeaseTTL
	}
	if opts.Grace <= 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.StormFailures <= 0 {
		opts.StormFailures = 3
	}
	info, err := opts.Client.GetTask(ctx, opts.Task)
	if err != nil {
		return nil, fmt.Errorf("drill task %s: read the task: %w", opts.Task, err)
	}
	def := info.Task
	if schemas.IsDrillTaskType(def.TaskType) {
		return nil, fmt.Errorf("drill task %s: it is a drill's copy (task type %q); drill the task it copies", opts.Task, def.TaskType)
	}
	h, ok := mux.Handler(def.Execution.Handler)
	if !ok {
		return nil, fmt.Errorf("drill task %s: it runs handler %q, which the drill does not link (it links %s); link it as your executor does and call drill.Task with that mux",
			opts.Task, def.Execution.Handler, strings.Join(mux.Names(), ", "))
	}
	timeout, err := time.ParseDuration(string(def.Execution.Timeout))
	if err != nil {
		return nil, fmt.Errorf("drill task %s: read its timeout %q: %w", opts.Task, def.Execution.Timeout, err)
	}
	if opts.Wait <= 0 {
		opts.Wait = 2*time.Minute + time.Duration(max(def.Execution.Retry.MaxAttempts, 1))*def.Execution.Retry.Max()
	}
	d := &taskDrill{opts: opts, def: def, timeout: timeout, handler: h, names: map[string]string{},
		calls: map[callKey]*call{}, started: map[callKey]chan struct{}{}}
	d.report.Title = "ax drill task " + opts.Task
	for _, kind := range []string{kindBase, kindCrash, kindJitter, kindStorm} {
		name, err := d.apply(ctx, kind)
		if err != nil {
			return nil, err
		}
		d.names[kind] = name
	}
	if err := d.startExecutors(ctx, mux); err != nil {
		return nil, err
	}
	defer d.stopExecutors()
	d.run(ctx)
	return &d.report, nil
}

// callKey names one attempt.
type callKey struct {
	instance int64
	attempt  int
}

// call is what the drill executors saw of one attempt.
type call struct {
	worker   string
	calls    int // how often the handler was called for the attempt
	start    time.Time
	end      time.Time // zero while the handler runs
	err      error
	ctxDone  time.Time // when the handler's context ended, zero if it did not
	returned chan struct{}
}

// drillExecutor is one executor the drill runs, on its own connection.
type drillExecutor struct {
	id     string
	nc     *nats.Conn
	svc    *executor.Service
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
	// crashed is closed when the drill crashed it.
	crashed   chan struct{}
	crashOnce sync.Once
}

type taskDrill struct {
	opts    TaskOptions
	def     *schemas.Task
	timeout time.Duration
	handler executor.Handler
	names   map[string]string // task copy by kind
	report  Report

	mu        sync.Mutex
	calls     map[callKey]*call
	started   map[callKey]chan struct{}
	executors []*drillExecutor
	crashAt   time.Time     // when the node crash hit
	crashTo   time.Duration // the share of the run time the crash waited
	runP50    time.Duration // the plain runs' median run time
}

// copyName returns the name of the drill's copy of kind: drill-<kind>-<task>,
// or a hash of the task name when that is too long for a task name.
func copyName(kind, task string) string {
	name := "drill-" + kind + "-" + task
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(task))
	return "drill-" + kind + "-" + task[:64-len("drill--")-len(kind)-13] + "-" + hex.EncodeToString(sum[:6])
}

// apply applies the drill's copy of kind of the task: its execution and
// concurrency, no cron trigger, no chain, the drill's pool.
func (d *taskDrill) apply(ctx context.Context, kind string) (string, error) {
	c := *d.def
	c.TaskName = copyName(kind, d.def.TaskName)
	c.TaskType = schemas.DrillTaskType
	if kind == kindJitter {
		c.TaskType = schemas.DrillJitterTaskType
	}
	c.Description = fmt.Sprintf("ax drill task %s: its %s drill (safe to delete)", d.def.TaskName, kind)
	c.Triggers = nil
	c.After = nil
	c.Dispatch = schemas.DispatchPolicy{Tags: []string{Pool}}
	c.MinWorkerVersion = ""
	c.Execution.Shards = 0
	body, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("drill task %s: encode its %s copy: %w", d.def.TaskName, kind, err)
	}
	if _, err := d.opts.Client.ApplyTask(ctx, body, "application/json"); err != nil {
		return "", fmt.Errorf("drill task %s: apply its %s copy %s: %w", d.def.TaskName, kind, c.TaskName, err)
	}
	return c.TaskName, nil
}

// startExecutors starts two drill executors serving the drill's pool.
func (d *taskDrill) startExecutors(ctx context.Context, mux *executor.Mux) error {
	for range 2 {
		if _, err := d.startExecutor(ctx, mux); err != nil {
			d.stopExecutors()
			return err
		}
	}
	return nil
}

func (d *taskDrill) startExecutor(ctx context.Context, mux *executor.Mux) (*drillExecutor, error) {
	d.mu.Lock()
	n := len(d.executors)
	d.mu.Unlock()
	x := &drillExecutor{id: fmt.Sprintf("drill-%s-%d", d.def.TaskName, n), done: make(chan struct{}), crashed: make(chan struct{})}
	nc, err := d.opts.Connect(x.id)
	if err != nil {
		return nil, fmt.Errorf("drill task %s: connect the drill executor to NATS: %w", d.def.TaskName, err)
	}
	x.nc = nc
	wrapped := executor.NewMux()
	for _, name := range mux.Names() {
		h, _ := mux.Handler(name)
		wrapped.Handle(name, d.wrap(x, h))
	}
	svc, err := executor.New(executor.Options{Conn: nc, Topology: d.opts.Topology, WorkerID: x.id, Pools: []string{Pool},
		Mux: wrapped, Logger: d.opts.Logger, ShutdownTimeout: time.Second, IdleWait: 200 * time.Millisecond})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("drill task %s: %w", d.def.TaskName, err)
	}
	x.svc = svc
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	x.cancel = cancel
	go func() {
		defer close(x.done)
		x.err = svc.Run(runCtx)
	}()
	select {
	case <-svc.Ready():
	case <-x.done:
		nc.Close()
		return nil, fmt.Errorf("drill task %s: the drill executor stopped before it was ready: %v (its NATS user must be allowed to serve pool %q)", d.def.TaskName, x.err, Pool)
	case <-ctx.Done():
		cancel()
		nc.Close()
		return nil, ctx.Err()
	}
	d.mu.Lock()
	d.executors = append(d.executors, x)
	d.mu.Unlock()
	return x, nil
}

// stopExecutors stops every drill executor that still runs.
func (d *taskDrill) stopExecutors() {
	d.mu.Lock()
	xs := slices.Clone(d.executors)
	d.mu.Unlock()
	for _, x := range xs {
		x.cancel()
	}
	for _, x := range xs {
		select {
		case <-x.done:
		case <-time.After(10 * time.Second):
		}
		x.nc.Close()
	}
}

// crash crashes x as a node crash would: its connection closes at once, so
// that it reports nothing more, renews no lease and sends no heartbeat.
func (d *taskDrill) crash(x *drillExecutor) {
	x.crashOnce.Do(func() {
		d.mu.Lock()
		d.crashAt = time.Now()
		d.mu.Unlock()
		x.nc.Close()
		close(x.crashed)
		x.cancel()
	})
}

// liveExecutor returns a drill executor other than not that was not crashed.
func (d *taskDrill) liveExecutor(not string) *drillExecutor {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.executors {
		select {
		case <-x.crashed:
			continue
		default:
		}
		if x.id != not {
			return x
		}
	}
	return nil
}

// wrap returns h as x runs it: it records each call and injects the
// faults of the drill copy the attempt belongs to.
func (d *taskDrill) wrap(x *drillExecutor, h executor.Handler) executor.Handler {
	return executor.HandlerFunc(func(ctx context.Context, t *executor.Task) (any, error) {
		key := callKey{t.InstanceID, t.Attempt}
		c := d.noteCall(key, x.id)
		switch {
		case t.Name == d.names[kindStorm] && t.Attempt <= d.opts.StormFailures:
			// The handler's dependency times out: the attempt fails
			// without the handler running.
			err := fmt.Errorf("drill: retry storm: the dependency timed out (injected failure %d of %d)", t.Attempt, d.opts.StormFailures)
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			d.endCall(c, err)
			return nil, err
		case t.Name == d.names[kindCrash] && t.Attempt == 1:
			return d.crashMidRun(ctx, x, h, t, c)
		}
		out, err := d.call(ctx, h, t, c)
		return out, err
	})
}

// call runs the handler for c, noting when its context ends.
func (d *taskDrill) call(ctx context.Context, h executor.Handler, t *executor.Task, c *call) (any, error) {
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		c.ctxDone = time.Now()
		d.mu.Unlock()
	})
	defer stop()
	out, err := h.HandleTask(ctx, t)
	d.endCall(c, err)
	return out, err
}

// crashMidRun runs the handler and crashes x after a random share of the
// plain runs' median run time, or as soon as the handler returns if that
// is sooner: either way before the attempt is reported.
func (d *taskDrill) crashMidRun(ctx context.Context, x *drillExecutor, h executor.Handler, t *executor.Task, c *call) (any, error) {
	d.mu.Lock()
	wait := time.Duration((0.3 + 0.5*rand.Float64()) * float64(d.runP50))
	d.crashTo = wait
	d.mu.Unlock()
	go func() { _, _ = d.call(ctx, h, t, c) }()
	select {
	case <-time.After(wait):
	case <-c.returned:
	}
	d.crash(x)
	return nil, errors.New("drill: node crash")
}

func (d *taskDrill) noteCall(key callKey, worker string) *call {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.calls[key]
	if !ok {
		c = &call{worker: worker, returned: make(chan struct{})}
		d.calls[key] = c
	}
	c.calls++
	if c.calls == 1 {
		c.start = time.Now()
		if ch, ok := d.started[key]; ok {
			close(ch)
		} else {
			ch := make(chan struct{})
			close(ch)
			d.started[key] = ch
		}
	}
	return c
}

func (d *taskDrill) endCall(c *call, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.end.IsZero() {
		c.end, c.err = time.Now(), err
		close(c.returned)
	}
}

// startedCh returns a channel closed once the handler was called for key.
func (d *taskDrill) startedCh(key callKey) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.started[key]
	if !ok {
		ch = make(chan struct{})
		d.started[key] = ch
	}
	return ch
}

func (d *taskDrill) callOf(key callKey) (call, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.calls[key]
	if !ok {
		return call{}, false
	}
	return *c, true
}

// fire fires the copy of kind and returns its instance id.
func (d *taskDrill) fire(ctx context.Context, kind string) (int64, error) {
	res, err := d.opts.Client.Fire(ctx, d.names[kind], api.FireRequest{Payload: d.opts.Payload, Operator: "ax drill"})
	if err != nil {
		return 0, fmt.Errorf("fire %s: %w", d.names[kind], err)
	}
	if res.InstanceID != 0 {
		return res.InstanceID, nil
	}
	deadline := time.Now().Add(d.opts.Wait)
	for {
		inst, err := d.opts.Client.InstanceByEvent(ctx, d.names[kind], res.EventID)
		if err == nil {
			return inst.ID, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("fire %s: no instance for event %s after %s: %w", d.names[kind], res.EventID, d.opts.Wait, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// waitEnd waits for instance id to end, up to the drill's wait, and
// returns it as last read.
func (d *taskDrill) waitEnd(ctx context.Context, id int64) (schemas.Instance, error) {
	deadline := time.Now().Add(d.opts.Wait)
	for {
		inst, err := d.opts.Client.GetInstance(ctx, id)
		if err == nil && inst.State.Terminal() {
			return inst, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return inst, fmt.Errorf("instance %d: %w", id, err)
			}
			return inst, fmt.Errorf("instance %d still %s after %s", id, inst.State, d.opts.Wait)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return inst, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs the drill's steps in order, each adding its checks.
func (d *taskDrill) run(ctx context.Context) {
	lat := d.plainRuns(ctx)
	d.duplicateDelivery(ctx)
	d.cancellation(ctx)
	d.databaseJitter(ctx)
	d.nodeCrash(ctx)
	d.retryStorm(ctx, lat)
}

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
	select {
	case <-d.startedCh(key):
	case <-time.After(d.opts.Wait):
		d.fail(name, expected, fmt.Errorf("instance %d never started on a drill executor", id))
		return
	case <-ctx.Done():
		d.fail(name, expected, ctx.Err())
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
		MutexTemplate: d.def.Concurrency.MutexKey}
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
	select {
	case <-d.startedCh(key):
	case <-time.After(d.opts.Wait):
		d.fail(name, expected, fmt.Errorf("instance %d never started on a drill executor", id))
		return
	case <-ctx.Done():
		d.fail(name, expected, ctx.Err())
		return
	}
	if _, err := d.opts.Client.Cancel(ctx, id, "ax drill: cancellation"); err != nil {
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.Status != 409 {
			d.fail(name, expected, err)
			return
		}
	}
	c, _ := d.callOf(key)
	select {
	case <-c.returned:
	case <-time.After(d.opts.Wait):
	case <-ctx.Done():
	}
	c, _ = d.callOf(key)
	var observed string
	pass := false
	switch {
	case c.end.IsZero():
		observed = "still running " + d.opts.Wait.String() + " after the cancel"
	case c.ctxDone.IsZero() || !c.ctxDone.Before(c.end):
		observed = fmt.Sprintf("returned in %s, before the cancel reached it", round(c.end.Sub(c.start)))
		pass = true
	default:
		took := c.end.Sub(c.ctxDone)
		observed = fmt.Sprintf("returned %s after its context ended", round(took))
		pass = took <= d.opts.Grace
	}
	if !pass && !c.end.IsZero() {
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
	const slack = time.Second
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
		if gap < low || gap > want+slack {
			ok = false
		}
		if gap > policy.Max()+slack {
			over = true
		}
		observed = append(observed, fmt.Sprintf("%s (backoff %s)", round(gap), round(want)))
	}
	if len(observed) == 0 {
		observed = append(observed, "no retry")
	}
	d.report.Expect(gaps, fmt.Sprintf("each gap from RETRYING to the next DISPATCHED within [backoff − 10%% jitter − 0.1s, backoff + %s]", slack), strings.Join(observed, ", "), ok && inst.Attempt > 1 || maxAttempts == 1)
	d.report.Expect(capName, fmt.Sprintf("%s at attempt %d of max %d; no gap over max_interval %s", wantState, wantAttempt, maxAttempts, policy.Max()),
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
	d.report.Expect(latName, fmt.Sprintf("p99 ≤ plain runs' p99 %s + %s", round(base), startLatencySlack),
		fmt.Sprintf("p99 %s over %d firings", round(during), len(lat)), during <= base+startLatencySlack)
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
