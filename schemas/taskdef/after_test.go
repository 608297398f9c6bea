package taskdef

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestParseTaskAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		want []schemas.After
	}{
		{"yaml, bare on", "task_name: d\nexecution: {handler: h}\nafter:\n  - task: a\n  - task: b\n    on: failure\n  - {task: c, on: always}\n",
			[]schemas.After{{Task: "a"}, {Task: "b", On: schemas.OnFailure}, {Task: "c", On: schemas.OnAlways}}},
		{"yaml, quoted on", "task_name: d\nexecution: {handler: h}\nafter:\n  - task: a\n    \"on\": success\n",
			[]schemas.After{{Task: "a", On: schemas.OnSuccess}}},
		{"json", `{"task_name":"d","execution":{"handler":"h"},"after":[{"task":"a","on":"failure"}]}`,
			[]schemas.After{{Task: "a", On: schemas.OnFailure}}},
		{"empty", `{"task_name":"d","execution":{"handler":"h"},"after":[]}`, nil},
		{"32 parents", `{"task_name":"d","execution":{"handler":"h"},"after":[` + parents(32) + `]}`, afters(32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task, err := ParseTask([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(task.After, tc.want) {
				t.Errorf("after = %+v, want %+v", task.After, tc.want)
			}
		})
	}
}

func TestParseTaskAfterRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, field, msg string
	}{
		{"itself", "task_name: d\nexecution: {handler: h}\nafter: [{task: d}]\n", "after[0].task", `must not name the task itself: "d"`},
		{"a parent twice", "task_name: d\nexecution: {handler: h}\nafter: [{task: a}, {task: b}, {task: a, on: failure}]\n",
			"after[2].task", `names "a" again (after[0] names it already)`},
		{"33 parents", `{"task_name":"d","execution":{"handler":"h"},"after":[` + parents(33) + `]}`, "after", "must have at most 32 items"},
		{"unknown condition", "task_name: d\nexecution: {handler: h}\nafter: [{task: a, on: done}]\n", "after[0].on", "must be one of success, failure, always"},
		{"bad task name", "task_name: d\nexecution: {handler: h}\nafter: [{task: A.b}]\n", "after[0].task", "must be a task name"},
		{"no task", "task_name: d\nexecution: {handler: h}\nafter: [{on: failure}]\n", "after[0].task", "is required"},
		{"unknown field", "task_name: d\nexecution: {handler: h}\nafter: [{task: a, when: failure}]\n", "after[0]", `unknown field "when"`},
		{"not a list", "task_name: d\nexecution: {handler: h}\nafter: a\n", "after", "must be a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseTask([]byte(tc.in))
			requireProblem(t, err, "task definition", tc.field, tc.msg)
		})
	}
}

func TestChainEventID(t *testing.T) {
	t.Parallel()
	if got, want := schemas.ChainEventID("report", "run-4711"), "chain:report:run-4711"; got != want {
		t.Errorf("ChainEventID = %q, want %q", got, want)
	}
	// The longest task name and run id still make a valid event id.
	ev := `{"event_id":"` + schemas.ChainEventID(strings.Repeat("t", 64), strings.Repeat("r", 128)) + `","run_id":"` + strings.Repeat("r", 128) + `"}`
	if _, err := ParseTriggerEvent([]byte(ev)); err != nil {
		t.Errorf("the longest chain firing is refused: %v", err)
	}
}

// TestExamples parses every task definition under examples/.
func TestExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples found under ../../examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseTask(data); err != nil {
				t.Fatalf("ParseTask(%s): %v", f, err)
			}
		})
	}
}

func parents(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = `{"task":"p` + string(rune('a'+i/26)) + string(rune('a'+i%26)) + `"}`
	}
	return strings.Join(s, ",")
}

func afters(n int) []schemas.After {
	out := make([]schemas.After, n)
	for i := range out {
		out[i] = schemas.After{Task: "p" + string(rune('a'+i/26)) + string(rune('a'+i%26))}
	}
	return out
}
