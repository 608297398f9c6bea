package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// leaseTTL is the lease TTL of the test servers.
const leaseTTL = 2 * time.Second

// wait bounds every wait of a test for a condition.
const wait = time.Minute

// world is one test's NATS server, with the test playing the dispatcher.
type world struct {
	t       *testing.T
	srv     *streamstest.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	topo    streams.Topology
	reports jetstream.Consumer
	leases  jetstream.KeyValue
	workers jetstream.KeyValue
	fences  *nats.Subscription // answers fence questions (see answerFences)
	fenced  atomic.Int64       // fence questions answered
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldOn(t, streamstest.NewServer(t, streams.Config{LeaseTTL: leaseTTL}))
}

// newWorldOn is newWorld on the server srv.
func newWorldOn(t *testing.T, srv *streamstest.Server) *world {
	t.Helper()
	nc, js := srv.Connect()
	w := &world{t: t, srv: srv, nc: nc, js: js, topo: srv.Topology}
	ctx := t.Context()
	var err error
	w.reports, err = js.CreateOrUpdateConsumer(ctx, w.topo.ReportsStream(), jetstream.ConsumerConfig{
		Durable:       "test",
		FilterSubject: w.topo.Prefix() + ".report.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.leases, err = js.KeyValue(ctx, w.topo.LeasesBucket()); err != nil {
		t.Fatal(err)
	}
	if w.workers, err = js.KeyValue(ctx, w.topo.WorkersBucket()); err != nil {
		t.Fatal(err)
	}
	w.answerFences(func(schemas.FenceQuestion) schemas.FenceAnswer {
		return schemas.FenceAnswer{Start: true, Reason: "the test's dispatcher lets every redelivery start"}
	})
	return w
}

// answerFences answers the fence questions of redelivered attempts as the
// dispatcher would, with answer, until the test ends; the questions are
// counted in w.fenced.
func (w *world) answerFences(answer func(schemas.FenceQuestion) schemas.FenceAnswer) {
	w.t.Helper()
	sub, err := w.nc.QueueSubscribe(w.topo.AllFences(), "dispatcher", func(m *nats.Msg) {
		var q schemas.FenceQuestion
		if err := json.Unmarshal(m.Data, &q); err != nil {
			w.t.Errorf("fence question on %s: %v", m.Subject, err)
			return
		}
		w.fenced.Add(1)
		data, _ := json.Marshal(answer(q))
		_ = m.Respond(data)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	if w.fences != nil {
		_ = w.fences.Unsubscribe()
	}
	w.fences = sub
	if err := w.nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
}

// options returns worker options on the world's connection, logging to the
// test. Every attempt is reported started before its handler runs, so that
// a test reads its reports in a known order; startedreport_test.go tests
// the delayed started reports of the default.
func (w *world) options(mux *executor.Mux) executor.Options {
	return executor.Options{
		Conn:         w.nc,
		WorkerID:     "w1",
		Mux:          mux,
		Logger:       slog.New(zerolog.NewSlogHandler(zerolog.New(zerolog.NewTestWriter(w.t)).Level(zerolog.DebugLevel))),
		StartedDelay: -1,
	}
}

// dispatch publishes one attempt to the default pool, as the dispatcher does.
func (w *world) dispatch(p schemas.Priority, d schemas.Dispatch) {
	w.t.Helper()
	if d.Attempt == 0 {
		d.Attempt = 1
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = 3
	}
	if d.Task == "" {
		d.Task = "t"
	}
	if d.TimeoutMS == 0 {
		d.TimeoutMS = time.Minute.Milliseconds()
	}
	d.Priority = p
	d.EventID = "e" + time.Now().Format(time.RFC3339Nano)
	d.FiredAt, d.DispatchedAt = time.Now(), time.Now()
	if _, err := streams.Publish(w.t.Context(), w.js, w.topo.Dispatch(schemas.DefaultPool, p, d.Handler), "", d); err != nil {
		w.t.Fatal(err)
	}
}

// report is a received report and its Nats-Msg-Id.
type report struct {
	schemas.Report
	msgID string
}

// next returns the next report, failing the test when none comes in time.
func (w *world) next() report {
	w.t.Helper()
	m, err := w.reports.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		w.t.Fatalf("await report: %v", err)
	}
	if err := m.DoubleAck(w.t.Context()); err != nil {
		w.t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(m.Data(), &r.Report); err != nil {
		w.t.Fatal(err)
	}
	r.msgID = m.Headers().Get(streams.HeaderMsgID)
	return r
}

// nextOf returns the next report, checking its kind and instance.
func (w *world) nextOf(kind schemas.ReportKind, instanceID int64) report {
	w.t.Helper()
	r := w.next()
	if r.Kind != kind || r.InstanceID != instanceID {
		w.t.Fatalf("got report %+v, want %s of instance %d", r.Report, kind, instanceID)
	}
	return r
}

// succeeded checks that the next reports are instance instanceID's started
// and succeeded reports, and returns the succeeded one.
func (w *world) succeeded(instanceID int64) report {
	w.t.Helper()
	w.nextOf(schemas.ReportStarted, instanceID)
	return w.nextOf(schemas.ReportSucceeded, instanceID)
}

// ring rings the doorbell of the default pool's queue of handler at
// priority p, as the dispatcher does after it publishes an attempt.
func (w *world) ring(p schemas.Priority, handler string) {
	w.t.Helper()
	if err := w.nc.Publish(w.topo.Ready(schemas.DefaultPool, p, handler), nil); err != nil {
		w.t.Fatal(err)
	}
}

// noMoreReports checks that the reports stream holds nothing unread.
func (w *world) noMoreReports() {
	w.t.Helper()
	info, err := w.reports.Info(w.t.Context())
	if err != nil {
		w.t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		w.t.Fatalf("%d unread reports, want none", info.NumPending+uint64(info.NumAckPending))
	}
}

// dispatchEmpty waits until AX_DISPATCH holds no message: all were acked or terminated.
func (w *world) dispatchEmpty() {
	w.t.Helper()
	eventually(w.t, "AX_DISPATCH is empty", func() bool {
		s, err := w.js.Stream(w.t.Context(), w.topo.DispatchStream())
		if err != nil {
			w.t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs == 0
	})
}

// eventually polls cond until it holds, failing the test after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waittest.ForTrue(t, what, wait, cond)
}

// gate is a handler that blocks until it is opened or its context ends.
type gate struct {
	open    chan struct{}
	entered chan int64 // receives the instance id of each call
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan int64, 100)} }

func (g *gate) HandleTask(ctx context.Context, t *executor.Job) (any, error) {
	g.entered <- t.InstanceID
	select {
	case <-g.open:
		return map[string]int64{"instance": t.InstanceID}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// attemptInGate runs a worker whose one handler, "gate", is g,
// with its options changed by tune (when not nil), and returns once
// instance 1's attempt is in the handler. cancel stops the worker; done
// receives Run's error.
func (w *world) attemptInGate(tune func(*executor.Options)) (g *gate, cancel context.CancelFunc, done <-chan error) {
	w.t.Helper()
	mux, g := gateMux()
	opts := w.options(mux)
	if tune != nil {
		tune(&opts)
	}
	s, err := executor.New(opts)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.t.Context())
	w.t.Cleanup(cancel)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "gate"})
	select {
	case <-g.entered:
	case err := <-ran:
		w.t.Fatalf("the worker stopped before its attempt reached the handler: %v", err)
	case <-time.After(wait):
		w.t.Fatalf("instance 1's attempt did not reach the handler in %v", wait)
	}
	return g, cancel, ran
}

// gateMux is a mux whose one handler, "gate", is g.
func gateMux() (*executor.Mux, *gate) {
	mux := executor.NewMux()
	g := newGate()
	mux.Handle("gate", g)
	return mux, g
}

// holdInGate runs a worker whose one handler, "gate", is the gate it
// returns, until the test's end, and returns once the attempt of instance
// instanceID it dispatched is in the handler.
func (w *world) holdInGate(instanceID int64) *gate {
	w.t.Helper()
	mux, g := gateMux()
	executortest.Run(w.t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: instanceID, Handler: "gate"})
	select {
	case <-g.entered:
	case <-time.After(wait):
		w.t.Fatalf("instance %d's attempt did not reach the handler in %v", instanceID, wait)
	}
	return g
}

// peak counts the calls of a handler in flight, and the most at once.
type peak struct{ now, most atomic.Int32 }

// enter counts a call in; the call calls the func it returns as it ends.
func (p *peak) enter() (leave func()) {
	n := p.now.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return func() { p.now.Add(-1) }
}

// isKeyMissing reports whether err says a KV key does not exist.
func isKeyMissing(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// collect reads reports until it has the final report of n attempts and
// returns the started and final reports by instance id, failing the test
// on a failed attempt.
func (w *world) collect(n int) (started, finals map[int64]report) {
	w.t.Helper()
	started, finals = map[int64]report{}, map[int64]report{}
	for len(finals) < n {
		r := w.next()
		switch r.Kind {
		case schemas.ReportStarted:
			started[r.InstanceID] = r
		case schemas.ReportSucceeded:
			finals[r.InstanceID] = r
		default:
			w.t.Fatalf("report %+v", r.Report)
		}
	}
	return started, finals
}

// worker starts a worker with its own connection, as another process would.
func (w *world) worker(id string, mux *executor.Mux, tune func(*executor.Options)) *executor.Service {
	w.t.Helper()
	nc, _ := w.srv.Connect()
	opts := w.options(mux)
	opts.Conn, opts.WorkerID = nc, id
	opts.RequeueDelay = 50 * time.Millisecond
	if tune != nil {
		tune(&opts)
	}
	return executortest.Run(w.t, opts)
}
