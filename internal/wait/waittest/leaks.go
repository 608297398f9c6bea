package waittest

import (
	"time"

	"go.uber.org/goleak"
)

// LeakWait is how long [VerifyTestMain] lets the goroutines of passed
// tests take to end before goleak looks for leaks.
const LeakWait = 30 * time.Second

// VerifyTestMain is [goleak.VerifyTestMain] with patience: once the tests
// passed, it waits up to [LeakWait] for every goroutine they started to
// end, then lets goleak check with opts and fail the test binary naming
// the goroutines still left. goleak's own check gives them under half a
// second, which the shutdowns a test leaves behind (a closed connection's
// read loop, a stopped server's) can exceed on a loaded machine. A
// goroutine that never ends still fails the binary, LeakWait later.
func VerifyTestMain(m goleak.TestingM, opts ...goleak.Option) {
	goleak.VerifyTestMain(patient{m, LeakWait}, opts...)
}

// patient runs the tests and then waits for their goroutines to end.
type patient struct {
	m    goleak.TestingM
	wait time.Duration
}

func (p patient) Run() int {
	code := p.m.Run()
	if code == 0 {
		settle(p.wait)
	}
	return code
}

// settle waits up to d for goleak to find no goroutine but the test
// framework's, and reports whether it found none.
func settle(d time.Duration) bool {
	for end := time.Now().Add(d); ; {
		if goleak.Find() == nil {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
