package wait

import (
	"context"
	"errors"
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

func TestUntil(t *testing.T) {
	t.Parallel()
	calls := 0
	if err := Until(context.Background(), func() (bool, error) { calls++; return calls == 3, nil }); err != nil || calls != 3 {
		t.Errorf("Until = %v after %d calls, want nil after 3", err, calls)
	}
	boom := errors.New("boom")
	if err := Until(context.Background(), func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("Until with a failing condition = %v, want %v", err, boom)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := Until(ctx, func() (bool, error) { return false, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Until past its deadline = %v, want context.DeadlineExceeded", err)
	}
}
