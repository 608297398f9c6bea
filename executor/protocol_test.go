package executor_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// TestProtocolVersion checks both sides of the executor protocol's
// version on the worker: its record declares the version it speaks, and a
// dispatch message written in a later one is given back, not run, while a
// message of a dispatcher older than the field (no protocol: version 1)
// runs.
func TestProtocolVersion(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var mu sync.Mutex
	var ran []int64
	mux := executor.NewMux()
	mux.HandleFunc("count", func(_ context.Context, task *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, task.InstanceID)
		return nil, nil
	})
	executortest.Run(t, w.options(mux))

	e, err := w.workers.Get(t.Context(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["protocol"] != float64(schemas.ExecutorProtocol) {
		t.Errorf("worker record %s: protocol = %v, want %d", e.Value(), rec["protocol"], schemas.ExecutorProtocol)
	}

	// The later version first: by the time the older message's final
	// report is out, the worker has fetched and judged both.
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 2, Handler: "count", Protocol: schemas.ExecutorProtocol + 1})
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "count"})
	w.succeeded(1)
	c, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), streams.PoolConsumerName(schemas.DefaultPool, schemas.PriorityNormal, "count"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the later version's message delivered and given back", func() bool {
		info, err := c.Info(t.Context())
		return err == nil && info.Delivered.Consumer >= 2 && info.NumAckPending == 1
	})
	w.noMoreReports()
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != 1 {
		t.Errorf("the handler ran instances %v, want only 1 (instance 2 is written in protocol %d)", ran, schemas.ExecutorProtocol+1)
	}
}

// TestJoiningWorkerKeepsConsumerSettings checks that a worker that finds
// its pool's consumer already there (made by another worker, or tuned by
// an operator) pulls from it as it is and does not rewrite its settings:
// a worker joining must not change what the others use.
func TestJoiningWorkerKeepsConsumerSettings(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := w.topo.PoolConsumer(schemas.DefaultPool, schemas.PriorityNormal, executor.BuiltinEcho)
	cfg.AckWait = 2 * time.Minute
	cfg.MaxAckPending = 7
	cfg.Description = "tuned by an operator"
	if _, err := w.js.CreateConsumer(t.Context(), w.topo.DispatchStream(), cfg); err != nil {
		t.Fatal(err)
	}
	executortest.Run(t, w.options(builtins()))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 5, Handler: executor.BuiltinEcho, Payload: json.RawMessage(`1`)})
	w.succeeded(5)

	c, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := info.Config
	if got.AckWait != cfg.AckWait || got.MaxAckPending != cfg.MaxAckPending || got.Description != cfg.Description {
		t.Errorf("after a worker joined, consumer %s has ack wait %s, max ack pending %d, description %q; want %s, %d, %q as it was",
			cfg.Durable, got.AckWait, got.MaxAckPending, got.Description, cfg.AckWait, cfg.MaxAckPending, cfg.Description)
	}
	if _, err := w.js.Consumer(t.Context(), w.topo.DispatchStream(), "worker_w1"); err != nil {
		t.Errorf("the worker's own consumer: %v", err)
	}
}
