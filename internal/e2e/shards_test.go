package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// child is one child instance of a sharded or broadcast firing.
type child struct {
	ID                     int64
	EventID                string
	ShardIndex, ShardCount int
	State                  schemas.State
	Attempt                int
	WorkerID               string
}

// children lists the children of parent, by shard index.
func (s *system) children(parent int64) []child {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `
SELECT id, event_id, shard_index, shard_count, state, attempt, worker_id FROM instances
WHERE parent_id = $1 ORDER BY shard_index`, parent)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []child
	for rows.Next() {
		var c child
		if err := rows.Scan(&c.ID, &c.EventID, &c.ShardIndex, &c.ShardCount, &c.State, &c.Attempt, &c.WorkerID); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// shardMux serves "test.shard", which records the shards it saw and fails
// every attempt of shard fail (-1: none).
func shardMux(mu *sync.Mutex, seen *[][2]int, fail int) *executor.Mux {
	m := executor.NewMux()
	m.HandleFunc("test.shard", func(_ context.Context, t *executor.Job) (any, error) {
		mu.Lock()
		*seen = append(*seen, [2]int{t.ShardIndex, t.ShardCount})
		mu.Unlock()
		if t.ShardIndex == fail {
			return nil, errors.New("shard 2 is broken")
		}
		return nil, nil
	})
	return m
}

func TestShards(t *testing.T) {
	s := newSystem(t)
	var mu sync.Mutex
	var seen [][2]int
	s.worker(executor.Options{WorkerID: "w1", Mux: shardMux(&mu, &seen, -1)})
	s.worker(executor.Options{WorkerID: "w2", Mux: shardMux(&mu, &seen, -1)})
	s.apply("task_name: split\nexecution: {handler: test.shard, shards: 4}\n")

	id := s.fire("split", map[string]int{"day": 1})
	parent := s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	if got := path(parent); !slices.Equal(got, []string{"→CREATED", "CREATED→DISPATCHED", "DISPATCHED→RUNNING", "RUNNING→SUCCEEDED"}) {
		t.Errorf("parent path = %v", got)
	}
	kids := s.children(id)
	if len(kids) != 4 {
		t.Fatalf("%d children, want 4: %+v", len(kids), kids)
	}
	for i, c := range kids {
		if c.ShardIndex != i || c.ShardCount != 4 || c.State != schemas.StateSucceeded || c.EventID != fmt.Sprintf("%s/shard-%d", parent.EventID, i) {
			t.Errorf("child %d = %+v, want shard %d of 4 SUCCEEDED", i, c, i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(seen, func(a, b [2]int) int { return a[0] - b[0] })
	if !slices.Equal(seen, [][2]int{{0, 4}, {1, 4}, {2, 4}, {3, 4}}) {
		t.Errorf("handlers saw shards %v, want 0..3 of 4 once each", seen)
	}
}

func TestShardFails(t *testing.T) {
	s := newSystem(t)
	var mu sync.Mutex
	var seen [][2]int
	s.worker(executor.Options{WorkerID: "w1", Mux: shardMux(&mu, &seen, 2)})
	s.apply("task_name: split\nexecution: {handler: test.shard, shards: 4, retry: {max_attempts: 2, initial_interval_sec: 0}}\n")

	id := s.fire("split", nil)
	parent := s.waitState(id, schemas.StateFailed, 60*time.Second)
	if !strings.Contains(parent.Error, "2 (FAILED)") {
		t.Errorf("parent error = %q, want it to name shard 2", parent.Error)
	}
	for _, c := range s.children(id) {
		want, attempts := schemas.StateSucceeded, 1
		if c.ShardIndex == 2 {
			want, attempts = schemas.StateFailed, 2
		}
		if c.State != want || c.Attempt != attempts {
			t.Errorf("shard %d ended %s at attempt %d, want %s at %d", c.ShardIndex, c.State, c.Attempt, want, attempts)
		}
	}
}

func TestBroadcast(t *testing.T) {
	s := newSystem(t)
	var c calls
	for _, id := range []string{"w1", "w2", "w3"} {
		s.worker(executor.Options{WorkerID: id, Mux: c.mux(id)})
	}
	s.routedTo("w1", "w2", "w3")
	s.apply("task_name: everywhere\nexecution: {handler: test.where}\ndispatch: {strategy: broadcast}\n")

	id := s.fire("everywhere", nil)
	s.waitState(id, schemas.StateSucceeded, 60*time.Second)
	kids := s.children(id)
	var on []string
	for _, k := range kids {
		on = append(on, k.WorkerID)
	}
	slices.Sort(on)
	if !slices.Equal(on, []string{"w1", "w2", "w3"}) {
		t.Fatalf("children ran on %v, want one on each of w1, w2, w3", on)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		if n := c.of(w); n != 1 {
			t.Errorf("worker %s ran %d attempts, want 1", w, n)
		}
	}
}
