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
