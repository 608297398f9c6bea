// Package waittest is the poll helper of AX's tests: [For] waits for a
// condition with a deadline and fails the test, naming what it waited for,
// when the deadline passes or the condition fails.
package waittest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/internal/wait"
)

// For waits, with [wait.Until], up to timeout for cond to hold. It fails
// the test with what when cond returns an error or the timeout passes.
func For(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait.Until(ctx, cond); errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	} else if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ForTrue is [For] for a condition that cannot fail.
func ForTrue(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	For(t, what, timeout, func() (bool, error) { return cond(), nil })
}
