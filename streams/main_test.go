package streams

import (
	"testing"

	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	waittest.VerifyTestMain(m)
}
