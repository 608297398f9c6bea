package trigger

import "time"

// Clock tells the time and makes timers. It is where the trigger service
// reads the time and the timer its schedule waits on, so that a test can run
// the service on a simulated clock (triggertest.Clock) without sleeping.
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed (at once when d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a [Clock]. Stop and Reset behave as
// [time.Timer]'s do since Go 1.23: once either returns, no value sent
// before it is received from C.
type Timer interface {
	// C returns the channel the timer sends on when it fires.
	C() <-chan time.Time
	// Stop stops the timer and reports whether it was armed.
	Stop() bool
	// Reset re-arms the timer to fire after d and reports whether it was armed.
	Reset(d time.Duration) bool
}

// RealClock returns the system clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.Timer.C }
