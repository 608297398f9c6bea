package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/natsembed"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

func builtins() *executor.Mux {
	mux := executor.NewMux()
	executor.RegisterBuiltins(mux)
	return mux
}

func TestEchoRunsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	watch, err := w.leases.WatchAll(t.Context(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	executortest.Run(t, w.options(builtins()))

	payload := json.RawMessage(`{"greeting":"hello","n":[1,2]}`)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 42, Attempt: 2, Handler: executor.BuiltinEcho, Payload: payload})

	started := w.nextOf(schemas.ReportStarted, 42)
	if started.Attempt != 2 || started.WorkerID != "w1" || started.StartedAt.IsZero() || !strings.HasPrefix(started.msgID, "42-2-started-") {
		t.Errorf("started report = %+v, msg id %q", started.Report, started.msgID)
	}
	done := w.nextOf(schemas.ReportSucceeded, 42)
	if string(done.Output) != string(payload) {
		t.Errorf("output = %s, want %s", done.Output, payload)
	}
	if done.msgID != "42-2-final-"+strings.TrimPrefix(started.msgID, "42-2-started-") || !done.StartedAt.Equal(started.StartedAt) || done.At.Before(done.StartedAt) {
		t.Errorf("final report = %+v, msg id %q", done.Report, done.msgID)
	}

	// The lease was created, and is left to age out: until the next
	// attempt's lease the bucket sees only puts of this one — its first
	// write and the renewals the worker made while the attempt ran (every
	// TTL/3, which a loaded machine can reach before the echo reports) —
	// never a delete.
	nextUpdate := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-watch.Updates():
			return e
		case <-time.After(time.Minute):
			t.Fatal("no update of the leases bucket in a minute")
			return nil
		}
	}
	put := nextUpdate()
	if put.Key() != "42.2" || put.Operation() != jetstream.KeyValuePut {
		t.Fatalf("first lease update: %s %s", put.Key(), put.Operation())
	}
	var lease schemas.Lease
	if err := json.Unmarshal(put.Value(), &lease); err != nil || lease.InstanceID != 42 || lease.Attempt != 2 || lease.WorkerID != "w1" {
		t.Errorf("lease = %+v (%v)", lease, err)
	}
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 43, Handler: executor.BuiltinEcho})
	w.succeeded(43)
	for {
		next := nextUpdate()
		if next.Key() == "43.1" && next.Operation() == jetstream.KeyValuePut {
			break
		}
		if next.Key() != "42.2" || next.Operation() != jetstream.KeyValuePut || string(next.Value()) != string(put.Value()) {
			t.Fatalf("lease update after the first attempt ended: %s %s %s, want a renewal of 42.2 or a put of 43.1", next.Key(), next.Operation(), next.Value())
		}
	}
	w.dispatchEmpty()
	w.noMoreReports()
}

func TestFailures(t *testing.T) {
	t.Parallel()
	type order struct {
		Item string `json:"item"`
	}
	tests := []struct {
		name          string
		handler       executor.Handler
		payload       string
		wantError     []string
		wantPermanent bool
	}{{
		name: "payload-does-not-decode",
		handler: executor.JSON(func(context.Context, *executor.Job, order) (any, error) {
			return nil, nil
		}),
		payload:       `{"item":"a","qty":3}`,
		wantError:     []string{`task "t"`, `unknown field "qty"`},
		wantPermanent: true,
	}, {
		name: "permanent",
		handler: executor.HandlerFunc(func(context.Context, *executor.Job) (any, error) {
			return nil, executor.Permanent(errors.New("account closed"))
		}),
		wantError:     []string{"account closed"},
		wantPermanent: true,
	}, {
		name:      "plain-error",
		handler:   executor.HandlerFunc(func(context.Context, *executor.Job) (any, error) { return nil, errors.New("disk full") }),
		wantError: []string{"disk full"},
	}, {
		name: "panic",
		handler: executor.HandlerFunc(func(_ context.Context, t *executor.Job) (any, error) {
			var items []int
			return items[t.Attempt], nil
		}),
		wantError: []string{"handler panicked: runtime error: index out of range [1] with length 0"},
	}, {
		name:          "output-not-json",
		handler:       executor.HandlerFunc(func(context.Context, *executor.Job) (any, error) { return json.RawMessage("{"), nil }),
		wantError:     []string{"encode output"},
		wantPermanent: true,
	}}
	w := newWorld(t)
	mux := builtins()
	for _, tt := range tests {
		mux.Handle(tt.name, tt.handler)
	}
	executortest.Run(t, w.options(mux))
	for i, tt := range tests {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: tt.name, Payload: json.RawMessage(tt.payload)})
	}
	finals := map[int64]report{}
	for len(finals) < len(tests) {
		if r := w.next(); r.Kind != schemas.ReportStarted {
			finals[r.InstanceID] = r
		}
	}
	for i, tt := range tests {
		r := finals[int64(i+1)]
		if r.Kind != schemas.ReportFailed || r.Permanent != tt.wantPermanent {
			t.Errorf("%s: report %+v, want failed, permanent %v", tt.name, r.Report, tt.wantPermanent)
		}
		for _, want := range tt.wantError {
			if !strings.Contains(r.Error, want) {
				t.Errorf("%s: error %q does not contain %q", tt.name, r.Error, want)
			}
		}
	}
}

// TestHandlerNotRegistered checks that a worker never takes an attempt
// whose handler it lacks: the pool's queue of that handler is not its, and
// one routed to it by name is given back, not failed.
func TestHandlerNotRegistered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	executortest.Run(t, w.options(builtins()))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "reports.monthly"})
	pinned := schemas.Dispatch{InstanceID: 2, Attempt: 1, Task: "t", Handler: "reports.monthly", TimeoutMS: 60000}
	if _, err := streams.Publish(t.Context(), w.js, w.topo.DispatchWorker("w1"), "", pinned); err != nil {
		t.Fatal(err)
	}
	own, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), w.topo.WorkerConsumer("w1").Durable)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker to look at the attempt routed to it", func() bool {
		info, err := own.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.Delivered.Consumer >= 1
	})
	// Work it can run goes on meanwhile.
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 3, Handler: executor.BuiltinEcho})
	if r := w.next(); r.InstanceID != 3 || r.Kind != schemas.ReportStarted {
		t.Fatalf("report %+v, want instance 3 started: a worker without the handler reported on its attempt", r.Report)
	}
	w.nextOf(schemas.ReportSucceeded, 3)
	stream, err := w.js.Stream(t.Context(), w.topo.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context(), jetstream.WithSubjectFilter(w.topo.Prefix()+".dispatch.>"))
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{w.topo.Dispatch(schemas.DefaultPool, schemas.PriorityNormal, "reports.monthly"), w.topo.DispatchWorker("w1")} {
		if info.State.Subjects[subject] != 1 {
			t.Errorf("%s holds %d messages, want its attempt still waiting (%v)", subject, info.State.Subjects[subject], info.State.Subjects)
		}
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	executortest.Run(t, w.options(builtins()))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: executor.BuiltinSleep,
		Payload: json.RawMessage(`{"seconds": 60}`), TimeoutMS: 300})
	w.nextOf(schemas.ReportStarted, 1)
	r := w.nextOf(schemas.ReportFailed, 1)
	if r.Error != "timeout after 300ms" || r.Permanent {
		t.Errorf("report %+v, want not permanent \"timeout after 300ms\"", r.Report)
	}
	if took := r.At.Sub(r.StartedAt); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the attempt ended after %s, want about 300ms", took)
	}
}

func TestControlCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	causes := make(chan error, 1)
	mux.HandleFunc("wait", func(ctx context.Context, _ *executor.Job) (any, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	executortest.Run(t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 9, Attempt: 3, Handler: "wait"})
	w.nextOf(schemas.ReportStarted, 9)

	c := schemas.Control{Action: schemas.ControlCancel, InstanceID: 9, Attempt: 3, Reason: "cancelled by alice"}
	data, _ := json.Marshal(c)
	if err := w.nc.Publish(w.topo.Control("w1"), data); err != nil {
		t.Fatal(err)
	}
	r := w.nextOf(schemas.ReportFailed, 9)
	if r.Error != "cancelled: cancelled by alice" || r.Permanent || r.Attempt != 3 {
		t.Errorf("report %+v, want a not permanent failure with the reason", r.Report)
	}
	if cause := <-causes; !strings.Contains(cause.Error(), "cancelled by alice") {
		t.Errorf("context cause = %v", cause)
	}
}

func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	watch, err := w.leases.Watch(t.Context(), "5.1", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	g := w.holdInGate(5)

	// Watch seven renewals, more than two TTLs: every update is a renewal,
	// never an expiry, and none comes a TTL after the one before. The
	// worker renews every TTL/3; a loaded machine delays some renewals and
	// so the one after comes sooner (a ticker keeps the pace), which leaves
	// the median gap at TTL/3 and well under TTL/2.
	var gaps []time.Duration
	var last time.Time
	for len(gaps) < 7 {
		select {
		case e := <-watch.Updates():
			if e.Operation() != jetstream.KeyValuePut {
				t.Fatalf("lease update %s after %d renewals", e.Operation(), len(gaps))
			}
			now := time.Now()
			if !last.IsZero() {
				gaps = append(gaps, now.Sub(last))
			}
			last = now
		case <-time.After(leaseTTL):
			t.Fatalf("no lease update for a TTL after %d renewals", len(gaps))
		}
	}
	t.Logf("renewals %v apart", gaps)
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	if median := sorted[len(sorted)/2]; median >= leaseTTL/2 {
		t.Errorf("renewals %v apart, the median %v; want one every TTL/3 (%v)", gaps, median, leaseTTL/3)
	}
	if _, err := w.leases.Get(t.Context(), "5.1"); err != nil {
		t.Fatalf("lease after %d renewals: %v", len(gaps), err)
	}
	close(g.open)
	w.succeeded(5)
}

func TestLeaseLost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	causes := make(chan error, 1)
	mux.HandleFunc("wait", func(ctx context.Context, task *executor.Job) (any, error) {
		if task.Attempt > 1 {
			return nil, nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	s := executortest.Run(t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 6, Handler: "wait"})
	w.nextOf(schemas.ReportStarted, 6)

	// The dispatcher's side of an expiry: the lease's revision moves.
	if err := w.leases.Delete(t.Context(), "6.1"); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, executor.ErrLeaseLost) {
		t.Fatalf("context cause = %v, want ErrLeaseLost", cause)
	}
	eventually(t, "the slot is free", func() bool { return s.Busy() == 0 })
	// Nothing is reported for the lost attempt: the next report is the next attempt's.
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 6, Attempt: 2, Handler: "wait"})
	if r := w.nextOf(schemas.ReportStarted, 6); r.Attempt != 2 {
		t.Errorf("report of attempt %d, want 2", r.Attempt)
	}
	w.nextOf(schemas.ReportSucceeded, 6)
}

// TestLeaseLostSuccessIsReported: a handler that succeeds as the worker
// finds its lease lapsed is reported. A lapsed lease is no proof that the
// dispatcher moved on: a nats-server restart ages every lease out while
// the dispatchers wait for the reports of the attempts it cut off, and
// PostgreSQL's guarded write refuses the success if the attempt is no
// longer current. Before, the worker dropped it and the reaper ran the
// attempt again (ax drill system nats-kill: successes lost 1).
func TestLeaseLostSuccessIsReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	causes := make(chan error, 1)
	mux.HandleFunc("finish", func(ctx context.Context, _ *executor.Job) (any, error) {
		// The work ends as the renewal finds the lease gone.
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "done", nil
	})
	s := executortest.Run(t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 7, Handler: "finish"})
	w.nextOf(schemas.ReportStarted, 7)

	// The server's side of an expiry: the lease's revision moves.
	if err := w.leases.Delete(t.Context(), "7.1"); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; !errors.Is(cause, executor.ErrLeaseLost) {
		t.Fatalf("context cause = %v, want ErrLeaseLost", cause)
	}
	if r := w.nextOf(schemas.ReportSucceeded, 7); r.Attempt != 1 || string(r.Output) != `"done"` {
		t.Errorf("report of attempt %d with output %s, want attempt 1's, \"done\"", r.Attempt, r.Output)
	}
	eventually(t, "the slot is free", func() bool { return s.Busy() == 0 })
}

func TestSecondDeliveryIsNotRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var calls sync.Map
	mux := executor.NewMux()
	mux.HandleFunc("count", func(_ context.Context, task *executor.Job) (any, error) {
		n, _ := calls.LoadOrStore(task.InstanceID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return nil, nil
	})
	// Another worker holds attempt 1 of instance 7.
	if _, err := w.leases.Create(t.Context(), streams.LeaseKey(7, 1), []byte(`{"worker_id":"other"}`)); err != nil {
		t.Fatal(err)
	}
	opts := w.options(mux)
	opts.Slots = 1
	executortest.Run(t, opts)
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 7, Handler: "count"})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 8, Handler: "count"})
	w.succeeded(8)
	if _, ran := calls.Load(int64(7)); ran {
		t.Error("the attempt leased by another worker ran")
	}
	w.dispatchEmpty()
	w.noMoreReports()
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	opts := w.options(builtins())
	opts.Pools = []string{"eu+gpu", "default"}
	opts.Slots = 3
	opts.Version = "1.2.3"
	s, err := executor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	running := servicetest.Start(t, "executor", s)

	e, err := w.workers.Get(t.Context(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	var wk schemas.Worker
	if err := json.Unmarshal(e.Value(), &wk); err != nil {
		t.Fatal(err)
	}
	if wk.ID != "w1" || wk.Version != "1.2.3" || wk.Slots != 3 || strings.Join(wk.Pools, ",") != "eu+gpu,default" ||
		strings.Join(wk.Handlers, ",") != "builtin.echo,builtin.fail,builtin.sleep" || wk.StartedAt.IsZero() || wk.HeartbeatAt.IsZero() {
		t.Errorf("worker record %+v", wk)
	}
	// Beside it, a grant key per pool and handler (a pool with '+' too,
	// which a KV client's key check refuses).
	want := []string{"w1"}
	for _, p := range opts.Pools {
		for _, h := range wk.Handlers {
			want = append(want, streams.GrantKey("w1", p, h))
		}
	}
	slices.Sort(want)
	if keys := workerKeys(t, w.workers); !slices.Equal(keys, want) {
		t.Errorf("keys of the workers bucket = %v, want %v", keys, want)
	}
	// Both pools' work reaches the worker.
	if _, err := streams.Publish(t.Context(), w.js, w.topo.Dispatch("eu+gpu", schemas.PriorityLow, executor.BuiltinEcho), "", schemas.Dispatch{
		InstanceID: 1, Attempt: 1, Task: "t", Handler: executor.BuiltinEcho, TimeoutMS: 60000}); err != nil {
		t.Fatal(err)
	}
	w.succeeded(1)

	if err := running.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.workers.Get(t.Context(), "w1"); !isKeyMissing(err) {
		t.Errorf("worker key after the stop: %v, want it deleted", err)
	}
	if keys := workerKeys(t, w.workers); len(keys) != 0 {
		t.Errorf("keys of the workers bucket after the stop = %v, want none", keys)
	}
}

// workerKeys lists the keys of the workers bucket, sorted.
func workerKeys(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	lister, err := kv.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	g, cancel, done := w.attemptInGate(nil)
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while a handler ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.succeeded(1)
	// The reported attempt's lease is left to age out, as the worker left it.
	if e, err := w.leases.Get(t.Context(), "1.1"); err != nil || !bytes.Contains(e.Value(), []byte(`"worker_id":"w1"`)) {
		t.Errorf("lease after the stop: %v, want the worker's lease left to age out", err)
	}
}

func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	_, cancel, done := w.attemptInGate(func(o *executor.Options) { o.ShutdownTimeout = 200 * time.Millisecond })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.nextOf(schemas.ReportStarted, 1)
	r := w.nextOf(schemas.ReportReleased, 1)
	if !strings.HasPrefix(r.Error, "handed back: worker w1 stopped and its shutdown timeout of 200ms passed") || r.Permanent {
		t.Errorf("report %+v, want a hand-back", r.Report)
	}
	// The handed-back attempt's lease is gone, so that its next run, here
	// or elsewhere, waits for no TTL.
	if _, err := w.leases.Get(t.Context(), "1.1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("lease after the hand-back: %v, want it deleted", err)
	}
}

func TestMissingTopology(t *testing.T) {
	t.Parallel()
	srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := executor.New(executor.Options{Conn: nc, Mux: builtins()})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "ax dev") || !strings.Contains(err.Error(), "AX_DISPATCH") {
		t.Errorf("Run = %v, want an error that says to start the dispatcher or ax dev", err)
	}
}

// lines is a log writer that hands each line to the test.
type lines chan []byte

func (l lines) Write(p []byte) (int, error) {
	select {
	case l <- append([]byte(nil), p...):
	default: // the test has read what it needed
	}
	return len(p), nil
}

func TestTaskAndLogger(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tasks := make(chan executor.Job, 1)
	mux := executor.NewMux()
	mux.HandleFunc("inspect", func(ctx context.Context, task *executor.Job) (any, error) {
		executor.Logger(ctx).Info("working", "step", "one")
		if deadline, ok := ctx.Deadline(); !ok || !deadline.Equal(task.Deadline) {
			t.Errorf("context deadline %v, task deadline %v", deadline, task.Deadline)
		}
		tasks <- *task
		return nil, nil
	})
	logs := make(lines, 100)
	opts := w.options(mux)
	opts.Logger = slog.New(zerolog.NewSlogHandler(zerolog.New(logs)))
	executortest.Run(t, opts)
	w.dispatch(schemas.PriorityUrgent, schemas.Dispatch{InstanceID: 3, Attempt: 2, MaxAttempts: 5, Task: "billing",
		Handler: "inspect", Payload: json.RawMessage(`{"a":1}`), TimeoutMS: 60000})
	task := <-tasks
	if task.InstanceID != 3 || task.Name != "billing" || task.Attempt != 2 || task.MaxAttempts != 5 ||
		task.Priority != schemas.PriorityUrgent || string(task.Payload) != `{"a":1}` || task.WorkerID != "w1" ||
		task.EventID == "" || task.FiredAt.IsZero() || time.Until(task.Deadline) < 50*time.Second {
		t.Errorf("task %+v", task)
	}
	for line := range logs {
		var entry map[string]any
		if err := json.Unmarshal(line, &entry); err != nil {
			t.Fatal(err)
		}
		if entry["message"] != "working" {
			continue
		}
		if entry["task"] != "billing" || entry["instance_id"] != 3.0 || entry["attempt"] != 2.0 ||
			entry["worker_id"] != "w1" || entry["step"] != "one" {
			t.Errorf("handler log line %s", line)
		}
		break
	}
}

// A worker runs a mux's handlers in its middleware, and reports the
// RetryAfter a handler asks for as retry_after_ms.
func TestWorkerRunsMiddlewareAndReportsRetryAfter(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("snooze", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.RetryAfter(90*time.Second, errors.New("rate limited"))
	})
	var wrapped atomic.Int64
	mux.Use(func(next executor.Handler) executor.Handler {
		return executor.HandlerFunc(func(ctx context.Context, j *executor.Job) (any, error) {
			wrapped.Add(1)
			return next.HandleTask(ctx, j)
		})
	})
	executortest.Run(t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 9, Attempt: 1, MaxAttempts: 3, Task: "t", Handler: "snooze"})
	w.nextOf(schemas.ReportStarted, 9)
	r := w.nextOf(schemas.ReportFailed, 9)
	if r.Error != "rate limited" || r.RetryAfterMS != 90000 || r.Permanent {
		t.Errorf("report %+v, want rate limited with retry_after_ms 90000", r.Report)
	}
	if n := wrapped.Load(); n != 1 {
		t.Errorf("middleware ran %d times, want 1", n)
	}
}
