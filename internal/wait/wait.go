// Package wait holds the small waits AX's services and tests share.
package wait

import (
	"context"
	"time"
)

// Sleep waits for d or for ctx to end, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Intervals of [Until]: the first wait, doubling up to the last.
const (
	FirstInterval = time.Millisecond
	MaxInterval   = 50 * time.Millisecond
)

// Until calls cond until it reports done or fails, waiting between calls
// from FirstInterval, doubling up to MaxInterval, and returns nil once it
// is done, cond's error, or ctx's error when ctx ends first. It is the one
// poll loop of AX's tests: a test gives it a deadline with ctx and waits on
// the condition it means.
func Until(ctx context.Context, cond func() (bool, error)) error {
	for interval := FirstInterval; ; interval = min(2*interval, MaxInterval) {
		done, err := cond()
		if err != nil || done {
			return err
		}
		if !Sleep(ctx, interval) {
			return ctx.Err()
		}
	}
}
