package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/dispatcher"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// chainDef is a task running handler after parents, each "task" (on
// success) or "task:on".
func chainDef(name, handler string, parents ...string) string {
	def := "task_name: " + name + "\nexecution: {handler: " + handler + "}\n"
	if len(parents) > 0 {
		def += "after:\n"
		for _, p := range parents {
			task, on, _ := strings.Cut(p, ":")
			def += "  - task: " + task + "\n"
			if on != "" {
				def += "    on: " + on + "\n"
			}
		}
	}
	return def
}

// runOf returns the run id of instance id.
func (s *system) runOf(id int64) string {
	s.t.Helper()
	in, err := s.store.GetInstance(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	if in.RunID == "" {
		s.t.Fatalf("instance %d has no run id", id)
	}
	return in.RunID
}

// chained waits for the chain firing of task in run to make an instance in
// state, and returns it.
func (s *system) chained(task, run string, state schemas.State, timeout time.Duration) schemas.Instance {
	s.t.Helper()
	var id int64
	waitFor(s.t, "chained "+task+" in "+run, timeout, func() (bool, error) {
		in, err := s.store.InstanceByEvent(context.Background(), task, schemas.ChainEventID(task, run))
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		id = in.ID
		return err == nil, err
	})
	return s.waitState(id, state, timeout)
}

// compactJSON returns a JSON document without insignificant space:
// PostgreSQL's jsonb writes {"a": 1} where the handler returned {"a":1}.
func compactJSON(doc json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return string(doc)
	}
	return b.String()
}

// createdReason returns the reason on an instance's CREATED transition.
func createdReason(in schemas.Instance) string {
	for _, tr := range in.Transitions {
		if tr.To == schemas.StateCreated {
			return tr.Reason
		}
	}
	return ""
}

// skippedReason returns the reason an instance was SKIPPED for.
func skippedReason(in schemas.Instance) string {
	for _, tr := range in.Transitions {
		if tr.To == schemas.StateSkipped {
			return tr.Reason
		}
	}
	return ""
}

func TestChainRunsChildWithParentOutput(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	type seen struct {
		parent schemas.ParentResult
		ok     bool
		run    string
	}
	got := make(chan seen, 1)
	mux.HandleFunc("chain.extract", func(context.Context, *executor.Job) (any, error) {
		return map[string]int{"rows": 3}, nil
	})
	mux.HandleFunc("chain.load", func(_ context.Context, task *executor.Job) (any, error) {
		p, ok := task.Parent("extract")
		got <- seen{p, ok, task.RunID}
		return nil, nil
	})
	s.executor("w1", mux, 4)
	s.apply(chainDef("extract", "chain.extract"))
	s.apply(chainDef("load", "chain.load", "extract"))

	id := s.fire("extract", nil)
	run := s.runOf(id)
	if want := fmt.Sprintf("run-%d", id); run != want {
		t.Errorf("the root's run is %q, want %q", run, want)
	}
	load := s.chained("load", run, schemas.StateSucceeded, 60*time.Second)
	g := <-got
	if !g.ok || g.parent.InstanceID != id || g.parent.State != schemas.StateSucceeded || compactJSON(g.parent.Output) != `{"rows":3}` {
		t.Errorf("load's handler saw parent extract = %+v (ok %t), want instance %d SUCCEEDED with {\"rows\":3}", g.parent, g.ok, id)
	}
	if g.run != run || load.RunID != run {
		t.Errorf("load ran in run %q (instance says %q), want %q", g.run, load.RunID, run)
	}
	if load.Source != schemas.SourceChain || createdReason(load) != "after extract (SUCCEEDED)" {
		t.Errorf("load: source %q, CREATED reason %q; want chain, \"after extract (SUCCEEDED)\"", load.Source, createdReason(load))
	}
	if p := load.Parents["extract"]; p.InstanceID != id || p.State != schemas.StateSucceeded {
		t.Errorf("load's instance records parents %+v", load.Parents)
	}
}

func TestChainDiamondRunsJoinOnceAfterBoth(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	var joins atomic.Int32
	var parentsSeen atomic.Value
	mux.HandleFunc("chain.out", func(_ context.Context, task *executor.Job) (any, error) {
		return task.Name, nil
	})
	mux.HandleFunc("chain.join", func(_ context.Context, task *executor.Job) (any, error) {
		joins.Add(1)
		parentsSeen.Store(task.Parents)
		return nil, nil
	})
	s.executor("w1", mux, 8)
	s.apply(chainDef("a", "chain.out"))
	s.apply(chainDef("b", "chain.out", "a"))
	s.apply(chainDef("c", "chain.out", "a"))
	s.apply(chainDef("d", "chain.join", "b", "c"))

	id := s.fire("a", nil)
	run := s.runOf(id)
	b := s.chained("b", run, schemas.StateSucceeded, 60*time.Second)
	c := s.chained("c", run, schemas.StateSucceeded, 60*time.Second)
	d := s.chained("d", run, schemas.StateSucceeded, 60*time.Second)
	for _, in := range []schemas.Instance{b, c, d} {
		if in.RunID != run {
			t.Errorf("%s ran in %q, want %q", in.Task, in.RunID, run)
		}
	}
	if d.StartedAt.Before(*b.FinishedAt) || d.StartedAt.Before(*c.FinishedAt) {
		t.Errorf("d started at %v, before b (%v) or c (%v) finished", d.StartedAt, b.FinishedAt, c.FinishedAt)
	}
	if got := createdReason(d); got != "after b (SUCCEEDED), c (SUCCEEDED)" {
		t.Errorf("d's CREATED reason = %q", got)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || joins.Load() != 1 {
		t.Errorf("d has %d instances and ran %d times, want once", len(list), joins.Load())
	}
	seen, _ := parentsSeen.Load().(map[string]schemas.ParentResult)
	if string(seen["b"].Output) != `"b"` || string(seen["c"].Output) != `"c"` || seen["b"].InstanceID != b.ID || seen["c"].InstanceID != c.ID {
		t.Errorf("d's handler saw parents %+v", seen)
	}
}

func TestChainFailedParentSkipsDescendants(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := builtinsMux()
	var ran atomic.Int32
	mux.HandleFunc("chain.count", func(context.Context, *executor.Job) (any, error) {
		ran.Add(1)
		return nil, nil
	})
	s.executor("w1", mux, 4)
	s.apply(chainDef("a", "builtin.fail"))
	s.apply(chainDef("b", "chain.count", "a"))
	s.apply(chainDef("c", "chain.count", "b:failure"))

	id := s.fire("a", nil)
	s.waitState(id, schemas.StateFailed, 60*time.Second)
	run := s.runOf(id)
	b := s.chained("b", run, schemas.StateSkipped, 60*time.Second)
	if got, want := skippedReason(b), "parent a ended FAILED but the task runs after it on success"; got != want {
		t.Errorf("b SKIPPED for %q, want %q", got, want)
	}
	// b's own end propagates: c runs after b on failure, and b did not fail.
	c := s.chained("c", run, schemas.StateSkipped, 60*time.Second)
	if got, want := skippedReason(c), "parent b ended SKIPPED but the task runs after it on failure"; got != want {
		t.Errorf("c SKIPPED for %q, want %q", got, want)
	}
	if p := c.Parents["b"]; p.InstanceID != b.ID || p.State != schemas.StateSkipped {
		t.Errorf("c's parents = %+v", c.Parents)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("a skipped task's handler ran %d times", n)
	}
}

func TestChainOnFailureAndAlways(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("chain.maybe", func(_ context.Context, task *executor.Job) (any, error) {
		var p struct{ Fail bool }
		if err := json.Unmarshal(task.Payload, &p); err != nil {
			return nil, executor.Permanent(err)
		}
		if p.Fail {
			return nil, executor.Permanent(errors.New("failed as asked"))
		}
		return "fine", nil
	})
	mux.HandleFunc("chain.noop", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	s.executor("w1", mux, 4)
	s.apply(chainDef("p", "chain.maybe"))
	s.apply(chainDef("onfail", "chain.noop", "p:failure"))
	s.apply(chainDef("always", "chain.noop", "p:always"))

	ok := s.fire("p", map[string]bool{"fail": false})
	s.waitState(ok, schemas.StateSucceeded, 60*time.Second)
	okRun := s.runOf(ok)
	s.chained("always", okRun, schemas.StateSucceeded, 60*time.Second)
	skipped := s.chained("onfail", okRun, schemas.StateSkipped, 60*time.Second)
	if got, want := skippedReason(skipped), "parent p ended SUCCEEDED but the task runs after it on failure"; got != want {
		t.Errorf("onfail SKIPPED for %q, want %q", got, want)
	}

	bad := s.fire("p", map[string]bool{"fail": true})
	s.waitState(bad, schemas.StateFailed, 60*time.Second)
	badRun := s.runOf(bad)
	if badRun == okRun {
		t.Fatalf("two firings share the run %s", badRun)
	}
	onfail := s.chained("onfail", badRun, schemas.StateSucceeded, 60*time.Second)
	if createdReason(onfail) != "after p (FAILED)" {
		t.Errorf("onfail's CREATED reason = %q", createdReason(onfail))
	}
	s.chained("always", badRun, schemas.StateSucceeded, 60*time.Second)
}

// TestChainJoinUnderConcurrentEnds runs 20 diamonds whose middle tasks all
// end at the same instant, their reports recorded by two dispatchers: each
// join must fire exactly once, though its two parents end in different
// transactions that cannot see each other.
func TestChainJoinUnderConcurrentEnds(t *testing.T) {
	t.Parallel()
	const diamonds = 20
	s := newSystem(t)
	conn, _ := s.srv.Connect()
	second, err := dispatcher.New(dispatcher.Options{Conn: conn, Store: s.store, Streams: streams.Config{LeaseTTL: leaseTTL},
		Logger: s.log, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Start(s.t, "dispatcher-2", second)

	// Every middle attempt waits until all of them run, then they all end.
	var arrived atomic.Int32
	release := make(chan struct{})
	var mu sync.Mutex
	joins := make(map[string]int)
	mux := executor.NewMux()
	mux.HandleFunc("chain.now", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	mux.HandleFunc("chain.barrier", func(ctx context.Context, _ *executor.Job) (any, error) {
		if arrived.Add(1) == 2*diamonds {
			close(release)
		}
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	mux.HandleFunc("chain.join", func(_ context.Context, task *executor.Job) (any, error) {
		mu.Lock()
		joins[task.RunID]++
		mu.Unlock()
		return nil, nil
	})
	s.executor("w1", mux, 3*diamonds)
	s.executor("w2", mux, 3*diamonds)
	s.apply(chainDef("root", "chain.now"))
	s.apply(chainDef("left", "chain.barrier", "root"))
	s.apply(chainDef("right", "chain.barrier", "root"))
	s.apply(chainDef("join", "chain.join", "left", "right"))

	var wg sync.WaitGroup
	runs := make([]string, diamonds)
	for i := range diamonds {
		wg.Go(func() {
			res, err := s.client.Fire(context.Background(), "root", wire.FireRequest{})
			if err != nil || res.InstanceID == 0 {
				t.Errorf("fire root: %+v, %v", res, err)
				return
			}
			runs[i] = fmt.Sprintf("run-%d", res.InstanceID)
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, run := range runs {
		s.chained("join", run, schemas.StateSucceeded, 30*time.Second)
	}
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	var instances, perRun int
	if err := s.pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT run_id) FROM instances WHERE task = 'join'`).Scan(&instances, &perRun); err != nil {
		t.Fatal(err)
	}
	if instances != diamonds || perRun != diamonds {
		t.Errorf("join has %d instances in %d runs, want %d in %d", instances, perRun, diamonds, diamonds)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, run := range runs {
		if joins[run] != 1 {
			t.Errorf("join ran %d times in %s, want once", joins[run], run)
		}
	}
}

func TestChainCycleRefusedAtApply(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(chainDef("a", "h", "c"))
	s.apply(chainDef("b", "h", "a"))

	_, err := s.client.ApplyTask(context.Background(), []byte(chainDef("c", "h", "b")), "application/yaml")
	var ae *wire.Error
	if !errors.As(err, &ae) {
		t.Fatalf("applying c after b (closing a → b → c → a) = %v, want an API error", err)
	}
	if ae.Status != http.StatusBadRequest || ae.Code != "invalid_task" || ae.Field != "after" ||
		!strings.Contains(ae.Message, "chain cycle: c → a → b → c") {
		t.Errorf("refusal = %d %s field %q: %q; want 400 invalid_task on after naming c → a → b → c",
			ae.Status, ae.Code, ae.Field, ae.Message)
	}
	_, err = s.client.GetTask(context.Background(), "c")
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Errorf("GetTask(c) after the refusal = %v, want 404: nothing stored", err)
	}
}

func TestChainTwoRootJoinWaitsForTheSameRun(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := builtinsMux()
	s.executor("w1", mux, 4)
	s.apply(chainDef("r1", "builtin.echo"))
	s.apply(chainDef("r2", "builtin.echo"))
	s.apply(chainDef("j", "builtin.echo", "r1", "r2"))

	first := s.fire("r1", nil)
	s.waitState(first, schemas.StateSucceeded, 60*time.Second)
	run := s.runOf(first)
	// r2 in a run of its own does not complete r1's.
	other := s.fire("r2", nil)
	s.waitState(other, schemas.StateSucceeded, 60*time.Second)
	s.drained(s.srv.Topology.ReportsStream(), "recorder")
	s.drained(s.srv.Topology.TriggersStream(), "dispatcher")
	list, err := s.store.ListInstances(context.Background(), store.InstanceFilter{Task: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("j fired before r2 ran in run %s: %+v", run, list)
	}

	res, err := s.client.Fire(context.Background(), "r2", wire.FireRequest{RunID: run, Payload: json.RawMessage(`"second"`)})
	if err != nil || res.InstanceID == 0 {
		t.Fatalf("fire r2 into %s: %+v, %v", run, res, err)
	}
	if got := s.runOf(res.InstanceID); got != run {
		t.Errorf("r2 fired with run_id %s is in run %s", run, got)
	}
	j := s.chained("j", run, schemas.StateSucceeded, 60*time.Second)
	if j.Parents["r1"].InstanceID != first || j.Parents["r2"].InstanceID != res.InstanceID ||
		string(j.Parents["r2"].Output) != `"second"` {
		t.Errorf("j's parents = %+v, want r1 %d and r2 %d", j.Parents, first, res.InstanceID)
	}
}
