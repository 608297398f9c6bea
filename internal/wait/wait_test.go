package wait

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if !Sleep(context.Background(), 20*time.Millisecond) {
		t.Error("Sleep on a live context reported that ctx ended")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("Sleep returned after %v, before 20ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep on an ended context reported that the hour passed")
	}
}
