package executor

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/ax-scheduler/ax/executor/internal/sdkhook"
	"github.com/ax-scheduler/ax/schemas"
)

func init() { sdkhook.Call = callOutside }

// callOutside runs a handler as a worker does — its logger, Once, panic
// recovery and the rules that turn its result into a report — with no
// worker: for executortest.Call.
func callOutside(ctx context.Context, handler, task any, lines func(schemas.LogLine), once sdkhook.Once) (schemas.Report, error) {
	h, t := handler.(Handler), task.(*Job)
	d := schemas.Dispatch{InstanceID: t.InstanceID, Task: t.Name, Handler: t.Handler, Attempt: t.Attempt,
		MaxAttempts: t.MaxAttempts, EventID: t.EventID, Priority: t.Priority}
	log := newTaskLogger(&funcSink{d: &d, workerID: t.WorkerID, lines: lines})
	ctx = withOnce(withLogger(ctx, log), hookOnce{once})
	if !t.Deadline.IsZero() {
		timeout := time.Until(t.Deadline).Round(time.Millisecond)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, t.Deadline, timeoutError{timeout})
		defer cancel()
	}

	s := &Service{opts: Options{WorkerID: t.WorkerID, NowFunc: time.Now}}
	a := &attempt{dispatch: d, task: t, startedAt: time.Now()}
	out, err := func() (out any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				out, err = nil, fmt.Errorf("handler panicked: %v", r)
			}
		}()
		return h.HandleTask(ctx, t)
	}()
	returnedAt := time.Now()
	var cause error
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	return s.outcome(a, out, err, cause, returnedAt), err
}

// funcSink hands each line of a handler's logger to a function, as the
// worker's shipper would publish it.
type funcSink struct {
	d        *schemas.Dispatch
	workerID string
	lines    func(schemas.LogLine)
}

func (f *funcSink) enabled(slog.Level) bool { return true }

func (f *funcSink) line(level slog.Level, at time.Time, msg string, fields []field) {
	l := schemas.LogLine{InstanceID: f.d.InstanceID, Task: f.d.Task, Attempt: f.d.Attempt, WorkerID: f.workerID,
		Level: levelName(level), Time: at}
	l.Message, l.Fields = fitLine(msg, fields)
	f.lines(l)
}

// hookOnce runs [Once]'s work on executortest's records.
type hookOnce struct{ o sdkhook.Once }

func (h hookOnce) run(ctx context.Context, key string, fn func(context.Context) error) error {
	return h.o.Run(ctx, key, fn)
}
