// Package sdkhook lets executortest run a handler the way a worker does
// without reaching into package executor's API: executor sets Call when
// it is initialised.
package sdkhook

import (
	"context"

	"github.com/ax-scheduler/ax/schemas"
)

// Once stands in for the ax-once bucket behind executor.Once.
type Once interface {
	Run(ctx context.Context, key string, fn func(ctx context.Context) error) error
}

// Call runs handler (an executor.Handler) on task (an *executor.Job) with
// a context carrying a logger whose lines go to lines and once for
// executor.Once. It returns the final report a worker would publish and
// the handler's error as returned. Set by package executor.
var Call func(ctx context.Context, handler, task any, lines func(schemas.LogLine), once Once) (schemas.Report, error)
