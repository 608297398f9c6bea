package e2e_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/internal/metrics/metricstest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestHeavyAttemptsTakeTheirSlots runs a task that declares slots: 4 on a
// worker of 16 slots: four run at once, the others wait until one ends;
// then sixteen light attempts run at once on the same worker.
func TestHeavyAttemptsTakeTheirSlots(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	s := newSystem(t)
	s.monitor(reg)
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)
	s.apply("task_name: heavy\nexecution:\n  handler: slots.block\n  slots: 4\n")
	s.apply("task_name: light\nexecution:\n  handler: slots.block\n")
	var (
		mu      sync.Mutex
		running int
		gates   = map[string]chan struct{}{"heavy": make(chan struct{}), "light": make(chan struct{})}
	)
	mux := executor.NewMux()
	mux.HandleFunc("slots.block", func(ctx context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		running++
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-gates[j.Name]:
		case <-ctx.Done():
		}
		return nil, nil
	})
	worker := s.executor("w16", mux, 16)
	runningNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return running
	}
	ctx := context.Background()
	cons, err := s.js.Consumer(ctx, s.srv.Topology.DispatchStream(),
		streams.PoolConsumerName(schemas.DefaultPool, schemas.PriorityNormal, "slots.block"))
	if err != nil {
		t.Fatal(err)
	}
	var heavy []int64
	for range 6 {
		heavy = append(heavy, s.fire("heavy", nil))
	}
	// Four start and fill the worker; the other two wait on the queue.
	waitFor(t, "4 heavy runs and 2 waiting", 30*time.Second, func() (bool, error) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err
		}
		return runningNow() == 4 && info.NumPending+uint64(info.NumAckPending) >= 2, nil
	})
	if n, busy := runningNow(), worker.Busy(); n != 4 || busy != 16 {
		t.Fatalf("%d heavy attempts run, %d of 16 slots busy; want 4 runs of 4 slots", n, busy)
	}
	// The pool's gauge counts the slots of the two that wait, not runs.
	waitFor(t, "ax_pool_waiting_slots to count 2 × 4 slots", 60*time.Second, func() (bool, error) {
		v, _ := value(metricstest.Scrape(t, srv), "ax_pool_waiting_slots", map[string]string{"pool": "default", "priority": "normal"})
		return v == 8, nil
	})
	close(gates["heavy"])
	for _, id := range heavy {
		s.waitState(id, schemas.StateSucceeded, 30*time.Second)
	}
	var light []int64
	for range 16 {
		light = append(light, s.fire("light", nil))
	}
	waitFor(t, "16 light runs at once", 30*time.Second, func() (bool, error) { return runningNow() == 16, nil })
	close(gates["light"])
	for _, id := range light {
		s.waitState(id, schemas.StateSucceeded, 30*time.Second)
	}
}
