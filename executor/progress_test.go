package executor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
)

// TestProgressChecksItsArguments calls Job.Progress on a Job no worker
// made, as a handler's unit test does: values in range are taken (and go
// nowhere), others are refused with an error that says what to fix, and so
// is any call once the context ended.
func TestProgressChecksItsArguments(t *testing.T) {
	t.Parallel()
	task := &executor.Job{InstanceID: 1, Attempt: 1}
	ctx := context.Background()
	for _, ok := range []struct {
		done, total int64
		msg         string
	}{{0, 0, ""}, {3, 10, "three"}, {10, 10, ""}, {42, 0, "unknown total"}, {1, 1, strings.Repeat("é", 128)}} {
		if err := task.Progress(ctx, ok.done, ok.total, ok.msg); err != nil {
			t.Errorf("Progress(%d, %d, %q) = %v; want nil", ok.done, ok.total, ok.msg, err)
		}
	}
	for _, bad := range []struct {
		done, total int64
		msg, want   string
	}{
		{-1, 10, "", "must not be negative"},
		{1, -1, "", "must not be negative"},
		{11, 10, "", "done must not exceed total"},
		{1, 2, strings.Repeat("x", 257), "at most 256 bytes"},
		{1, 2, "\xff", "not valid UTF-8"},
	} {
		if err := task.Progress(ctx, bad.done, bad.total, bad.msg); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Progress(%d, %d, %.20q) = %v; want an error saying %q", bad.done, bad.total, bad.msg, err, bad.want)
		}
	}
	cancelled, cancel := context.WithCancelCause(ctx)
	cancel(errors.New("operator said stop"))
	if err := task.Progress(cancelled, 1, 2, ""); err == nil || !strings.Contains(err.Error(), "operator said stop") {
		t.Errorf("Progress after the context ended = %v; want its cause", err)
	}
}

// TestProgressReportsOnTheWire runs a handler that reports progress at
// once, with a StartedDelay of an hour: its started report goes first
// anyway, then the progress report (kind progress, no Nats-Msg-Id); a
// burst after it is throttled to the latest value a ProgressInterval
// later; a value pending when the handler returns is never sent, and
// Progress after the return says the attempt ended.
func TestProgressReportsOnTheWire(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	step := make(chan struct{})
	returned := make(chan *executor.Job, 1)
	mux := builtins()
	mux.HandleFunc("steps", func(ctx context.Context, task *executor.Job) (any, error) {
		if err := task.Progress(ctx, 1, 100, "first"); err != nil {
			return nil, err
		}
		<-step
		for i := int64(2); i <= 50; i++ {
			if err := task.Progress(ctx, i, 100, "burst"); err != nil {
				return nil, err
			}
		}
		<-step
		if err := task.Progress(ctx, 99, 100, "never sent"); err != nil {
			return nil, err
		}
		returned <- task
		return nil, nil
	})
	opts := w.options(mux)
	opts.StartedDelay = time.Hour
	executortest.Run(t, opts)

	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 7, Handler: "steps"})
	w.nextOf(schemas.ReportStarted, 7)
	first := w.nextOf(schemas.ReportProgress, 7)
	if p := first.Progress; p == nil || p.Done != 1 || p.Total != 100 || p.Message != "first" || first.msgID != "" ||
		first.WorkerID != opts.WorkerID || first.StartedAt.IsZero() || first.At.Before(first.StartedAt) {
		t.Fatalf("first progress report = %+v (id %q); want 1 of 100, \"first\", no Nats-Msg-Id", first.Report, first.msgID)
	}
	step <- struct{}{}
	// The burst comes as one report of its latest value, an interval after
	// the first at the soonest (the first was sent after its at) — or two,
	// should the test have been slow enough to send the burst's start
	// after the interval had passed.
	var burst []int64
	for len(burst) == 0 || burst[len(burst)-1] != 50 {
		r := w.nextOf(schemas.ReportProgress, 7)
		burst = append(burst, r.Progress.Done)
		if gap := time.Since(first.At); gap < time.Duration(len(burst))*executor.ProgressInterval {
			t.Errorf("progress report %d came %v after the first was reported; want at least %v", len(burst)+1, gap,
				time.Duration(len(burst))*executor.ProgressInterval)
		}
		if len(burst) > 2 || r.Progress.Message != "burst" {
			t.Fatalf("progress reports of the burst of 49 values: %v (%q); want the latest, 50, at most after one other", burst, r.Progress.Message)
		}
	}
	step <- struct{}{}
	w.nextOf(schemas.ReportSucceeded, 7)
	task := <-returned
	eventually(t, "Progress to refuse once the attempt ended", func() bool {
		err := task.Progress(context.Background(), 100, 100, "")
		return err != nil && strings.Contains(err.Error(), "the attempt has ended")
	})
	w.dispatchEmpty()
	w.noMoreReports()
}
