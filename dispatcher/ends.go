package dispatcher

import (
	"context"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// afterEnds acts on instances that ended, after their ends were committed:
// it ends the parents of sharded and broadcast firings whose children have
// all ended (see [store.Store.EndParents]), adds to batch the firings of the tasks chained after them, and starts
// the WAITING instances of their tasks that a freed slot of
// max_running_instances lets run, adding those attempts to batch too (and
// to the pools whose doorbell publishAttempts rings). Both are idempotent,
// so a batch retried after a crash does no harm.
func (s *Service) afterEnds(ctx context.Context, batch *streams.AsyncBatch, ended []store.RunEnd) ([]store.Attempt, error) {
	if len(ended) == 0 {
		return nil, nil
	}
	// A shard's end may end its parent, whose end counts as any other's;
	// the ends of instances known to be no shards are left out (a burst
	// of plain instances then costs no statement here).
	var runs []string
	for _, e := range ended {
		if !e.NoParent {
			runs = append(runs, e.RunID)
		}
	}
	parents, err := s.opts.Store.EndParents(ctx, runs)
	if err != nil {
		return nil, err
	}
	ended = append(ended, parents...)
	if err := s.addChainFirings(ctx, batch, ended); err != nil {
		return nil, err
	}
	tasks := make([]string, len(ended))
	for i, e := range ended {
		tasks[i] = e.Task
	}
	return s.opts.Store.PromoteWaiting(ctx, tasks)
}

// stopVictims tells the workers of cancelled instances that were running to
// stop them, and returns the victims' ends.
func (s *Service) stopVictims(victims []store.Victim) []store.RunEnd {
	ends := make([]store.RunEnd, len(victims))
	for i, v := range victims {
		ends[i] = store.RunEnd{Task: v.Task, RunID: v.RunID}
		if v.WasRunning {
			s.cancelAttempt(v.WorkerID, store.Outcome{InstanceID: v.InstanceID, Attempt: v.Attempt}, "the instance was cancelled")
		}
	}
	return ends
}

// limited returns a task's concurrency limit and strategy, or 0 when its
// instances may run without limit.
func limited(def *schemas.Task) (int, schemas.BlockingStrategy) {
	n := def.Concurrency.MaxRunningInstances
	if n <= 0 {
		return 0, ""
	}
	strategy := def.Concurrency.BlockingStrategy
	if strategy == "" {
		strategy = schemas.DefaultBlockingStrategy
	}
	return n, strategy
}
