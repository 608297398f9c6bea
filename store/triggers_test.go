package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

func at(sec int) time.Time { return time.Date(2024, 5, 1, 0, 0, sec, 0, time.UTC) }

func TestSaveTriggerStates(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	for _, name := range []string{"a", "b"} {
		if _, _, err := st.ApplyTask(ctx, parseTask(t, "task_name: "+name+"\nexecution: {handler: h}\n"), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	err := st.SaveTriggerStates(ctx, []store.TriggerState{
		{Task: "a", TriggerIndex: 0, Schedule: "@daily", Timezone: "UTC", LastTick: at(10)},
		{Task: "a", TriggerIndex: 0, Schedule: "@daily", Timezone: "UTC", LastTick: at(30)}, // the same trigger twice: the later tick
		{Task: "a", TriggerIndex: 0, Schedule: "@daily", Timezone: "UTC", LastTick: at(20)},
		{Task: "a", TriggerIndex: 1, Schedule: "@hourly", Timezone: "Europe/Berlin", LastTick: at(5)},
		{Task: "b", TriggerIndex: 0, Schedule: "* * * * * *", Timezone: "UTC", LastTick: at(7)},
		{Task: "gone", TriggerIndex: 0, Schedule: "@daily", Timezone: "UTC", LastTick: at(7)}, // no such task: left out
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := st.ListTriggerStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[store.TriggerKey]time.Time{{"a", 0}: at(30), {"a", 1}: at(5), {"b", 0}: at(7)}
	if len(all) != len(want) {
		t.Fatalf("ListTriggerStates = %v, want the keys of %v", all, want)
	}
	for k, tick := range want {
		if got := all[k]; !got.LastTick.Equal(tick) || got.UpdatedAt.IsZero() || got.Key() != k {
			t.Errorf("state %v = %+v, want last tick %v", k, got, tick)
		}
	}
	if s := all[store.TriggerKey{Task: "a", TriggerIndex: 1}]; s.Schedule != "@hourly" || s.Timezone != "Europe/Berlin" {
		t.Errorf("state a/1 = %+v, want @hourly in Europe/Berlin", s)
	}

	// An older tick does not move it back; a new schedule is kept with the
	// greater tick.
	err = st.SaveTriggerStates(ctx, []store.TriggerState{
		{Task: "a", TriggerIndex: 0, Schedule: "@daily", Timezone: "UTC", LastTick: at(1)},
		{Task: "b", TriggerIndex: 0, Schedule: "@weekly", Timezone: "Asia/Tokyo", LastTick: at(3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetTriggerStates(ctx, []string{"a", "b", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if a := got[store.TriggerKey{Task: "a", TriggerIndex: 0}]; !a.LastTick.Equal(at(30)) {
		t.Errorf("a/0 moved back to %v", a.LastTick)
	}
	if b := got[store.TriggerKey{Task: "b", TriggerIndex: 0}]; !b.LastTick.Equal(at(7)) || b.Schedule != "@weekly" || b.Timezone != "Asia/Tokyo" {
		t.Errorf("b/0 = %+v, want @weekly in Asia/Tokyo at %v", b, at(7))
	}
	if len(got) != 3 {
		t.Errorf("GetTriggerStates = %d states, want 3", len(got))
	}
	if none, err := st.GetTriggerStates(ctx, nil); err != nil || len(none) != 0 {
		t.Errorf("GetTriggerStates(nil) = %v, %v", none, err)
	}

	if err := st.DeleteTriggerStates(ctx, []store.TriggerKey{{"a", 1}, {"zzz", 4}}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteTriggerStates(ctx, nil); err != nil {
		t.Fatal(err)
	}
	all, err = st.ListTriggerStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all[store.TriggerKey{Task: "a", TriggerIndex: 1}]; ok || len(all) != 2 {
		t.Errorf("after delete: %v, want a/0 and b/0", all)
	}
}

// TestSaveTriggerStatesConcurrently saves the same triggers from several
// savers at once, as trigger service replicas do: no deadlock, no error, and
// the greatest tick wins.
func TestSaveTriggerStatesConcurrently(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	const tasks = 20
	for i := range tasks {
		if _, _, err := st.ApplyTask(ctx, parseTask(t, fmt.Sprintf("task_name: t%d\nexecution: {handler: h}\n", i)), ""); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for saver := range 8 {
		wg.Go(func() {
			for round := range 10 {
				var states []store.TriggerState
				// Each saver lists the keys in its own order.
				for i := range tasks {
					n := (i*7 + saver*3) % tasks
					states = append(states, store.TriggerState{Task: fmt.Sprintf("t%d", n), Schedule: "@every 1s", Timezone: "UTC", LastTick: at(round*10 + saver)})
				}
				if err := st.SaveTriggerStates(ctx, states); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := st.ListTriggerStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tasks {
		if s := all[store.TriggerKey{Task: fmt.Sprintf("t%d", i)}]; !s.LastTick.Equal(at(97)) {
			t.Errorf("t%d: last tick %v, want %v", i, s.LastTick, at(97))
		}
	}
}
