// Package executortest tests AX handlers: [Call] runs one attempt of a
// handler with no NATS server (River's rivertest.Worker), and [Run] runs a
// whole executor worker inside a test, against a real server.
package executortest

import (
	"testing"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/internal/servicetest"
)

// Run starts a worker made from opts on its own goroutine and returns once
// the worker is ready to take work ([executor.Service.Ready]). The test
// fails if New returns an error, at once if Run returns one before the
// worker is ready, and at its end if Run returned one. When the test ends, Run's
// context is cancelled and the cleanup waits for Run to return, so a test
// sees every report of the attempts that were running.
func Run(t testing.TB, opts executor.Options) *executor.Service {
	t.Helper()
	s, err := executor.New(opts)
	if err != nil {
		t.Fatalf("executortest: %v", err)
	}
	servicetest.Start(t, "executor "+opts.WorkerID, s)
	return s
}
