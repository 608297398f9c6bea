package taskdef

import "github.com/ax-scheduler/ax/schemas"

// limitsProblems checks what task.schema.json cannot say of a task's
// limits: they replace concurrency.max_running_instances, whose own
// admission would count the same attempts twice.
func limitsProblems(t *schemas.Task) []schemas.Problem {
	if len(t.Limits) > 0 && t.Concurrency.MaxRunningInstances > 0 {
		return []schemas.Problem{{Field: "limits", Message: "cannot be combined with concurrency.max_running_instances; " +
			"apply a limit with concurrency: N and no key, and name it in limits instead"}}
	}
	return nil
}
