package executor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

func TestIsolationOptionsPanic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func()
		want string
	}{
		{"Concurrency(0)", func() { executor.Concurrency(0) }, "at least 1 slot"},
		{"RateLimit(0, 1)", func() { executor.RateLimit(0, 1) }, "positive, finite"},
		{"RateLimit(NaN, 1)", func() { executor.RateLimit(nan(), 1) }, "positive, finite"},
		{"RateLimit(1, 0)", func() { executor.RateLimit(1, 0) }, "burst of at least 1"},
		{"nil option", func() { executor.NewMux().Handle("h", executor.HandlerFunc(nil), nil) }, "nil option"},
	}
	for _, tt := range tests {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tt.want) {
					t.Errorf("%s: panic %v, want one containing %q", tt.name, r, tt.want)
				}
			}()
			tt.call()
		}()
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// A slow handler limited to one slot fills that slot only: the fast
// handler's attempts run beside it on the same worker, and the slow
// handler's other attempts wait outside the worker until their turn.
func TestIsolationSlowHandlerDoesNotBlockFast(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	slow := newGate()
	var inSlow peak
	mux.HandleFunc("slow", func(ctx context.Context, task *executor.Job) (any, error) {
		defer inSlow.enter()()
		return slow.HandleTask(ctx, task)
	}, executor.Concurrency(1))
	executor.RegisterBuiltins(mux)
	s := w.worker("w1", mux, func(o *executor.Options) { o.Slots = 4 })

	for i := range 3 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(1 + i), Handler: "slow"})
	}
	for i := range 8 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(11 + i), Handler: executor.BuiltinEcho})
	}
	// Every fast attempt finishes while the first slow one holds its slot.
	first := <-slow.entered
	fast := 0
	for fast < 8 {
		r := w.next()
		switch {
		case r.Kind == schemas.ReportSucceeded && r.InstanceID > 10:
			fast++
		case r.Kind == schemas.ReportStarted && r.InstanceID > 10:
		case r.Kind == schemas.ReportStarted && r.InstanceID == first:
		default:
			t.Fatalf("report %+v while slow attempt %d holds the slow handler's slot", r.Report, first)
		}
	}
	if n := len(slow.entered); n != 0 {
		t.Fatalf("%d more slow attempts entered beside the first", n)
	}
	eventually(t, "one slot is busy: the slow attempt's", func() bool { return s.Busy() == 1 })

	close(slow.open)
	started, finals := w.collect(3)
	for id := int64(1); id <= 3; id++ {
		if _, ok := finals[id]; !ok {
			t.Errorf("slow attempt %d did not succeed (finals %v)", id, finals)
		}
		if _, ok := started[id]; !ok && id != first {
			t.Errorf("slow attempt %d has no started report", id)
		}
	}
	if m := inSlow.most.Load(); m != 1 {
		t.Errorf("%d slow attempts ran at once, want 1", m)
	}
	w.dispatchEmpty()
	w.noMoreReports()
}

// A handler limited to 5 attempts a second with bursts of 1 starts 20
// attempts over at least 19/5 = 3.8 s, read from the started reports. The
// wait is not part of the attempts' timeout: each has 1 s and all succeed.
func TestIsolationRateLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("limited", func(context.Context, *executor.Job) (any, error) { return nil, nil },
		executor.RateLimit(5, 1))
	w.worker("w1", mux, nil)
	const n = 20
	for i := range n {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: "limited",
			TimeoutMS: time.Second.Milliseconds()})
	}
	started, finals := w.collect(n)
	if len(started) != n || len(finals) != n {
		t.Fatalf("%d started and %d succeeded attempts, want %d", len(started), len(finals), n)
	}
	var times []time.Time
	for _, r := range started {
		times = append(times, r.StartedAt)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	// Each start is at or after its turn; the first may be a little late.
	span := times[n-1].Sub(times[0])
	if span < 3700*time.Millisecond {
		t.Errorf("20 attempts at 5/s started within %s, want about 3.8 s", span)
	}
	w.dispatchEmpty()
	w.noMoreReports()
}

// A rate-limited handler that waits holds its own slots: with Concurrency
// it leaves the worker's other slots to other handlers.
func TestIsolationRateLimitedHandlerLeavesOthersRunning(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("limited", func(context.Context, *executor.Job) (any, error) { return nil, nil },
		executor.RateLimit(2, 1), executor.Concurrency(2))
	executor.RegisterBuiltins(mux)
	w.worker("w1", mux, func(o *executor.Options) { o.Slots = 4 })
	for i := range 6 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(i + 1), Handler: "limited"})
	}
	for i := range 4 {
		w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: int64(11 + i), Handler: executor.BuiltinEcho,
			Payload: json.RawMessage(`{"n":1}`)})
	}
	// The echo attempts finish long before the 6 limited ones can (2.5 s).
	started, finals := w.collect(10)
	var lastEcho, lastLimited time.Time
	for id, r := range finals {
		if id > 10 && r.At.After(lastEcho) {
			lastEcho = r.At
		}
		if id <= 10 && r.At.After(lastLimited) {
			lastLimited = r.At
		}
	}
	if !lastEcho.Before(lastLimited) {
		t.Errorf("the last echo attempt ended at %s, after the last limited one at %s", lastEcho, lastLimited)
	}
	if len(started) != 10 {
		t.Errorf("%d started reports, want 10", len(started))
	}
	w.dispatchEmpty()
	w.noMoreReports()
}
