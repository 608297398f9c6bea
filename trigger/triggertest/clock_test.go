package triggertest

import (
	"testing"
	"time"
)

func TestClockFiresDueTimersInOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	a, b := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	if got := c.Timers(); len(got) != 2 || !got[0].Equal(start.Add(time.Second)) {
		t.Fatalf("Timers() = %v", got)
	}
	c.Advance(500 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("a timer fired early")
	default:
	}
	c.Set(start.Add(3 * time.Second))
	for _, tm := range []interface{ C() <-chan time.Time }{a, b} {
		select {
		case v := <-tm.C():
			if !v.Equal(start.Add(3 * time.Second)) {
				t.Errorf("timer sent %v, want the clock's time", v)
			}
		default:
			t.Error("a due timer did not fire")
		}
	}
	if len(c.Timers()) != 0 {
		t.Errorf("fired timers are still armed: %v", c.Timers())
	}
}

func TestTimerStopAndResetDropStaleValues(t *testing.T) {
	t.Parallel()
	c := NewClock(time.Unix(0, 0))
	tm := c.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Error("Stop did not report whether the timer was armed")
	}
	tm.Reset(time.Second)
	c.Advance(time.Second) // fires; nobody receives
	if tm.Reset(time.Minute) {
		t.Error("Reset of a fired timer reported it armed")
	}
	select {
	case <-tm.C():
		t.Error("a value from before Reset was received")
	default:
	}
	tm.Reset(0)
	select {
	case <-tm.C():
	default:
		t.Error("Reset(0) did not fire at once")
	}
}

func TestStepWaitsForTheTimer(t *testing.T) {
	t.Parallel()
	c := NewClock(time.Unix(100, 0))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm := c.NewTimer(0) // fires at once: not yet waiting
		<-tm.C()
		tm.Reset(5 * time.Second)
		<-tm.C()
	}()
	if got := c.Step(t, 1); !got.Equal(time.Unix(105, 0)) {
		t.Errorf("Step moved to %v, want %v", got, time.Unix(105, 0))
	}
	<-done
}
