package schemas

import "testing"

func TestValidationErrorWithoutWhat(t *testing.T) {
	t.Parallel()
	err := &ValidationError{Problems: []Problem{{Field: "", Message: "is empty"}, {Field: "a.b", Message: "is required"}}}
	if got, want := err.Error(), "invalid input: is empty; a.b: is required"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
