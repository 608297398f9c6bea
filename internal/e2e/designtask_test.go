package e2e_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// designTask is the design document's own task, verbatim: hash routing
// with no hash_key (the same task keeps to the same node) over the nodes
// carrying either tag.
const designTask = `{
  "task_name": "order-sync",
  "owner": "orders-team",
  "description": "Syncs the orders to the data nodes.",
  "execution": {
    "handler": "com.ax.handler.OrderSyncHandler",
    "timeout": 300,
    "retry": {"max_attempts": 3, "backoff": "exp", "initial_interval_sec": 1, "max_interval_sec": 10}
  },
  "dispatch": {"strategy": "hash", "tags": ["data-node-a", "data-node-b"]},
  "priority": "normal",
  "triggers": [{"type": "manual"}]
}`

// TestDesignTaskRunsOnEitherTag applies the design's task as written: it
// is accepted, ax task apply's answer names the workers that may take it
// (one of each tag), every firing runs on one of them, the same one each
// time (the task is the hash key), and when that one stops the next
// firing runs on the worker of the other tag. A task of tags_all names
// the one AND-pool, which neither worker serves.
func TestDesignTaskRunsOnEitherTag(t *testing.T) {
	s := newSystem(t)
	var mu sync.Mutex
	count := map[string]int{}
	mux := func(id string) *executor.Mux {
		m := executor.NewMux()
		m.HandleFunc("com.ax.handler.OrderSyncHandler", func(context.Context, *executor.Job) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			count[id]++
			return nil, nil
		})
		return m
	}
	stop := map[string]func(){
		"node-a": s.worker(executor.Options{WorkerID: "node-a", Pools: []string{"data-node-a"}, Mux: mux("node-a")}),
		"node-b": s.worker(executor.Options{WorkerID: "node-b", Pools: []string{"data-node-b"}, Mux: mux("node-b")}),
	}
	s.routedTo("node-a", "node-b")
	res, err := s.client.ApplyTask(context.Background(), []byte(designTask), "application/json")
	if err != nil {
		t.Fatalf("apply the design's task: %v", err)
	}
	var fit []string
	for _, w := range res.Workers {
		fit = append(fit, w.ID+"@"+w.Pool)
	}
	if !slices.Equal(fit, []string{"node-a@data-node-a", "node-b@data-node-b"}) || len(res.Warnings) > 0 {
		t.Errorf("apply said workers %v, warnings %q; want node-a@data-node-a and node-b@data-node-b, no warning", fit, res.Warnings)
	}
	ran := s.ranOn("order-sync", nil, nil, nil, nil, nil)
	first := ran[0]
	for _, w := range ran {
		if w != first || stop[w] == nil {
			t.Fatalf("firings ran on %v, want all on node-a or all on node-b (the task is the hash key)", ran)
		}
	}
	if in := s.waitState(s.fire("order-sync", nil), schemas.StateSucceeded, time.Minute); in.Pool != "data-node-a|data-node-b" || in.WorkerID != first {
		t.Errorf("instance ran on %s in pool %q, want %s in data-node-a|data-node-b", in.WorkerID, in.Pool, first)
	}
	stop[first]()
	other := "node-a"
	if first == "node-a" {
		other = "node-b"
	}
	s.routedTo(other)
	if w := s.ranOn("order-sync", nil)[0]; w != other {
		t.Errorf("with %s stopped the firing ran on %s, want %s", first, w, other)
	}
	mu.Lock()
	if count[first] != len(ran)+1 || count[other] != 1 {
		t.Errorf("the handler ran %v, want %d times on %s and once on %s", count, len(ran)+1, first, other)
	}
	mu.Unlock()

	res, err = s.client.ApplyTask(context.Background(),
		[]byte(`{"task_name": "both-tags", "execution": {"handler": "com.ax.handler.OrderSyncHandler"}, "dispatch": {"tags_all": ["data-node-b", "data-node-a"]}}`), "application/json")
	if err != nil {
		t.Fatalf("apply a tags_all task: %v", err)
	}
	if len(res.Workers) != 0 || len(res.Warnings) != 1 {
		t.Errorf("tags_all task: apply said workers %v, warnings %q; want none, and a warning", res.Workers, res.Warnings)
	}
	id := s.fire("both-tags", nil)
	if in := s.waitState(id, schemas.StateDispatched, time.Minute); in.Pool != "data-node-a+data-node-b" {
		t.Errorf("tags_all instance's pool is %q, want data-node-a+data-node-b", in.Pool)
	}
}
