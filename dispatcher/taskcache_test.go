package dispatcher

import (
	"testing"

	"github.com/ax-scheduler/ax/schemas"
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
