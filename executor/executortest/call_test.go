package executortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
)

type order struct {
	ID    int64 `json:"id"`
	Cents int64 `json:"cents"`
}

type receipt struct {
	Charged int64 `json:"charged"`
}

// checkoutMux serves "checkout": it charges under Once, then fails its
// first attempt asking for a retry in a minute, and succeeds on a later one.
func checkoutMux(charges *atomic.Int64) *executor.Mux {
	mux := executor.NewMux()
	mux.Handle("checkout", executor.JSON(func(ctx context.Context, t *executor.Job, o order) (receipt, error) {
		log := executor.Logger(ctx).With("order", o.ID)
		if err := executor.Once(ctx, fmt.Sprintf("charge-%d", o.ID), func(context.Context) error {
			charges.Add(1)
			log.Info("charged", "cents", o.Cents)
			return nil
		}); err != nil {
			return receipt{}, err
		}
		if t.Attempt == 1 {
			log.Warn("receipt service busy")
			return receipt{}, executor.RetryAfter(time.Minute, errors.New("receipt service busy"))
		}
		return receipt{Charged: o.Cents}, nil
	}))
	return mux
}

func TestCall(t *testing.T) {
	t.Parallel()
	var charges atomic.Int64
	mux := checkoutMux(&charges)
	once := executortest.NewOnce()

	first := executortest.Call(t, mux, "checkout", order{ID: 7, Cents: 1200}, executortest.WithOnce(once))
	if first.Succeeded() || first.Report.Error != "receipt service busy" || first.Report.RetryAfterMS != 60000 ||
		first.Report.Permanent || first.Output != nil || first.Err == nil {
		t.Errorf("attempt 1: %+v, want a failure asking for a retry in a minute", first)
	}
	if got, want := first.Messages(), []string{"charged", "receipt service busy"}; !slices.Equal(got, want) {
		t.Errorf("attempt 1 logged %v, want %v", got, want)
	}
	if l := first.Logs[0]; l.Level != "info" || string(l.Fields) != `{"order":7,"cents":1200}` || l.Task != "checkout" ||
		l.InstanceID != 1 || l.Attempt != 1 || l.WorkerID != "executortest" {
		t.Errorf("line %+v", l)
	}
	if !once.Done("charge-7") {
		t.Error("the charge is not recorded in the Once")
	}

	second := executortest.Call(t, mux, "checkout", json.RawMessage(`{"id": 7, "cents": 1200}`),
		executortest.WithOnce(once), executortest.WithTask(func(t *executor.Job) { t.Attempt, t.MaxAttempts = 2, 3 }))
	if !second.Succeeded() || string(second.Output) != `{"charged":1200}` || second.Err != nil {
		t.Errorf("attempt 2: %+v, want success with the receipt", second)
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times, want once: the retry must skip the recorded charge", n)
	}

	// Without WithOnce each call has records of its own.
	executortest.Call(t, mux, "checkout", order{ID: 7})
	if n := charges.Load(); n != 2 {
		t.Errorf("charged %d times, want 2", n)
	}

	bad := executortest.Call(t, mux, "checkout", `not an order`)
	if bad.Succeeded() || !bad.Report.Permanent || !strings.Contains(bad.Report.Error, "payload does not fit") {
		t.Errorf("a string payload: %+v, want a permanent decode failure", bad.Report)
	}
}

func TestCallOutcomes(t *testing.T) {
	t.Parallel()
	mux := executor.NewMux()
	var seen []string
	mux.Use(func(next executor.Handler) executor.Handler {
		return executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
			seen = append(seen, t.Handler)
			return next.HandleTask(ctx, t)
		})
	})
	mux.HandleFunc("panics", func(context.Context, *executor.Job) (any, error) { panic("boom") })
	mux.HandleFunc("slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	mux.HandleFunc("unencodable", func(context.Context, *executor.Job) (any, error) { return make(chan int), nil })

	p := executortest.Call(t, mux, "panics", nil)
	if p.Succeeded() || p.Report.Error != "handler panicked: boom" || len(p.Logs) != 1 || p.Logs[0].Level != "error" {
		t.Errorf("panic: %+v", p)
	}
	s := executortest.Call(t, mux, "slow", nil, executortest.WithTimeout(50*time.Millisecond))
	if s.Succeeded() || s.Report.Error != "timeout after 50ms" || !errors.Is(s.Err, context.DeadlineExceeded) {
		t.Errorf("timeout: %+v", s.Report)
	}
	u := executortest.Call(t, mux, "unencodable", nil)
	if u.Succeeded() || !u.Report.Permanent || !strings.HasPrefix(u.Report.Error, "encode output") {
		t.Errorf("unencodable output: %+v", u.Report)
	}
	if want := []string{"panics", "slow", "unencodable"}; !slices.Equal(seen, want) {
		t.Errorf("middleware saw %v, want %v", seen, want)
	}
}

// fatalTB records a Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestCallMistakesFailTheTest(t *testing.T) {
	t.Parallel()
	mux := executor.NewMux()
	mux.HandleFunc("a", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	for _, tt := range []struct {
		name    string
		payload any
		want    string
	}{
		{"b", nil, `the mux has no handler "b" (it has: a)`},
		{"a", []byte(`{"x":`), `is not JSON`},
		{"a", make(chan int), `encode chan int as JSON`},
	} {
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			executortest.Call(f, mux, tt.name, tt.payload)
		}()
		<-done
		if !strings.Contains(f.msg, tt.want) {
			t.Errorf("Call(%q, %v) failed the test with %q, want %q", tt.name, tt.payload, f.msg, tt.want)
		}
	}
}

// Two calls sharing a Once never run one key's work at once, and a
// failure is not recorded.
func TestOnceExcludesAndForgetsFailures(t *testing.T) {
	t.Parallel()
	o := executortest.NewOnce()
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- o.Run(ctx, "k", func(context.Context) error {
			close(started)
			<-release
			return errors.New("failed")
		})
	}()
	<-started
	second := make(chan bool, 1)
	go func() {
		ran := false
		_ = o.Run(ctx, "k", func(context.Context) error { ran = true; return nil })
		second <- ran
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := o.Run(waitCtx, "k", func(context.Context) error { return nil }); err == nil {
		t.Error("a call ran the work while another ran it")
	}
	close(release)
	if err := <-first; err == nil || err.Error() != "failed" {
		t.Errorf("first call: %v, want fn's error", err)
	}
	if !<-second {
		t.Error("the waiting call did not run the work after the first failed")
	}
	if !o.Done("k") {
		t.Error("the second call's success is not recorded")
	}
}

// A handler test with no NATS server: Call runs the handler as a worker
// would and returns its report and log lines.
func ExampleCall() {
	var charges atomic.Int64
	mux := checkoutMux(&charges)
	t := &testing.T{} // in a test, the test's own *testing.T
	r := executortest.Call(t, mux, "checkout", order{ID: 7, Cents: 1200})
	fmt.Println(r.Report.Kind, r.Report.Error, r.Report.RetryAfterMS, r.Messages())

	r = executortest.Call(t, mux, "checkout", order{ID: 7, Cents: 1200},
		executortest.WithTask(func(t *executor.Job) { t.Attempt = 2 }))
	fmt.Println(r.Report.Kind, string(r.Output), schemas.ReportSucceeded == r.Report.Kind)
	// Output:
	// failed receipt service busy 60000 [charged receipt service busy]
	// succeeded {"charged":1200} true
}
