package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// chainTask is a definition of task name that runs after parents, given as
// "task" (on success) or "task:on".
func chainTask(t *testing.T, name string, parents ...string) *schemas.Task {
	t.Helper()
	def := "task_name: " + name + "\nexecution: {handler: h}\n"
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
	return parseTask(t, def)
}

func TestApplyTaskRefusesChainCycles(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	for _, def := range []*schemas.Task{chainTask(t, "a", "c"), chainTask(t, "b", "a"), chainTask(t, "x")} {
		if _, _, err := st.ApplyTask(ctx, def, "alice"); err != nil {
			t.Fatal(err)
		}
	}

	_, _, err := st.ApplyTask(ctx, chainTask(t, "c", "x", "b"), "alice")
	var ce *store.ChainCycleError
	if !errors.As(err, &ce) {
		t.Fatalf("applying c after b closes a → b → c → a, but ApplyTask returned %v", err)
	}
	if want := []string{"c", "a", "b", "c"}; !slices.Equal(ce.Cycle, want) {
		t.Errorf("cycle = %q, want %q", ce.Cycle, want)
	}
	if !strings.Contains(err.Error(), "chain cycle: c → a → b → c") {
		t.Errorf("error %q does not name the cycle", err)
	}
	// Nothing of c was stored: no task, no version, no audited action.
	if _, err := st.GetTask(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask(c) after the refusal = %v, want not found", err)
	}
	if versions, _ := taskVersions(t, pool, "c"); len(versions) != 0 {
		t.Errorf("task_versions holds %v for c", versions)
	}
	if actions := actionRows(t, pool, "c"); len(actions) != 0 {
		t.Errorf("operator_actions holds %q for c", actions)
	}

	// A new version of a task on the would-be cycle is judged by its new
	// after, not its stored one: a no longer after c breaks the cycle.
	if _, _, err := st.ApplyTask(ctx, chainTask(t, "a", "x"), "alice"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyTask(ctx, chainTask(t, "c", "x", "b"), "alice"); err != nil {
		t.Fatalf("c after b, with a now after x: %v", err)
	}
	// And now a after c closes the cycle again, from a's side.
	_, _, err = st.ApplyTask(ctx, chainTask(t, "a", "c"), "alice")
	if !errors.As(err, &ce) || !slices.Equal(ce.Cycle, []string{"a", "b", "c", "a"}) {
		t.Errorf("a after c = %v, want the cycle a → b → c → a", err)
	}
	rec, err := st.GetTask(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Definition.After; len(got) != 1 || got[0].Task != "x" {
		t.Errorf("a's stored after = %+v, want the version after x to stay", got)
	}
}

// TestApplyTaskCycleCheckIsSerialised applies the two halves of a cycle at
// the same moment, many times: exactly one of each pair must win.
func TestApplyTaskCycleCheckIsSerialised(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	for i := range 10 {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, def := range []*schemas.Task{chainTask(t, a, b), chainTask(t, b, a)} {
			wg.Go(func() { _, _, errs[j] = st.ApplyTask(t.Context(), def, "") })
		}
		wg.Wait()
		var refused int
		for _, err := range errs {
			var ce *store.ChainCycleError
			switch {
			case errors.As(err, &ce):
				refused++
			case err != nil:
				t.Fatal(err)
			}
		}
		if refused != 1 {
			t.Fatalf("pair %d: %d of 2 concurrent applies closing a cycle were refused, want 1 (errors %v)", i, refused, errs)
		}
	}
}

// newRunInstance is a firing of task in run (empty: a new run) for CreateInstances.
func newRunInstance(task, eventID, run string, state schemas.State) store.NewInstance {
	return store.NewInstance{
		Task: task, TaskVersion: 1, EventID: eventID, Source: schemas.SourceEvent, Priority: schemas.PriorityNormal,
		Pool: "default", Handler: "h", TimeoutMS: 60000, MaxAttempts: 1, FiredAt: time.Now(), State: state, RunID: run,
	}
}

func TestCreateInstancesNamesRuns(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	applyTasks(t, st, "a", "b")
	parents := map[string]schemas.ParentResult{
		"a": {InstanceID: 1, State: schemas.StateSucceeded, Output: json.RawMessage(`{"rows":3}`)},
	}
	chained := newRunInstance("b", "e2", "run-joined", schemas.StateDispatched)
	chained.Parents = parents
	got, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("a", "e1", "", schemas.StateDispatched), chained})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("created %d instances, want 2", len(got))
	}
	byTask := map[string]store.Attempt{got[0].Task: got[0], got[1].Task: got[1]}
	root := byTask["a"]
	if want := fmt.Sprintf("run-%d", root.ID); root.RunID != want {
		t.Errorf("a root firing's run id = %q, want %q (its instance's)", root.RunID, want)
	}
	if root.Parents != nil {
		t.Errorf("a root's parents = %v, want none", root.Parents)
	}
	if b := byTask["b"]; b.RunID != "run-joined" || !reflectEqualParents(b.Parents, parents) {
		t.Errorf("chained instance: run %q parents %v, want run-joined and %v", b.RunID, b.Parents, parents)
	}

	// A repeated firing returns the instance with its run unchanged.
	again, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("a", "e1", "run-other", schemas.StateDispatched)})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != root.ID || again[0].RunID != root.RunID {
		t.Errorf("the repeated firing returned %+v, want instance %d in %s", again, root.ID, root.RunID)
	}
	// The instance as the API shows it.
	in, err := st.GetInstance(ctx, byTask["b"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if in.RunID != "run-joined" || !reflectEqualParents(in.Parents, parents) {
		t.Errorf("GetInstance: run %q parents %v", in.RunID, in.Parents)
	}
}

// compact returns a JSON document without insignificant space (PostgreSQL's
// jsonb writes "a": 1 where the input had "a":1).
func compact(doc json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return string(doc)
	}
	return b.String()
}

func reflectEqualParents(a, b map[string]schemas.ParentResult) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || va.InstanceID != vb.InstanceID || va.State != vb.State || compact(va.Output) != compact(vb.Output) {
			return false
		}
	}
	return true
}

// finishInstance ends instance id's first attempt: succeeded with output, or failed.
func finishInstance(t *testing.T, st *store.Store, id int64, ok bool, output string) store.Outcome {
	t.Helper()
	r := schemas.Report{InstanceID: id, Attempt: 1, WorkerID: "w", At: time.Now(), StartedAt: time.Now(), Kind: schemas.ReportFailed, Error: "boom"}
	if ok {
		r.Kind, r.Error, r.Output = schemas.ReportSucceeded, "", json.RawMessage(output)
	}
	out, err := st.ApplyReports(t.Context(), nil, []schemas.Report{r})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || !out[0].Applied {
		t.Fatalf("report on instance %d not applied: %+v", id, out)
	}
	return out[0]
}

func TestChainFirings(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	// a → (b, c) → d, and e after a on failure.
	for _, def := range []*schemas.Task{
		chainTask(t, "a"), chainTask(t, "b", "a"), chainTask(t, "c", "a"), chainTask(t, "d", "b", "c:always"),
		chainTask(t, "e", "a:failure"),
	} {
		if _, _, err := st.ApplyTask(ctx, def, ""); err != nil {
			t.Fatal(err)
		}
	}
	created, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("a", "root", "", schemas.StateDispatched)})
	if err != nil {
		t.Fatal(err)
	}
	run := created[0].RunID
	o := finishInstance(t, st, created[0].ID, true, `{"n":1}`)
	if o.RunID != run || o.State != schemas.StateSucceeded {
		t.Fatalf("outcome %+v, want run %s SUCCEEDED", o, run)
	}

	firings, err := st.ChainFirings(ctx, []store.RunEnd{{Task: "a", RunID: run}, {Task: "a", RunID: run}, {Task: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	// Every child of a fires, whatever its condition: the dispatcher judges it.
	var tasks []string
	for _, f := range firings {
		tasks = append(tasks, f.Task)
		p := f.Parents["a"]
		if f.RunID != run || len(f.Parents) != 1 || p.InstanceID != created[0].ID || p.State != schemas.StateSucceeded ||
			compact(p.Output) != `{"n":1}` {
			t.Errorf("firing %+v, want run %s with a's instance %d SUCCEEDED and its output", f, run, created[0].ID)
		}
	}
	slices.Sort(tasks)
	if want := []string{"b", "c", "e"}; !slices.Equal(tasks, want) {
		t.Errorf("the end of a fires %q, want %q once each", tasks, want)
	}

	// d waits for both b and c.
	mid, err := st.CreateInstances(ctx, []store.NewInstance{
		newRunInstance("b", "chain:b", run, schemas.StateDispatched),
		newRunInstance("c", "chain:c", run, schemas.StateDispatched),
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{mid[0].Task: mid[0].ID, mid[1].Task: mid[1].ID}
	finishInstance(t, st, ids["b"], true, `"b-out"`)
	firings, err = st.ChainFirings(ctx, []store.RunEnd{{Task: "b", RunID: run}})
	if err != nil {
		t.Fatal(err)
	}
	if len(firings) != 0 {
		t.Fatalf("d fired while c still runs: %+v", firings)
	}
	// Another run's c does not count.
	other, err := st.CreateInstances(ctx, []store.NewInstance{newRunInstance("c", "elsewhere", "run-elsewhere", schemas.StateSkipped)})
	if err != nil {
		t.Fatal(err)
	}
	if firings, err = st.ChainFirings(ctx, []store.RunEnd{{Task: "b", RunID: run}}); err != nil || len(firings) != 0 {
		t.Fatalf("d fired with c of another run ended (instance %d): %+v, %v", other[0].ID, firings, err)
	}

	finishInstance(t, st, ids["c"], false, "")
	firings, err = st.ChainFirings(ctx, []store.RunEnd{{Task: "c", RunID: run}, {Task: "b", RunID: run}})
	if err != nil {
		t.Fatal(err)
	}
	if len(firings) != 1 || firings[0].Task != "d" {
		t.Fatalf("after b and c ended: %+v, want d once", firings)
	}
	want := map[string]schemas.ParentResult{
		"b": {InstanceID: ids["b"], State: schemas.StateSucceeded, Output: json.RawMessage(`"b-out"`)},
		"c": {InstanceID: ids["c"], State: schemas.StateFailed},
	}
	if !reflectEqualParents(firings[0].Parents, want) {
		t.Errorf("d's parents = %+v, want %+v", firings[0].Parents, want)
	}

	// A new version's after replaces the old one: e no longer follows a,
	// and d now follows b alone.
	for _, def := range []*schemas.Task{chainTask(t, "e"), chainTask(t, "d", "b")} {
		if _, _, err := st.ApplyTask(ctx, def, ""); err != nil {
			t.Fatal(err)
		}
	}
	firings, err = st.ChainFirings(ctx, []store.RunEnd{{Task: "a", RunID: run}, {Task: "b", RunID: run}})
	if err != nil {
		t.Fatal(err)
	}
	tasks = tasks[:0]
	for _, f := range firings {
		tasks = append(tasks, f.Task)
		if f.Task == "d" && len(f.Parents) != 1 {
			t.Errorf("d fires with parents %+v, want b alone", f.Parents)
		}
	}
	slices.Sort(tasks)
	if want := []string{"b", "c", "d"}; !slices.Equal(tasks, want) {
		t.Errorf("after the new versions, the ends of a and b fire %q, want %q", tasks, want)
	}
}

// TestDueAfterEndsIsOneRoundTrip ends an instance of a task that has a
// chained child and a WAITING instance, beside an instance that waits for
// a named limit: one round trip finds the child's firing, the task's
// WAITING instances and that an instance waits for a limit, where the
// dispatcher asked in three (the chain look-up, the look at the WAITING
// instances, and its limiter's look, poked after every batch of ends) — at
// a steady rate, after every small batch of ends.
func TestDueAfterEndsIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	pool, sent := storetest.NewCounted(t)
	st := store.New(pool)
	ctx := t.Context()
	for _, def := range []*schemas.Task{chainTask(t, "a"), chainTask(t, "b", "a")} {
		if _, _, err := st.ApplyTask(ctx, def, ""); err != nil {
			t.Fatal(err)
		}
	}
	created, err := st.CreateInstances(ctx, []store.NewInstance{
		newRunInstance("a", "root", "", schemas.StateDispatched),
		newRunInstance("a", "later", "", schemas.StateWaiting),
	})
	if err != nil {
		t.Fatal(err)
	}
	root := created[slices.IndexFunc(created, func(a store.Attempt) bool { return a.EventID == "root" })]
	finishInstance(t, st, root.ID, true, `{}`)
	run := root.RunID

	before := sent.RoundTrips()
	due, err := st.DueAfterEnds(ctx, []store.RunEnd{{Task: "a", RunID: run}})
	if err != nil {
		t.Fatal(err)
	}
	if trips := sent.RoundTrips() - before; trips != 1 {
		t.Errorf("DueAfterEnds took %d round trips, want 1", trips)
	}
	if len(due.Firings) != 1 || due.Firings[0].Task != "b" || due.Firings[0].RunID != run {
		t.Errorf("firings %+v, want b in run %s", due.Firings, run)
	}
	if !slices.Equal(due.Waiting, []string{"a"}) {
		t.Errorf("tasks with WAITING instances %q, want [a]", due.Waiting)
	}
	if due.Limited {
		t.Error("DueAfterEnds says instances wait for limits; none does")
	}

	// An instance waits for a paused limit; an end without a run finds it
	// and the WAITING instances, and no firing.
	if _, err := st.ApplyLimit(ctx, schemas.Limit{Name: "api", Concurrency: 1, Paused: true}); err != nil {
		t.Fatal(err)
	}
	if w, err := st.CreateAdmittedInstances(ctx, "b", []string{"api"},
		[]store.NewInstance{newRunInstance("b", "held", "", schemas.StateDispatched)}); err != nil || len(w) != 1 || w[0].State != schemas.StateWaiting {
		t.Fatalf("CreateAdmittedInstances under a paused limit = %v, %v; want the firing WAITING", w, err)
	}
	if due, err = st.DueAfterEnds(ctx, []store.RunEnd{{Task: "a"}}); err != nil || len(due.Firings) != 0 ||
		!slices.Equal(due.Waiting, []string{"a"}) || !due.Limited {
		t.Errorf("DueAfterEnds of an end without a run = %+v, %v; want no firing, [a] and an instance waiting for a limit", due, err)
	}
	promoted, err := st.StartWaiting(ctx, due.Waiting)
	if err != nil || len(promoted) != 1 || promoted[0].EventID != "later" {
		t.Errorf("StartWaiting(%q) = %+v, %v; want the WAITING instance started", due.Waiting, promoted, err)
	}
}
