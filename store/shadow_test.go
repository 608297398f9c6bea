package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestShadowInstancesEndAndMove: a SHADOW instance is created ended
// (finished at its creation, CREATED→SHADOW recorded), and the history
// mover moves it like any ended one.
func TestShadowInstancesEndAndMove(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	applyTasks(t, st, "a")
	in := newRunInstance("a", "e1", "", schemas.StateShadow)
	in.FiredAt, in.Reason = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), "task is in shadow mode"
	made := create(t, st, in)
	got, err := st.GetInstance(t.Context(), made[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != schemas.StateShadow || got.FinishedAt == nil || len(got.Transitions) != 2 ||
		got.Transitions[1].From != schemas.StateCreated || got.Transitions[1].To != schemas.StateShadow {
		t.Fatalf("SHADOW instance = %+v, want it finished with CREATED→SHADOW", got)
	}
	relayAll(t, pool)
	if res := moveAll(t, st); res.Copied != 1 || res.Moved != 1 {
		t.Fatalf("MoveHistory = %+v, want the SHADOW instance moved", res)
	}
}

// TestSetTaskShadow: shadow mode enables the task and stamps its start;
// each way out clears it, enabled or disabled; a repeat changes nothing.
func TestSetTaskShadow(t *testing.T) {
	t.Parallel()
	pool := storetest.NewDB(t)
	st := store.New(pool)
	ctx := t.Context()
	applyTasks(t, st, "a")
	if _, err := st.SetTaskEnabled(ctx, "a", false, "ann"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		shadow, enabled bool
		wantEnabled     bool
	}{{true, false, true}, {true, false, true}, {false, false, false}, {true, true, true}, {false, true, true}} {
		rec, err := st.SetTaskShadow(ctx, "a", step.shadow, step.enabled, "ann")
		if err != nil {
			t.Fatal(err)
		}
		if rec.Shadow != step.shadow || rec.Enabled != step.wantEnabled || (rec.ShadowSince != nil) != step.shadow {
			t.Errorf("SetTaskShadow(%t, %t) = shadow %t enabled %t since %v", step.shadow, step.enabled, rec.Shadow, rec.Enabled, rec.ShadowSince)
		}
	}
	rows, err := pool.Query(ctx, `SELECT action FROM operator_actions WHERE task = 'a' AND action <> 'apply' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	want := []string{"disable", "enable", "shadow_start", "shadow_stop", "disable", "enable", "shadow_start", "shadow_stop"}
	if len(got) != len(want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("actions %v, want %v", got, want)
		}
	}
	if _, err := st.SetTaskShadow(ctx, "nope", true, true, "ann"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetTaskShadow of an unknown task: %v, want ErrNotFound", err)
	}
}
