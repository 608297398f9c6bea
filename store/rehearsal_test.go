package store

import (
	"strings"
	"testing"
)

// TestRehearsalTasksNamesEveryType pins rehearsalTasks, a constant of the
// queries, to schemas.RehearsalTaskTypes.
func TestRehearsalTasksNamesEveryType(t *testing.T) {
	if want := rehearsalTypesSQL(); !strings.Contains(rehearsalTasks, want) {
		t.Errorf("rehearsalTasks = %s, want it to hold %s", rehearsalTasks, want)
	}
}
