package drill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
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
	Client *apiclient.Client
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
	// Keep leaves the drill's task copies, its executors' consumers and
	// their keys in place when it ends, to inspect them; by default the
	// drill removes them (see [RemoveTasks]).
	Keep bool
}

// The kinds of task copy a drill applies; each is its own task, so that a
// drill executor knows what to inject from the task name alone.
const (
	kindBase   = "run"
	kindCrash  = "crash"
	kindJitter = "jitter"
	kindStorm  = "storm"
)

// latencyBound is how high a retry storm may raise other firings' start
// latency p99 over the plain runs' p99 base before the check fails: three
// times it, or 1 s more, whichever is higher (a shared, loaded machine
// moves latency by a few hundred milliseconds on its own).
func latencyBound(base time.Duration) time.Duration { return max(3*base, base+time.Second) }

// gapSlack is how much later than its backoff a retry may start: the
// schedule fires up to 250 ms late and the dispatcher and a worker take
// their turns; 2 s, or half the backoff when that is longer.
func gapSlack(backoff time.Duration) time.Duration { return max(2*time.Second, backoff/2) }

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
	if opts.Topology.IsZero() {
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
			d.end(ctx)
			return nil, err
		}
		d.names[kind] = name
	}
	if err := d.startExecutors(ctx, mux); err != nil {
		d.end(ctx)
		return nil, err
	}
	d.run(ctx)
	d.end(ctx)
	return &d.report, nil
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

// fire fires the copy of kind and returns its instance id, waiting up to
// the drill's wait for the dispatcher to create it.
func (d *taskDrill) fire(ctx context.Context, kind string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Wait)
	defer cancel()
	id, err := d.opts.Client.FireInstance(ctx, d.names[kind], wire.FireRequest{Payload: d.opts.Payload, Operator: "ax drill"})
	if err != nil {
		return 0, err
	}
	return id, nil
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
