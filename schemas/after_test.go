package schemas

import (
	"reflect"
	"testing"
)

func TestAfterDefaults(t *testing.T) {
	t.Parallel()
	orig := &Task{TaskName: "d", Execution: Execution{Handler: "h"}, After: []After{{Task: "a"}, {Task: "b", On: OnAlways}}}
	got := orig.WithDefaults().After
	if want := []After{{Task: "a", On: OnSuccess}, {Task: "b", On: OnAlways}}; !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaults().After = %+v, want %+v", got, want)
	}
	if orig.After[0].On != "" {
		t.Error("WithDefaults changed the original's after")
	}
}

func TestAfterConditionHolds(t *testing.T) {
	t.Parallel()
	ends := []State{StateSucceeded, StateFailed, StateSkipped, StateCancelled}
	for _, tc := range []struct {
		on   AfterCondition
		want []bool // for each of ends
	}{
		{"", []bool{true, false, false, false}},
		{OnSuccess, []bool{true, false, false, false}},
		{OnFailure, []bool{false, true, false, false}},
		{OnAlways, []bool{true, true, true, true}},
	} {
		for i, s := range ends {
			if got := tc.on.Holds(s); got != tc.want[i] {
				t.Errorf("AfterCondition(%q).Holds(%s) = %t, want %t", tc.on, s, got, tc.want[i])
			}
		}
		if tc.on.Holds(StateRunning) {
			t.Errorf("%q holds for a running parent", tc.on)
		}
	}
}
