package store

import "testing"

// TestRehearsalTasksNamesEveryType pins rehearsalTypes, a constant of the
// queries, to schemas.RehearsalTaskTypes.
func TestRehearsalTasksNamesEveryType(t *testing.T) {
	if want := rehearsalTypesSQL(); rehearsalTypes != want {
		t.Errorf("rehearsalTypes = %s, want %s", rehearsalTypes, want)
	}
}
