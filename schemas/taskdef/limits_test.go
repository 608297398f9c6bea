package taskdef_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// TestTaskLimits: a task names limits by their names; a bad name, or
// limits beside max_running_instances, is refused naming what to fix.
func TestTaskLimits(t *testing.T) {
	def, err := taskdef.ParseTask([]byte("task_name: q\nlimits: [supplier-api]\nexecution: {handler: h}\n"))
	if err != nil || len(def.Limits) != 1 || def.Limits[0] != "supplier-api" {
		t.Fatalf("ParseTask = %+v, %v; want limits [supplier-api]", def, err)
	}
	for _, tc := range []struct{ def, field, says string }{
		{"task_name: q\nlimits: [Supplier API]\nexecution: {handler: h}\n", "limits[0]", "limit's name"},
		{"task_name: q\nlimits: [a]\nconcurrency: {max_running_instances: 2}\nexecution: {handler: h}\n", "limits", "max_running_instances"},
	} {
		_, err := taskdef.ParseTask([]byte(tc.def))
		ve, ok := errors.AsType[*schemas.ValidationError](err)
		if !ok || ve.Problems[0].Field != tc.field || !strings.Contains(ve.Problems[0].Message, tc.says) {
			t.Errorf("ParseTask(%q) = %v; want a problem on %s saying %q", tc.def, err, tc.field, tc.says)
		}
	}
}
