package taskdef

import "testing"

func TestSlotsAndFairness(t *testing.T) {
	t.Parallel()
	task, err := ParseTask([]byte(`{"task_name":"report","execution":{"handler":"h","slots":4},
		"dispatch":{"fairness":{"key":"{{.tenant}}","weights":{"big":3}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if task.Execution.Slots != 4 || task.Dispatch.Fairness.Key != "{{.tenant}}" || task.Dispatch.Fairness.Weight("big") != 3 ||
		task.Dispatch.Fairness.Weight("small") != 1 {
		t.Errorf("parsed %+v %+v", task.Execution, task.Dispatch.Fairness)
	}
	for _, tc := range []struct{ name, in, field, msg string }{
		{"zero slots", `{"task_name":"r","execution":{"handler":"h","slots":0}}`, "execution.slots", "1"},
		{"too many slots", `{"task_name":"r","execution":{"handler":"h","slots":5000}}`, "execution.slots", "1024"},
		{"fractional slots", `{"task_name":"r","execution":{"handler":"h","slots":1.5}}`, "execution.slots", "whole number"},
		{"no key", `{"task_name":"r","execution":{"handler":"h"},"dispatch":{"fairness":{"weights":{"a":2}}}}`, "dispatch.fairness.key", "required"},
		{"bad key", `{"task_name":"r","execution":{"handler":"h"},"dispatch":{"fairness":{"key":"{{.tenant"}}}`, "dispatch.fairness.key", "Go text/template"},
		{"zero weight", `{"task_name":"r","execution":{"handler":"h"},"dispatch":{"fairness":{"key":"k","weights":{"a":0}}}}`, "dispatch.fairness.weights.a", "1"},
		{"hash", `{"task_name":"r","execution":{"handler":"h"},"dispatch":{"strategy":"hash","fairness":{"key":"k"}}}`, "dispatch.fairness", `only allowed with strategy "pull"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTask([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseTask accepted %s", tc.in)
			}
			t.Log(err)
			requireProblem(t, err, "task definition", tc.field, tc.msg)
		})
	}
}
