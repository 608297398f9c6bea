package dispatcher

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// TestCachedTaskIsReadAgainWhenItChanges fires a task, which puts it in the
// dispatcher's cache, then changes it between firings: each firing after a
// change makes its instance from the task as it is — SKIPPED once paused,
// DISPATCHED once resumed, in the new pool once a new version is applied —
// never from the record the cache kept.
func TestCachedTaskIsReadAgainWhenItChanges(t *testing.T) {
	t.Parallel()
	def := &schemas.Task{TaskName: "cached", Execution: schemas.Execution{Handler: "test.noop"}}
	r := newBatchRig(t, def)
	r.start()
	check := func(eventID string, state schemas.State, version int, pool string) {
		t.Helper()
		r.fire("cached", eventID)
		in := r.instance("cached", eventID, "the instance of "+eventID)
		if in.State != state || in.TaskVersion != version || in.Pool != pool {
			t.Fatalf("firing %s: instance %s of version %d in pool %q, want %s of version %d in pool %q",
				eventID, in.State, in.TaskVersion, in.Pool, state, version, pool)
		}
	}
	check("e1", schemas.StateDispatched, 1, "default")
	if _, err := r.st.SetTaskPaused(r.ctx, "cached", true, "ops"); err != nil {
		t.Fatal(err)
	}
	check("e2", schemas.StateSkipped, 1, "default")
	if _, err := r.st.SetTaskPaused(r.ctx, "cached", false, "ops"); err != nil {
		t.Fatal(err)
	}
	check("e3", schemas.StateDispatched, 1, "default")
	moved := *def
	moved.Dispatch.Tags = []string{"other"}
	if _, _, err := r.st.ApplyTask(r.ctx, &moved, "ops"); err != nil {
		t.Fatal(err)
	}
	check("e4", schemas.StateDispatched, 2, "other")
}

// TestTaskCacheKeepsARecordForItsTTL: a record read is found until
// cachedTaskTTL has passed or it is dropped, and the cache starts again
// empty rather than hold more than maxCachedTasks.
func TestTaskCacheKeepsARecordForItsTTL(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	c := newTaskCache()
	c.now = func() time.Time { return clock }
	record := func(name string) store.TaskRecord {
		return store.TaskRecord{Name: name, Version: 1, Stamp: "7",
			Definition: &schemas.Task{TaskName: name, Execution: schemas.Execution{Handler: "h"}}}
	}
	missing := func(names ...string) []string {
		recs, defs := map[string]store.TaskRecord{}, map[string]*schemas.Task{}
		miss := c.get(names, recs, defs)
		for name, rec := range recs {
			if defs[name] == nil || defs[name].Execution.Timeout == "" || rec.Stamp != "7" {
				t.Fatalf("task %s found as %+v with definition %+v: want its record and its definition with defaults", name, rec, defs[name])
			}
		}
		return miss
	}
	if got := missing("a"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("empty cache: missing %v, want [a]", got)
	}
	c.put(map[string]store.TaskRecord{"a": record("a"), "b": record("b")}, map[string]store.TaskRecord{}, map[string]*schemas.Task{})
	if got := missing("a", "b", "c"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a and b were read: missing %v, want [c]", got)
	}
	c.drop([]string{"a"})
	if got := missing("a", "b"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a was dropped: missing %v, want [a]", got)
	}
	clock = clock.Add(cachedTaskTTL)
	if got := missing("b"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after the TTL: missing %v, want [b]", got)
	}
	many := make(map[string]store.TaskRecord, maxCachedTasks)
	for i := range maxCachedTasks {
		name := fmt.Sprintf("t%d", i)
		many[name] = record(name)
	}
	c.put(many, map[string]store.TaskRecord{}, map[string]*schemas.Task{})
	c.put(map[string]store.TaskRecord{"last": record("last")}, map[string]store.TaskRecord{}, map[string]*schemas.Task{})
	if n := len(c.tasks); n != 1 {
		t.Fatalf("after %d tasks and one more: %d kept, want the cache started again with the last one", maxCachedTasks, n)
	}
}
