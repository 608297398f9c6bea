package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
	"github.com/rs/zerolog"
)

// isolationExecutor starts an executor that requeues busy work quickly.
func (s *system) isolationExecutor(workerID string, mux *executor.Mux, slots int) {
	conn, _ := s.srv.Connect()
	executortest.Run(s.t, executor.Options{
		Conn: conn, WorkerID: workerID, Mux: mux, Slots: slots, Logger: slog.New(zerolog.NewSlogHandler(s.log)),
		RequeueDelay: 50 * time.Millisecond,
	})
}

// Through the whole pipeline, a slow handler limited to one slot leaves
// the worker's other slots to a fast one, and none of its own firings is
// lost while they wait for that slot.
func TestIsolationSlowHandlerLeavesTheWorkerToOthers(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	entered := make(chan struct{}, 10)
	open := make(chan struct{})
	var slowRuns atomic.Int32
	mux := builtinsMux()
	mux.HandleFunc("test.slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		slowRuns.Add(1)
		entered <- struct{}{}
		select {
		case <-open:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}, executor.Concurrency(1))
	s.isolationExecutor("w1", mux, 4)
	s.apply(`
task_name: slow-export
execution:
  handler: test.slow
`)
	s.apply(`
task_name: quick
execution:
  handler: builtin.echo
`)
	var slow, quick []int64
	for range 3 {
		slow = append(slow, s.fire("slow-export", nil))
	}
	<-entered
	for i := range 6 {
		quick = append(quick, s.fire("quick", map[string]int{"n": i}))
	}
	for _, id := range quick {
		s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	}
	if n := slowRuns.Load(); n != 1 {
		t.Fatalf("%d slow attempts run, want 1 while the first holds the handler's slot", n)
	}
	close(open)
	for _, id := range slow {
		if inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second); inst.Attempt != 1 {
			t.Errorf("slow instance %d needed attempt %d, want 1: a requeue is not a retry", id, inst.Attempt)
		}
	}
	s.drained(s.srv.Topology.DispatchStream(), streams.PoolConsumerName("default", schemas.PriorityNormal, "test.slow"))
}

// Through the whole pipeline, a handler limited to 5 starts a second
// starts 10 instances over at least 9/5 = 1.8 s, read from the instances'
// started times.
func TestIsolationRateLimitThroughThePipeline(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.limited", func(context.Context, *executor.Job) (any, error) { return nil, nil },
		executor.RateLimit(5, 1))
	s.isolationExecutor("w1", mux, 16)
	s.apply(`
task_name: limited
execution:
  handler: test.limited
  timeout: 1s
`)
	var ids []int64
	for range 10 {
		ids = append(ids, s.fire("limited", nil))
	}
	var starts []time.Time
	for _, id := range ids {
		inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
		starts = append(starts, *inst.StartedAt)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	if span := starts[len(starts)-1].Sub(starts[0]); span < 1700*time.Millisecond {
		t.Errorf("10 instances at 5/s started within %s, want about 1.8 s", span)
	}
}

// Through the whole pipeline, an attempt that fails after its business
// step is retried by the dispatcher, and the retry skips the step.
func TestIsolationOnceSkipsTheDoneStepOnRetry(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	var charges atomic.Int32
	mux := executor.NewMux()
	mux.HandleFunc("test.checkout", func(ctx context.Context, task *executor.Job) (any, error) {
		err := executor.Once(ctx, "charge-"+task.EventID, func(context.Context) error {
			charges.Add(1)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if task.Attempt == 1 {
			return nil, errors.New("receipt mailer down")
		}
		return map[string]int{"attempt": task.Attempt}, nil
	})
	s.isolationExecutor("w1", mux, 4)
	s.apply(`
task_name: checkout
execution:
  handler: test.checkout
  retry:
    max_attempts: 2
    initial_interval_sec: 0
`)
	id := s.fire("checkout", nil)
	inst := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	want := []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→RETRYING",
		"RETRYING→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}
	if got := path(inst); !slices.Equal(got, want) {
		t.Errorf("transitions = %v, want %v", got, want)
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("the business step ran %d times over 2 attempts, want 1", n)
	}
}

// examples/isolation.yaml applies, and its mutex key reaches the stored task.
func TestIsolationExampleApplies(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	def, err := os.ReadFile("../../examples/isolation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.client.ApplyTask(context.Background(), def, "application/yaml")
	if err != nil {
		t.Fatalf("apply examples/isolation.yaml: %v", err)
	}
	if got := res.Task.Concurrency.MutexKey; got != "shop-{{.shop_id}}" {
		t.Errorf("stored mutex_key = %q", got)
	}
	if _, err := s.client.ApplyTask(context.Background(), []byte("task_name: broken\nexecution:\n  handler: h\nconcurrency:\n  mutex_key: 'shop-{{.shop_id'\n"), "application/yaml"); err == nil {
		t.Error("a mutex_key that does not parse was applied")
	}
}
