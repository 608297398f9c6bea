// Package executortest tests AX handlers: [Call] runs one attempt of a
// handler with no NATS server (River's rivertest.Worker), and [Run] runs a
// whole executor worker inside a test, against a real server.
package executortest

import (
	"context"
	"testing"

	"github.com/ax-scheduler/ax/executor"
)

// Run starts a worker made from opts on its own goroutine, with the test's
// context, and returns once the worker is ready to take work ([executor.Service.Ready]).
// The test fails if New or Run returns an error. When the test ends, Run's
// context is cancelled and the cleanup waits for Run to return, so a test
// sees every report of the attempts that were running.
func Run(t testing.TB, opts executor.Options) *executor.Service {
	t.Helper()
	s, err := executor.New(opts)
	if err != nil {
		t.Fatalf("executortest: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("executortest: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-s.Ready():
	case <-done:
		t.FailNow()
	}
	return s
}
