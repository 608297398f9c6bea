package taskdef

import (
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
)

// redactProblems checks a task's redact list.
func redactProblems(paths []string) []schemas.Problem {
	var problems []schemas.Problem
	if len(paths) > schemas.MaxRedactPaths {
		problems = append(problems, schemas.Problem{Field: "redact", Message: fmt.Sprintf("lists %d paths; keep it to %d", len(paths), schemas.MaxRedactPaths)})
	}
	seen := make(map[string]bool, len(paths))
	for i, p := range paths {
		field := fmt.Sprintf("redact[%d]", i)
		if _, err := schemas.ParseRedactPath(p); err != nil {
			problems = append(problems, schemas.Problem{Field: field, Message: err.Error()})
			continue
		}
		if seen[p] {
			problems = append(problems, schemas.Problem{Field: field, Message: fmt.Sprintf("%q is listed twice; keep one", p)})
		}
		seen[p] = true
	}
	return problems
}
