package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// rehearsalTasks is a subquery of the names of the rehearsals' tasks
// (schemas.RehearsalTaskTypes: a drill's copies, the conformance kit's
// tasks), the deleted ones too: their instances fail on purpose, so the
// alert rules' sums, the failure streaks, the recent runs and the
// instance summary leave them out. TestRehearsalTasksNamesEveryType pins
// the list to schemas.RehearsalTaskTypes.
const rehearsalTasks = `(SELECT name FROM tasks WHERE definition->>'task_type' IN ('drill', 'drill-jitter', 'conformance'))`

// withoutRehearsals returns tasks less the rehearsals' (see
// rehearsalTasks), in their order.
func (s *Store) withoutRehearsals(ctx context.Context, tasks []string) ([]string, error) {
	if len(tasks) == 0 {
		return tasks, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT name FROM `+rehearsalTasks+` r WHERE name = ANY($1)`, tasks)
	if err != nil {
		return nil, fmt.Errorf("leave out the rehearsals' tasks: %w", err)
	}
	defer rows.Close()
	skip := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("leave out the rehearsals' tasks: %w", err)
		}
		skip[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("leave out the rehearsals' tasks: %w", err)
	}
	if len(skip) == 0 {
		return tasks, nil
	}
	out := make([]string, 0, len(tasks))
	for _, t := range tasks {
		if !skip[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// rehearsalTypesSQL is schemas.RehearsalTaskTypes as rehearsalTasks
// writes them, for the test that pins one to the other.
func rehearsalTypesSQL() string {
	quoted := make([]string, len(schemas.RehearsalTaskTypes))
	for i, t := range schemas.RehearsalTaskTypes {
		quoted[i] = "'" + t + "'"
	}
	return "IN (" + strings.Join(quoted, ", ") + ")"
}
