package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
)

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
	// cancel ends the handler's context, as a cancel's control message
	// does; nil until the handler is called.
	cancel context.CancelCauseFunc
	fence  uint64 // the attempt's fencing token (fencecheck.go)
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
	// The drilled handler only: a queue is a consumer per pool, priority
	// and handler, and the drill removes its own when it ends.
	wrapped := executor.NewMux()
	wrapped.Handle(d.def.Execution.Handler, d.wrap(x, d.handler))
	svc, err := executor.New(executor.Options{Conn: nc, Topology: d.opts.Topology, WorkerID: x.id, Pools: []string{Pool},
		Mux: wrapped, Logger: slog.New(zerolog.NewSlogHandler(d.opts.Logger)), ShutdownTimeout: time.Second, IdleWait: 200 * time.Millisecond})
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
	return executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
		key := callKey{t.InstanceID, t.Attempt}
		c := d.noteCall(key, x.id)
		d.noteFence(c, t.Fence())
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
func (d *taskDrill) call(ctx context.Context, h executor.Handler, t *executor.Job, c *call) (any, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
	c.cancel = cancel
	d.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		if c.ctxDone.IsZero() {
			c.ctxDone = time.Now()
		}
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
func (d *taskDrill) crashMidRun(ctx context.Context, x *drillExecutor, h executor.Handler, t *executor.Job, c *call) (any, error) {
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
