package servicetest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/internal/servicetest"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// service is a service whose Run does what run says; ready is closed by run.
type service struct {
	ready chan struct{}
	run   func(ctx context.Context, ready chan struct{}) error
}

func newService(run func(ctx context.Context, ready chan struct{}) error) *service {
	return &service{ready: make(chan struct{}), run: run}
}

func (s *service) Run(ctx context.Context) error { return s.run(ctx, s.ready) }
func (s *service) Ready() <-chan struct{}        { return s.ready }

// recorder is a testing.TB that records failures and cleanups; Fatalf ends
// the calling goroutine as testing.T's does.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	fatal    bool
	cleanups []func()
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// test runs body as a test of its own on a new goroutine, then its
// cleanups, and returns what it reported.
func test(body func(tb testing.TB)) (errs []string, fatal bool) {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.errors, r.fatal
}

// A service that fails at start fails the test at once, with its error,
// and not after ReadyTimeout.
func TestStartReportsAServiceThatFailsAtStart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	errs, fatal := test(func(tb testing.TB) {
		servicetest.Start(tb, "dispatcher", newService(func(context.Context, chan struct{}) error {
			return errors.New("ensure stream AX_TRIGGERS: permissions violation")
		}))
		tb.Errorf("Start returned for a service that never became ready")
	})
	if took := time.Since(start); took > servicetest.ReadyTimeout/2 {
		t.Errorf("the failure took %v to report", took)
	}
	if !fatal || len(errs) != 1 || !strings.Contains(errs[0], "dispatcher stopped before it was ready: ensure stream AX_TRIGGERS: permissions violation") {
		t.Errorf("reported %q (fatal %v), want one fatal failure with the service's error", errs, fatal)
	}
}

// A ready service runs until the cleanup, which cancels it and waits for
// Run to return; a clean stop reports nothing.
func TestStartRunsUntilCleanup(t *testing.T) {
	t.Parallel()
	stopped := make(chan struct{})
	errs, fatal := test(func(tb testing.TB) {
		r := servicetest.Start(tb, "trigger", newService(func(ctx context.Context, ready chan struct{}) error {
			close(ready)
			<-ctx.Done()
			close(stopped)
			return nil
		}))
		select {
		case <-r.Done():
			tb.Errorf("the service stopped before the test ended")
		case <-stopped:
			tb.Errorf("the service stopped before the test ended")
		default:
		}
	})
	if fatal || len(errs) != 0 {
		t.Errorf("reported %q (fatal %v), want nothing", errs, fatal)
	}
	select {
	case <-stopped:
	default:
		t.Error("the cleanup returned before the service stopped")
	}
}

// An error Run returns after the service was ready fails the test at its
// cleanup, unless the test took it with Stop.
func TestRunErrorsFailTheTestUnlessTaken(t *testing.T) {
	t.Parallel()
	lost := errors.New("nats: connection closed")
	failing := func() *service {
		return newService(func(ctx context.Context, ready chan struct{}) error {
			close(ready)
			<-ctx.Done()
			return lost
		})
	}
	errs, fatal := test(func(tb testing.TB) { servicetest.Start(tb, "executor", failing()) })
	if fatal || len(errs) != 1 || errs[0] != "executor: nats: connection closed" {
		t.Errorf("untaken error: reported %q (fatal %v), want the service's error", errs, fatal)
	}
	errs, fatal = test(func(tb testing.TB) {
		if err := servicetest.Start(tb, "executor", failing()).Stop(); !errors.Is(err, lost) {
			tb.Errorf("Stop = %v, want %v", err, lost)
		}
	})
	if fatal || len(errs) != 0 {
		t.Errorf("taken error: reported %q (fatal %v), want nothing", errs, fatal)
	}
}

// Go runs a service with no Ready; Start on a real test returns it ready.
func TestGoAndStartOnARealTest(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{})
	servicetest.Go(t, "auditor", func(ctx context.Context) error {
		close(ran)
		<-ctx.Done()
		return nil
	})
	<-ran
	svc := newService(func(ctx context.Context, ready chan struct{}) error {
		close(ready)
		<-ctx.Done()
		return nil
	})
	servicetest.Start(t, "trigger", svc)
	select {
	case <-svc.Ready():
	default:
		t.Error("Start returned before the service was ready")
	}
}
