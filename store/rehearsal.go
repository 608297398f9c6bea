package store

import (
	"strings"

	"github.com/ax-scheduler/ax/schemas"
)

// rehearsalTypes are schemas.RehearsalTaskTypes as a condition on a
// definition's task_type. TestRehearsalTasksNamesEveryType pins the list to
// schemas.RehearsalTaskTypes.
const rehearsalTypes = `IN ('drill', 'drill-jitter', 'conformance')`

// rehearsalTasks is a subquery of the names of the rehearsals' tasks
// (schemas.RehearsalTaskTypes: a drill's copies, the conformance kit's
// tasks), the deleted ones too: their instances fail on purpose, so the
// alert rules' sums, the failure streaks, the recent runs and the
// instance summary leave them out.
const rehearsalTasks = `(SELECT name FROM tasks WHERE definition->>'task_type' ` + rehearsalTypes + `)`

// notRehearsal is the condition that the task named t.task is not one of
// rehearsalTasks: a look-up of its row by name, for statements that take a
// few tasks (rehearsalTasks would read every task's definition).
const notRehearsal = `NOT EXISTS (SELECT FROM tasks r WHERE r.name = t.task AND r.definition->>'task_type' ` + rehearsalTypes + `)`

// rehearsalTypesSQL is schemas.RehearsalTaskTypes as rehearsalTasks
// writes them, for the test that pins one to the other.
func rehearsalTypesSQL() string {
	quoted := make([]string, len(schemas.RehearsalTaskTypes))
	for i, t := range schemas.RehearsalTaskTypes {
		quoted[i] = "'" + t + "'"
	}
	return "IN (" + strings.Join(quoted, ", ") + ")"
}
