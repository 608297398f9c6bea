package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
)

// calls counts the attempts each worker ran, by worker id.
type calls struct {
	mu    sync.Mutex
	count map[string]int
}

// mux serves "test.where" for worker id: it succeeds and counts the call.
func (c *calls) mux(id string) *executor.Mux {
	m := executor.NewMux()
	m.HandleFunc("test.where", func(context.Context, *executor.Job) (any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.count == nil {
			c.count = make(map[string]int)
		}
		c.count[id]++
		return nil, nil
	})
	return m
}

func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[id]
}

// worker starts a worker with its own connection and returns a function
// that stops it (also called when the test ends).
func (s *system) worker(opts executor.Options) (stop func()) {
	s.t.Helper()
	conn, _ := s.srv.Connect()
	opts.Conn, opts.Logger = conn, slog.New(zerolog.NewSlogHandler(s.log))
	if opts.Slots == 0 {
		opts.Slots = 4
	}
	w, err := executor.New(opts)
	if err != nil {
		s.t.Fatal(err)
	}
	running := servicetest.Start(s.t, "worker "+opts.WorkerID, w)
	return func() {
		if err := running.Stop(); err != nil {
			s.t.Errorf("worker %s: %v", opts.WorkerID, err)
		}
	}
}

// routedTo waits until the dispatcher routes over exactly the workers ids.
func (s *system) routedTo(ids ...string) {
	s.t.Helper()
	waitFor(s.t, fmt.Sprintf("the dispatcher to see workers %v", ids), 60*time.Second, func() (bool, error) {
		var live []string
		for _, w := range s.dispatcher.Workers() {
			live = append(live, w.ID)
		}
		return slices.Equal(live, ids), nil
	})
}

// allRanOn fires task n times with no payload and checks that every
// instance ran on worker.
func (s *system) allRanOn(task string, n int, worker string) {
	s.t.Helper()
	for i, w := range s.ranOn(task, make([]any, n)...) {
		if w != worker {
			s.t.Errorf("instance %d ran on %s, want %s", i, w, worker)
		}
	}
}

// ranOn fires task once per payload and returns the worker each instance ran on.
func (s *system) ranOn(task string, payloads ...any) []string {
	s.t.Helper()
	ids := make([]int64, len(payloads))
	for i, p := range payloads {
		ids[i] = s.fire(task, p)
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.waitState(id, schemas.StateSucceeded, 60*time.Second).WorkerID
	}
	return out
}

func TestRoutingPullSpreads(t *testing.T) {
	s := newSystem(t)
	release := make(chan struct{})
	for _, id := range []string{"w1", "w2"} {
		s.worker(executor.Options{WorkerID: id, Mux: gated(release), Slots: 2})
	}
	s.apply("task_name: spread\nexecution: {handler: test.gate}\n")
	ids := make([]int64, 4)
	for i := range ids {
		ids[i] = s.fire("spread", nil)
	}
	// Each worker has two slots, so four attempts run only if both pull.
	on := make(map[string]int)
	for _, id := range ids {
		on[s.waitState(id, schemas.StateRunning, 60*time.Second).WorkerID]++
	}
	close(release)
	if on["w1"] != 2 || on["w2"] != 2 {
		t.Fatalf("attempts ran on %v, want two on each of w1 and w2", on)
	}
}

func TestRoutingWorker(t *testing.T) {
	s := newSystem(t)
	var c calls
	for _, id := range []string{"w1", "w2", "w3"} {
		s.worker(executor.Options{WorkerID: id, Mux: c.mux(id)})
	}
	s.apply("task_name: named\nexecution: {handler: test.where}\ndispatch: {strategy: worker, worker: w2}\n")
	for i, w := range s.ranOn("named", nil, nil, nil, nil, nil, nil, nil, nil, nil, nil) {
		if w != "w2" {
			t.Errorf("instance %d ran on %s, want w2", i, w)
		}
	}
	if c.of("w1")+c.of("w3") != 0 {
		t.Errorf("w1 ran %d attempts and w3 %d, want none", c.of("w1"), c.of("w3"))
	}

	// A worker that is not live gets its work when it comes.
	s.apply("task_name: later\nexecution: {handler: test.where}\ndispatch: {strategy: worker, worker: w9}\n")
	id := s.fire("later", nil)
	s.waitState(id, schemas.StateDispatched, 60*time.Second)
	s.worker(executor.Options{WorkerID: "w9", Mux: c.mux("w9")})
	if w := s.waitState(id, schemas.StateSucceeded, 60*time.Second).WorkerID; w != "w9" {
		t.Fatalf("instance ran on %s, want w9", w)
	}
}

func TestRoutingHash(t *testing.T) {
	s := newSystem(t)
	var c calls
	stops := make(map[string]func())
	for _, id := range []string{"w1", "w2", "w3"} {
		stops[id] = s.worker(executor.Options{WorkerID: id, Mux: c.mux(id)})
	}
	s.routedTo("w1", "w2", "w3")
	s.apply("task_name: pinned\nexecution: {handler: test.where}\ndispatch: {strategy: hash, hash_key: 'c-{{.customer}}'}\n")
	var payloads []any
	for i := range 24 {
		payloads = append(payloads, map[string]any{"customer": i})
	}
	mapping := func() map[int]string {
		m := make(map[int]string)
		for i, w := range s.ranOn("pinned", payloads...) {
			m[i] = w
		}
		return m
	}

	three := mapping()
	spread := make(map[string]int)
	for _, w := range three {
		spread[w]++
	}
	if len(spread) != 3 {
		t.Fatalf("24 keys landed on %v, want all three workers", spread)
	}
	if again := mapping(); !mapsEqual(again, three) {
		t.Fatalf("keys moved while the workers stayed the same: %v, then %v", three, again)
	}

	// A fourth worker joins: only the keys it wins move, all to it.
	stops["w4"] = s.worker(executor.Options{WorkerID: "w4", Mux: c.mux("w4")})
	s.routedTo("w1", "w2", "w3", "w4")
	four := mapping()
	moved := 0
	for k, w := range four {
		if w != three[k] {
			moved++
			if w != "w4" {
				t.Errorf("key %d moved from %s to %s when w4 joined, want it kept or on w4", k, three[k], w)
			}
		}
	}
	if moved == 0 {
		t.Errorf("w4 took no key: %v", four)
	}

	// w2 leaves: only its keys move.
	stops["w2"]()
	s.routedTo("w1", "w3", "w4")
	left := mapping()
	for k, w := range left {
		switch {
		case w == "w2":
			t.Errorf("key %d still ran on w2, which left", k)
		case four[k] != "w2" && w != four[k]:
			t.Errorf("key %d moved from %s to %s when w2 left, want it kept", k, four[k], w)
		}
	}
}

func mapsEqual(a, b map[int]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestRoutingMinWorkerVersion(t *testing.T) {
	s := newSystem(t)
	var c calls
	s.worker(executor.Options{WorkerID: "old", Version: "1.9.0", Mux: c.mux("old")})
	s.routedTo("old")
	s.apply("task_name: modern\nexecution: {handler: test.where}\nmin_worker_version: 2.0.0\n")
	// No live worker may take it: it waits, routed again until one comes.
	first := s.fire("modern", nil)
	s.worker(executor.Options{WorkerID: "new", Version: "2.0.0", Mux: c.mux("new")})
	if w := s.waitState(first, schemas.StateSucceeded, 60*time.Second).WorkerID; w != "new" {
		t.Fatalf("the first instance ran on %s, want new", w)
	}
	s.allRanOn("modern", 12, "new")
	if n := c.of("old"); n != 0 {
		t.Fatalf("the old worker ran %d attempts of a task that needs 2.0.0", n)
	}
}

// muxOf serves each handler named for worker id: it succeeds and counts
// the call.
func (c *calls) muxOf(id string, handlers ...string) *executor.Mux {
	m := executor.NewMux()
	for _, h := range handlers {
		m.HandleFunc(h, func(context.Context, *executor.Job) (any, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.count == nil {
				c.count = make(map[string]int)
			}
			c.count[id]++
			return nil, nil
		})
	}
	return m
}

// TestRoutingHandlerCapable checks that an attempt reaches only the
// workers of its pool that registered its handler: one without it neither
// takes nor fails it.
func TestRoutingHandlerCapable(t *testing.T) {
	s := newSystem(t)
	var c calls
	// One slot: the backlog waits while the other worker has free slots.
	s.worker(executor.Options{WorkerID: "capable", Slots: 1, Mux: c.muxOf("capable", "test.where", "test.other")})
	s.worker(executor.Options{WorkerID: "other", Slots: 4, Mux: c.muxOf("other", "test.other")})
	s.routedTo("capable", "other")
	s.apply("task_name: needs-where\nexecution: {handler: test.where}\n")
	s.allRanOn("needs-where", 20, "capable")
	if n := c.of("other"); n != 0 {
		t.Errorf("the worker without test.where ran %d attempts", n)
	}
}

// TestRoutingNoCapableWorkerWaits checks that an attempt no live worker
// can run waits, DISPATCHED, and runs once a worker with its handler joins.
func TestRoutingNoCapableWorkerWaits(t *testing.T) {
	s := newSystem(t)
	var c calls
	s.worker(executor.Options{WorkerID: "other", Mux: c.muxOf("other", "test.other")})
	s.routedTo("other")
	s.apply("task_name: needs-where\nexecution: {handler: test.where}\n")
	s.apply("task_name: other-work\nexecution: {handler: test.other}\n")
	waiting := s.fire("needs-where", nil)
	// Work fired after it, in the same pool and priority, runs on the
	// worker without test.where: that worker has looked past it.
	for _, w := range s.ranOn("other-work", nil, nil) {
		if w != "other" {
			t.Fatalf("other-work ran on %s, want other", w)
		}
	}
	inst, err := s.store.GetInstance(context.Background(), waiting)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != schemas.StateDispatched {
		t.Fatalf("the instance no live worker can run is %s (%s), want it DISPATCHED, waiting", inst.State, inst.Error)
	}
	s.worker(executor.Options{WorkerID: "capable", Mux: c.muxOf("capable", "test.where")})
	if w := s.waitState(waiting, schemas.StateSucceeded, 60*time.Second).WorkerID; w != "capable" {
		t.Fatalf("the instance ran on %s, want capable", w)
	}
}

// ledger counts the handler executions that succeeded, by instance, and
// the worker each ran on.
type ledger struct {
	mu  sync.Mutex
	ran map[int64][]string
}

func (l *ledger) record(id int64, worker string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ran == nil {
		l.ran = make(map[int64][]string)
	}
	l.ran[id] = append(l.ran[id], worker)
}

func (l *ledger) of(id int64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ran[id])
}

// TestRoutingHashReroutesAKilledWorkersBacklog kills a worker (its NATS
// connection ends: no clean stop, its key and its queue stay) while
// hash-routed attempts wait on its own queue: every attempt is routed again
// to the live worker, ends SUCCEEDED and ran exactly once.
func TestRoutingHashReroutesAKilledWorkersBacklog(t *testing.T) {
	s := newSystem(t)
	var runs ledger
	muxFor := func(id string, block bool) *executor.Mux {
		m := executor.NewMux()
		m.HandleFunc("test.where", func(ctx context.Context, task *executor.Job) (any, error) {
			if block {
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			runs.record(task.InstanceID, id)
			return nil, nil
		})
		return m
	}
	s.worker(executor.Options{WorkerID: "w1", Mux: muxFor("w1", false)})

	// w2 runs one attempt at a time and never finishes one.
	conn, _ := s.srv.Connect()
	victim, err := executor.New(executor.Options{Conn: conn, WorkerID: "w2", Mux: muxFor("w2", true), Slots: 1,
		Logger: slog.New(zerolog.NewSlogHandler(s.log)), ShutdownTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	running := servicetest.Start(t, "worker w2", victim)
	// It fails when its connection is cut: that is the test.
	t.Cleanup(func() { _ = running.Stop() })
	s.routedTo("w1", "w2")

	// The attempt w2 holds when it dies is retried: its worker died.
	s.apply("task_name: pinned\nexecution: {handler: test.where, retry: {max_attempts: 3}}\ndispatch: {strategy: hash, hash_key: 'c-{{.customer}}'}\n")
	var ids []int64
	for i := range 30 {
		ids = append(ids, s.fire("pinned", map[string]any{"customer": i}))
	}
	// w2 holds one attempt and has a backlog on its own queue.
	stream, err := s.js.Stream(context.Background(), s.srv.Topology.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	own := s.srv.Topology.DispatchWorker("w2")
	waitFor(t, "w2 to run one attempt with a backlog behind it", 60*time.Second, func() (bool, error) {
		if victim.Busy() != 1 {
			return false, nil
		}
		info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(own))
		if err != nil {
			return false, err
		}
		return info.State.Subjects[own] >= 3, nil
	})

	conn.Close() // killed: no heartbeat, no lease renewal, no goodbye
	for _, id := range ids {
		inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
		if inst.WorkerID != "w1" {
			t.Errorf("instance %d succeeded on %s, want w1", id, inst.WorkerID)
		}
	}
	for _, id := range ids {
		if ran := runs.of(id); len(ran) != 1 {
			t.Errorf("instance %d ran %d times (%v), want once", id, len(ran), ran)
		}
	}
}

// TestRoutingPinnedWaitsForItsWorker stops a worker that attempts are
// pinned to (strategy worker) while some wait on its own queue: they stay
// DISPATCHED, their instances say why, and they run when it comes back.
func TestRoutingPinnedWaitsForItsWorker(t *testing.T) {
	s := newSystem(t)
	var c calls
	entered, release := make(chan struct{}, 10), make(chan struct{})
	gatedMux := executor.NewMux()
	gatedMux.HandleFunc("test.where", func(ctx context.Context, _ *executor.Job) (any, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	})
	stop := s.worker(executor.Options{WorkerID: "w9", Mux: gatedMux, Slots: 1})
	s.routedTo("w9")
	s.apply("task_name: named\nexecution: {handler: test.where}\ndispatch: {strategy: worker, worker: w9}\n")
	first := s.fire("named", nil)
	<-entered
	waiting := []int64{s.fire("named", nil), s.fire("named", nil)}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	close(release)
	<-stopped
	s.waitState(first, schemas.StateSucceeded, 60*time.Second)
	for _, id := range waiting {
		waitFor(t, "the instance to say that its worker left", 60*time.Second, func() (bool, error) {
			inst, err := s.store.GetInstance(context.Background(), id)
			if err != nil {
				return false, err
			}
			if inst.State != schemas.StateDispatched {
				return false, fmt.Errorf("instance %d is %s, want DISPATCHED while w9 is gone", id, inst.State)
			}
			for _, e := range inst.Events {
				if e.Kind == "worker_gone" {
					return true, nil
				}
			}
			return false, nil
		})
	}
	s.worker(executor.Options{WorkerID: "w9", Mux: c.mux("w9")})
	for _, id := range waiting {
		if w := s.waitState(id, schemas.StateSucceeded, 60*time.Second).WorkerID; w != "w9" {
			t.Errorf("instance %d ran on %s, want w9", id, w)
		}
	}
}
