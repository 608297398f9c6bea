package taskdef

import (
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// requireProblem fails unless err is a *ValidationError of what with a
// problem at field whose message contains msg, and its text names the field.
func requireProblem(t *testing.T, err error, what, field, msg string) {
	t.Helper()
	var verr *schemas.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if verr.What != what {
		t.Errorf("What = %q, want %q", verr.What, what)
	}
	if !strings.HasPrefix(err.Error(), "invalid "+what+": ") {
		t.Errorf("Error() = %q, want the prefix %q", err.Error(), "invalid "+what+": ")
	}
	for _, p := range verr.Problems {
		if p.Field == field && strings.Contains(p.Message, msg) {
			if !strings.Contains(err.Error(), p.String()) {
				t.Errorf("Error() = %q does not hold %q", err.Error(), p.String())
			}
			return
		}
	}
	t.Errorf("no problem {%q, %q…} among %q", field, msg, verr.Problems)
}
