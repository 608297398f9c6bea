package api

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// taskFit returns the live workers that may take def's instances now, as
// their heartbeats claim (the dispatcher also checks each one's grant
// keys): a worker that serves one of the task's pools (any of its
// dispatch.tags, see [schemas.DispatchPolicy.Pools]), registered its
// handler and runs min_worker_version or newer. With none, it warns what
// the instances wait for. It is a hint, not a rule: workers come and go,
// and when they cannot be read it says nothing rather than fail the apply.
func (s *Service) taskFit(ctx context.Context, def *schemas.Task) ([]wire.WorkerFit, []string) {
	ctx, cancel := context.WithTimeout(ctx, handlerCheckTimeout)
	defer cancel()
	workers, err := s.readWorkers(ctx)
	if err != nil {
		s.opts.Logger.Debug().Err(err).Str("task", def.TaskName).Msg("cannot read workers to check the handler")
		return nil, nil
	}
	handler, pools := def.Execution.Handler, def.Dispatch.Pools()
	var fit []wire.WorkerFit
	anyHandler := false
	for _, wk := range workers {
		if !slices.Contains(wk.Handlers, handler) {
			continue
		}
		anyHandler = true
		if !schemas.VersionAtLeast(wk.Version, def.MinWorkerVersion) {
			continue
		}
		for _, p := range pools {
			if slices.Contains(wk.Pools, p) {
				fit = append(fit, wire.WorkerFit{ID: wk.ID, Pool: p})
				break
			}
		}
	}
	switch {
	case len(fit) > 0:
		return fit, nil
	case !anyHandler:
		return nil, []string{fmt.Sprintf("no live worker serves handler %q: the task's instances will wait until an executor that registered it starts (see GET /v1/workers, ax worker list)", handler)}
	}
	version := ""
	if def.MinWorkerVersion != "" {
		version = " at version " + def.MinWorkerVersion + " or newer"
	}
	return nil, []string{fmt.Sprintf("no live worker of pool %s serves handler %q%s: the task's instances will wait until one starts (an executor with --pool %s; see ax worker list)",
		strings.Join(pools, " or "), handler, version, pools[0])}
}
