// Package servicetest runs AX's services inside tests: [Start] runs a
// service until the test ends and returns once it is ready, or fails the
// test at once with the error of a service that stopped before it was; [Go]
// runs one that has no Ready. Either stops the service when the test ends
// and fails the test if it returned an error the test did not take with
// [Running.Stop].
package servicetest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// ReadyTimeout is how long [Start] waits for a service that neither becomes
// ready nor stops; it is long because the services of an end-to-end test
// cross NATS and PostgreSQL on a loaded machine, and a service that fails
// at start is reported at once, whatever this is.
const ReadyTimeout = 3 * time.Minute

// StopTimeout is how long the cleanup waits for a stopped service's Run to
// return before it fails the test instead of hanging it.
const StopTimeout = time.Minute

// Service is what [Start] runs: AX's dispatcher, trigger and executor.
type Service interface {
	// Run blocks until ctx is done or the service fails.
	Run(ctx context.Context) error
	// Ready is closed once the service takes work.
	Ready() <-chan struct{}
}

// Running is a service a test runs. Its methods are safe for concurrent use.
type Running struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's answer, set before done is closed

	mu    sync.Mutex
	taken bool // Stop handed the error to the test
}

// Start runs svc on its own goroutine until the test ends and returns once
// svc is ready. If Run returns before that, the test fails at once with
// its error; if svc is not ready within [ReadyTimeout], the test fails too.
// At the test's cleanup the service's context is cancelled, the cleanup
// waits for Run to return (up to [StopTimeout]), and the test fails if Run
// returned an error, unless the test took it with [Running.Stop]. name
// prefixes every message.
func Start(t testing.TB, name string, svc Service) *Running {
	t.Helper()
	r := Go(t, name, svc.Run)
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	select {
	case <-svc.Ready():
		return r
	case <-r.done:
		r.take()
		if r.err != nil {
			t.Fatalf("%s stopped before it was ready: %v", name, r.err)
		}
		t.Fatalf("%s stopped before it was ready, with no error", name)
	case <-timer.C:
		t.Fatalf("%s not ready after %v", name, ReadyTimeout)
	}
	return nil
}

// Go runs run on its own goroutine until the test ends, for a service with
// no Ready (the auditor); the cleanup is [Start]'s.
func Go(t testing.TB, name string, run func(context.Context) error) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	t.Cleanup(func() {
		t.Helper()
		r.cancel()
		timer := time.NewTimer(StopTimeout)
		defer timer.Stop()
		select {
		case <-r.done:
		case <-timer.C:
			t.Errorf("%s: Run did not return within %v of its context's end", name, StopTimeout)
			return
		}
		r.mu.Lock()
		taken := r.taken
		r.mu.Unlock()
		if r.err != nil && !taken {
			t.Errorf("%s: %v", name, r.err)
		}
	})
	return r
}

// Stop cancels the service's context, waits for Run to return and returns
// its error, which the test then owns: the cleanup reports it no more.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	r.take()
	return r.err
}

// Done is closed once Run has returned, by itself or after Stop.
func (r *Running) Done() <-chan struct{} { return r.done }

// take marks Run's error as handed to the test.
func (r *Running) take() {
	r.mu.Lock()
	r.taken = true
	r.mu.Unlock()
}
