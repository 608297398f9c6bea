package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// parseTask parses a definition the way the API does.
func parseTask(t testing.TB, def string) *schemas.Task {
	t.Helper()
	task, err := taskdef.ParseTask([]byte(def))
	if err != nil {
		t.Fatalf("parse task: %v", err)
	}
	return task
}

func taskVersions(t *testing.T, pool *pgxpool.Pool, name string) (versions []int, operators []string) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT version, operator FROM task_versions WHERE name = $1 ORDER BY version`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var op string
		if err := rows.Scan(&v, &op); err != nil {
			t.Fatal(err)
		}
		versions, operators = append(versions, v), append(operators, op)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return versions, operators
}

func TestApplyTask(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()

	rec, changed, err := st.ApplyTask(ctx, parseTask(t, "task_name: report\nexecution: {handler: builtin.echo}\n"), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !changed || rec.Version != 1 || !rec.Enabled || rec.Name != "report" {
		t.Fatalf("first apply = %+v changed=%t, want version 1, enabled, changed", rec, changed)
	}
	// The stored definition carries its defaults.
	if d := rec.Definition; d.Priority != schemas.PriorityNormal || d.Execution.Timeout != "1h" ||
		d.SchemaVersion != 1 || d.Execution.Retry.MaxAttempts != 1 {
		t.Errorf("definition without defaults: %+v", d)
	}

	// The same definition, with a default spelt out and keys reordered:
	// nothing changes.
	again, changed, err := st.ApplyTask(ctx, parseTask(t, `{"execution": {"handler": "builtin.echo", "timeout": "1h"}, "task_name": "report"}`), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if changed || again.Version != 1 || !again.UpdatedAt.Equal(rec.UpdatedAt) {
		t.Errorf("unchanged apply = version %d changed=%t updated %v (was %v), want version 1 unchanged", again.Version, changed, again.UpdatedAt, rec.UpdatedAt)
	}

	v2, changed, err := st.ApplyTask(ctx, parseTask(t, "task_name: report\ndescription: nightly\nexecution: {handler: builtin.echo}\n"), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if !changed || v2.Version != 2 || v2.Definition.Description != "nightly" || !v2.CreatedAt.Equal(rec.CreatedAt) {
		t.Errorf("changed apply = %+v changed=%t, want version 2 with the description", v2, changed)
	}
	versions, operators := taskVersions(t, pool, "report")
	if fmt.Sprint(versions, operators) != "[1 2] [alice carol]" {
		t.Errorf("task_versions = %v %v, want [1 2] [alice carol]", versions, operators)
	}

	got, err := st.GetTask(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || got.Definition.Description != "nightly" {
		t.Errorf("GetTask = %+v, want version 2", got)
	}
}

func TestApplyTaskConcurrent(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	const n = 8

	// n different definitions at once: n versions, none lost.
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	calmDef := parseTask(t, "task_name: calm\nexecution: {handler: h}\n")
	for i := range n {
		def := parseTask(t, fmt.Sprintf("task_name: busy\ndescription: d%d\nexecution: {handler: h}\n", i))
		wg.Go(func() {
			if _, _, err := st.ApplyTask(t.Context(), def, "op"); err != nil {
				errs <- err
			}
		})
	}
	// n identical definitions at once: one version.
	for range n {
		wg.Go(func() {
			if _, _, err := st.ApplyTask(t.Context(), calmDef, "op"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	busy, _ := taskVersions(t, pool, "busy")
	calm, _ := taskVersions(t, pool, "calm")
	if len(busy) != n || busy[n-1] != n {
		t.Errorf("busy versions = %v, want 1..%d", busy, n)
	}
	if fmt.Sprint(calm) != "[1]" {
		t.Errorf("calm versions = %v, want [1]", calm)
	}
	rec, err := st.GetTask(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version != n {
		t.Errorf("busy is at version %d, want %d", rec.Version, n)
	}
}

func TestApplyTaskRefusesNoName(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	if _, _, err := st.ApplyTask(t.Context(), &schemas.Task{}, "op"); err == nil {
		t.Fatal("ApplyTask of a definition without task_name succeeded")
	}
}

func TestGetTasks(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	for _, name := range []string{"b", "a", "c"} {
		if _, _, err := st.ApplyTask(ctx, parseTask(t, "task_name: "+name+"\nexecution: {handler: h}\n"), ""); err != nil {
			t.Fatal(err)
		}
	}

	list, err := st.ListTasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list {
		names = append(names, r.Name)
	}
	if fmt.Sprint(names) != "[a b c]" {
		t.Errorf("ListTasks names = %v, want [a b c]", names)
	}

	got, err := st.GetTasks(ctx, []string{"c", "a", "missing", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"].Name != "a" || got["c"].Definition.TaskName != "c" {
		t.Errorf("GetTasks = %v, want a and c", got)
	}
	none, err := st.GetTasks(ctx, nil)
	if err != nil || len(none) != 0 {
		t.Errorf("GetTasks(nil) = %v, %v; want an empty map", none, err)
	}

	_, err = st.GetTask(ctx, "missing")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTask(missing) error = %v, want ErrNotFound", err)
	}
}

func TestSetTaskEnabled(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	rec, _, err := st.ApplyTask(ctx, parseTask(t, "task_name: t1\nexecution: {handler: h}\n"), "")
	if err != nil {
		t.Fatal(err)
	}

	off, err := st.SetTaskEnabled(ctx, "t1", false, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if off.Enabled || off.Version != rec.Version || !off.UpdatedAt.After(rec.UpdatedAt) {
		t.Errorf("disabled = %+v, want disabled, same version, later updated_at", off)
	}
	offAgain, err := st.SetTaskEnabled(ctx, "t1", false, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !offAgain.UpdatedAt.Equal(off.UpdatedAt) {
		t.Errorf("disabling a disabled task moved updated_at from %v to %v", off.UpdatedAt, offAgain.UpdatedAt)
	}
	// Applying a definition leaves the flag alone.
	if rec, _, err = st.ApplyTask(ctx, parseTask(t, "task_name: t1\ndescription: x\nexecution: {handler: h}\n"), ""); err != nil {
		t.Fatal(err)
	}
	if rec.Enabled {
		t.Error("applying a new version enabled a disabled task")
	}
	on, err := st.SetTaskEnabled(ctx, "t1", true, "alice")
	if err != nil || !on.Enabled {
		t.Errorf("enable = %+v, %v; want enabled", on, err)
	}

	_, err = st.SetTaskEnabled(ctx, "missing", true, "alice")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetTaskEnabled(missing) error = %v, want ErrNotFound", err)
	}
}
