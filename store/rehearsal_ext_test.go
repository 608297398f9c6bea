package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestRehearsalFailuresCountNowhere: the failures of a drill's copy and
// of a conformance task, deleted or not, are in no failure streak, recent
// run, alert rule sum or instance summary of the fleet; a real task's are.
func TestRehearsalFailuresCountNowhere(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "real")
	for _, def := range []string{
		"task_name: drill-storm-real\ntask_type: drill\nexecution: {handler: builtin.echo}\n",
		"task_name: conformance-fail-js\ntask_type: conformance\nexecution: {handler: builtin.echo}\n",
	} {
		if _, _, err := st.ApplyTask(ctx, parseTask(t, def), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DeleteTask(ctx, "conformance-fail-js", "test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, task := range []string{"real", "drill-storm-real", "conformance-fail-js"} {
		addRun(t, pool, task, schemas.StateSucceeded, now.Add(-time.Minute), time.Second, "")
		for range 3 {
			addRun(t, pool, task, schemas.StateFailed, now, time.Second, "meant")
		}
	}
	all := []string{"real", "drill-storm-real", "conformance-fail-js"}
	streaks, err := st.FailureStreaks(ctx, all, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(streaks) != 1 || streaks["real"].Failures != 3 {
		t.Errorf("failure streaks = %+v, want real's only", streaks)
	}
	runs, err := st.RecentRuns(ctx, all, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || len(runs["real"]) != 1 {
		t.Errorf("recent runs = %+v, want real's only", runs)
	}
	ends, err := st.RecentEnds(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, e := range ends {
		tasks = append(tasks, e.Task)
	}
	if !slices.Equal(tasks, []string{"real"}) {
		t.Errorf("recent ends of tasks %v, want real's only", tasks)
	}
	sum, err := st.InstanceSummary(ctx, store.SummaryFilter{Since: now.Add(-time.Hour), Until: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 4 || sum.States[schemas.StateFailed] != 3 {
		t.Errorf("summary counts %d instances, %d failed; want real's 4 and 3", sum.Total, sum.States[schemas.StateFailed])
	}
	one, err := st.InstanceSummary(ctx, store.SummaryFilter{Task: "drill-storm-real", Since: now.Add(-time.Hour), Until: now.Add(time.Hour)})
	if err != nil || one.Total != 4 {
		t.Errorf("summary of the drill's task alone: %d instances, %v; want its 4", one.Total, err)
	}
}
