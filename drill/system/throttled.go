package system

import (
	"context"

	"github.com/ax-scheduler/ax/executor"
)

// ThrottledHandler starts one attempt per hour on each worker (a burst of
// one, then executor.RateLimit's wait): the attempts after a worker's first
// wait on that worker, fetched and not acknowledged, until it dies. Each
// run appends a start and an end line to the ledger, as [WorkHandler]'s.
const ThrottledHandler = "drill.throttled"

func registerThrottled(mux *executor.Mux, path string) {
	mux.HandleFunc(ThrottledHandler, func(_ context.Context, t *executor.Job) (any, error) {
		if err := appendLedger(path, "start", t); err != nil {
			return nil, err
		}
		return nil, appendLedger(path, "end", t)
	}, executor.RateLimit(1.0/3600, 1))
}
