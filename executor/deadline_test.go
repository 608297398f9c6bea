package executor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/schemas"
)

// TestResultAfterTheDeadlineIsATimeout: a handler that sees its context end
// at the timeout and returns a result anyway has not succeeded in time; the
// attempt fails at its timeout, as the task says.
func TestResultAfterTheDeadlineIsATimeout(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	mux := executor.NewMux()
	mux.HandleFunc("stubborn", func(ctx context.Context, _ *executor.Job) (any, error) {
		<-ctx.Done()
		return "done anyway", nil
	})
	executortest.Run(t, w.options(mux))
	w.dispatch(schemas.PriorityNormal, schemas.Dispatch{InstanceID: 1, Handler: "stubborn", TimeoutMS: 300})
	w.nextOf(schemas.ReportStarted, 1)
	r := w.nextOf(schemas.ReportFailed, 1)
	if !strings.HasPrefix(r.Error, "timeout after 300ms (the handler ignored its deadline") || r.Permanent || len(r.Output) != 0 {
		t.Errorf("report %+v, want a not permanent timeout without output", r.Report)
	}
}
