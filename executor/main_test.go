package executor_test

import (
	"testing"

	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) {
	waittest.VerifyTestMain(m)
}
