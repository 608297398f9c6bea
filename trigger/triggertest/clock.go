// Package triggertest helps test code that runs the trigger service: a
// simulated [trigger.Clock] that moves only when the test moves it.
package triggertest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/trigger"
)

// WaitTimeout is how long, in real time, [Clock.WaitTimers] waits.
const WaitTimeout = time.Minute

// Clock is a simulated [trigger.Clock]. Time stands still until the test
// calls [Clock.Set] or [Clock.Advance], which fire every timer that falls
// due, earliest first. A test learns that the code under test has done its
// work and gone back to waiting from [Clock.WaitTimers]: a service that arms
// its timer again is idle until that deadline. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	armed  map[*timer]struct{}
	change chan struct{} // closed and replaced whenever a timer is armed or disarmed
}

// NewClock returns a clock that reads start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, armed: make(map[*timer]struct{}), change: make(chan struct{})}
}

// Now returns the simulated time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock reaches now + d.
func (c *Clock) NewTimer(d time.Duration) trigger.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d (see [Clock.Set]).
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t, forward or back, and fires every armed timer
// whose deadline is not after t, earliest first.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	due := make([]*timer, 0, len(c.armed))
	for tm := range c.armed {
		if !tm.deadline.After(t) {
			due = append(due, tm)
		}
	}
	slices.SortFunc(due, func(a, b *timer) int { return a.deadline.Compare(b.deadline) })
	for _, tm := range due {
		tm.fireLocked()
	}
}

// Timers returns the deadlines of the armed timers, earliest first.
func (c *Clock) Timers() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timersLocked()
}

func (c *Clock) timersLocked() []time.Time {
	out := make([]time.Time, 0, len(c.armed))
	for tm := range c.armed {
		out = append(out, tm.deadline)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// WaitTimers waits until at least n timers are armed with a deadline after
// the clock's time — n services (or loops) have done what was due and wait
// for their next deadline — and returns the armed deadlines, earliest
// first. It fails t after [WaitTimeout] of real time.
func (c *Clock) WaitTimers(t testing.TB, n int) []time.Time {
	t.Helper()
	return c.WaitFor(t, func(now time.Time, deadlines []time.Time) bool {
		k := 0
		for _, d := range deadlines {
			if d.After(now) {
				k++
			}
		}
		return k >= n
	})
}

// WaitFor waits until cond holds for the clock's time and the deadlines of
// the armed timers (earliest first), and returns the deadlines. cond is
// checked whenever a timer is armed or disarmed. It fails t after
// [WaitTimeout] of real time.
func (c *Clock) WaitFor(t testing.TB, cond func(now time.Time, deadlines []time.Time) bool) []time.Time {
	t.Helper()
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		now, timers, change := c.now, c.timersLocked(), c.change
		c.mu.Unlock()
		if cond(now, timers) {
			return timers
		}
		select {
		case <-change:
		case <-deadline.C:
			t.Fatalf("triggertest: gave up after %v waiting for the timers; at %v they are %v", WaitTimeout, now, timers)
		}
	}
}

// Step waits for n armed timers (see [Clock.WaitTimers]), moves the clock to
// the earliest deadline after now, and returns it.
func (c *Clock) Step(t testing.TB, n int) time.Time {
	t.Helper()
	now := c.Now()
	for _, d := range c.WaitTimers(t, n) {
		if d.After(now) {
			c.Set(d)
			return d
		}
	}
	panic("unreachable: WaitTimers saw a deadline after now")
}

// changedLocked wakes the waiters of WaitFor.
func (c *Clock) changedLocked() {
	close(c.change)
	c.change = make(chan struct{})
}

// timer is a simulated trigger.Timer.
type timer struct {
	c        *Clock
	ch       chan time.Time
	deadline time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.disarmLocked()
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.disarmLocked()
	t.deadline = t.c.now.Add(d)
	if d <= 0 {
		t.fireLocked()
		return was
	}
	t.c.armed[t] = struct{}{}
	t.c.changedLocked()
	return was
}

// disarmLocked disarms t and drops a value it sent but nobody received, as
// a time.Timer does since Go 1.23.
func (t *timer) disarmLocked() bool {
	_, was := t.c.armed[t]
	if was {
		delete(t.c.armed, t)
		t.c.changedLocked()
	}
	select {
	case <-t.ch:
	default:
	}
	return was
}

// fireLocked sends the time and disarms t.
func (t *timer) fireLocked() {
	if _, ok := t.c.armed[t]; ok {
		delete(t.c.armed, t)
		t.c.changedLocked()
	}
	select {
	case t.ch <- t.c.now:
	default:
	}
}
