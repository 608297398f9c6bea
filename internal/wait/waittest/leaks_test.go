package waittest

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A goroutine that ends seconds after the test is done is a leak to
// goleak's own check, and none to settle, which waits for it.
func TestSettleWaitsForGoroutinesThatEnd(t *testing.T) {
	ends := make(chan struct{})
	go func() {
		defer close(ends)
		time.Sleep(3 * time.Second)
	}()
	if err := goleak.Find(); err == nil {
		t.Fatal("goleak found no goroutine seconds before the one started ended")
	}
	if !settle(LeakWait) {
		t.Fatalf("settle gave up while a goroutine ran: %v", goleak.Find())
	}
	select {
	case <-ends:
	default:
		t.Error("settle returned before the goroutine ended")
	}
}

// A goroutine that never ends makes settle give up after its time.
func TestSettleGivesUpOnGoroutinesThatRunOn(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	defer func() {
		close(stop)
		<-done
	}()
	if settle(time.Second) {
		t.Fatal("settle found no goroutine while one ran")
	}
}

func TestMain(m *testing.M) { VerifyTestMain(m) }
