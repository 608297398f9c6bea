package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// A handler's RetryAfter replaces the task's backoff: the next attempt
// comes when the handler asked, not 30 minutes later, and an ask beyond
// the task's max interval is cut to it.
func TestRetryAfterReplacesTheBackoff(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.snooze", func(_ context.Context, task *executor.Job) (any, error) {
		if task.Attempt == 1 {
			wait := 600 * time.Millisecond
			if task.Name == "capped" {
				wait = time.Hour
			}
			return nil, executor.RetryAfter(wait, errors.New("rate limited"))
		}
		return "done", nil
	})
	s.executor("w1", mux, 4)
	// Without the ask the second attempt would wait 1800 s.
	s.apply(`
task_name: snoozing
execution:
  handler: test.snooze
  retry:
    max_attempts: 2
    initial_interval_sec: 1800
    max_interval_sec: 3600
`)
	s.apply(`
task_name: capped
execution:
  handler: test.snooze
  retry:
    max_attempts: 2
    initial_interval_sec: 0.5
    max_interval_sec: 1
`)
	for _, tt := range []struct {
		task string
		min  time.Duration
	}{
		{"snoozing", 600 * time.Millisecond},
		{"capped", time.Second},
	} {
		id := s.fire(tt.task, nil)
		inst := s.waitState(id, schemas.StateSucceeded, 90*time.Second)
		var failedAt, retriedAt time.Time
		for _, tr := range inst.Transitions {
			switch {
			case tr.To == schemas.StateRetrying:
				failedAt = tr.At
				if tr.Reason != "rate limited" {
					t.Errorf("%s: retry reason %q, want the handler's error", tt.task, tr.Reason)
				}
			case tr.From == schemas.StateRetrying:
				retriedAt = tr.At
			}
		}
		// The dispatcher's clock starts the wait when it applies the
		// report, after the failure's time: the wait is at least the ask
		// (the cap), less a scheduler's tick of slack.
		if wait := retriedAt.Sub(failedAt); wait < tt.min-50*time.Millisecond {
			t.Errorf("%s: retried %v after the failure, want ≥ %v", tt.task, wait, tt.min)
		}
		if inst.Attempt != 2 {
			t.Errorf("%s: attempt %d, want 2", tt.task, inst.Attempt)
		}
	}
}
