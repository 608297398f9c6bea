package executor

import (
	"context"

	"github.com/rs/zerolog"
)

type loggerKey struct{}

// Logger returns the logger the worker put in a handler's context, tagged
// with the attempt's task, instance_id, attempt and worker_id. It returns a
// disabled logger when ctx carries none (a handler called outside a worker,
// as in a unit test), so its result is always safe to use.
//
// Its lines are the instance's task log: the worker ships each one, with
// its level, message, time and fields, to the AX_LOGS stream
// (ax.log.<instance_id>), where the API and `ax logs` read them while the
// attempt runs and after its executor is gone. Logging never blocks the
// handler: lines wait in a bounded buffer (Options.LogBuffer) that drops
// its oldest line when full, and are stored before the attempt's outcome
// is reported. Each line is also copied to the worker's own log at its
// level. See docs/operations.md, "Task logs".
//
// The same logger is reachable with [zerolog.Ctx], for libraries that use it.
func Logger(ctx context.Context) *zerolog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*zerolog.Logger); ok && l != nil {
		return l
	}
	l := zerolog.Nop()
	return &l
}

// withLogger returns a context carrying l for [Logger] and [zerolog.Ctx].
func withLogger(ctx context.Context, l zerolog.Logger) context.Context {
	ctx = l.WithContext(ctx)
	return context.WithValue(ctx, loggerKey{}, &l)
}
