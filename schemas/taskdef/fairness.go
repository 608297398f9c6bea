package taskdef

import (
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// fairnessProblems checks what the schema cannot say of a task's
// dispatch.fairness: its key is a template that parses, and the task's
// attempts go to the pool's queue, the one queue fairness shares.
func fairnessProblems(t *schemas.Task) []schemas.Problem {
	f := t.Dispatch.Fairness
	if f.Key == "" {
		return nil
	}
	var problems []schemas.Problem
	if _, err := schemas.ParseMutexKey(f.Key); err != nil {
		problems = append(problems, schemas.Problem{Field: "dispatch.fairness.key",
			Message: `must be a Go text/template over the payload, such as "{{.tenant}}": ` + strings.Replace(strings.TrimPrefix(err.Error(), "template: "), "mutex_key:", "key:", 1)})
	}
	if s := t.Dispatch.Strategy; s != "" && s != schemas.DispatchPull {
		problems = append(problems, schemas.Problem{Field: "dispatch.fairness",
			Message: `is only allowed with strategy "pull": fairness shares the pool's queue, and strategy "` + string(s) + `" sends each attempt to one executor's own; remove fairness or use strategy pull`})
	}
	return problems
}
