package dispatcher

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// shardEventID is the event id of shard i of the firing eventID: each
// child has its own, so that making the children again makes no more.
func shardEventID(eventID string, i int) string { return eventID + "/shard-" + strconv.Itoa(i) }

// fanOut makes the children of the parents of sharded and broadcast
// firings and moves the parents to RUNNING, and returns the children's
// attempts to publish. A sharded firing makes execution.shards children,
// routed as the task routes its instances (pull: the pool's workers share
// them out as they have free slots). A broadcast firing makes one child per
// eligible live worker of the pool, each sent to its worker; a broadcast
// that finds none is routed again after rerouteDelay.
//
// A parent whose children exist already (a batch retried after a failure)
// keeps them: they are returned to be published again, and the parent is
// moved to RUNNING if it is not yet, so that a broadcast never makes a
// second set of children over a changed set of workers.
func (s *Service) fanOut(ctx context.Context, batch *streams.AsyncBatch, parents []store.Attempt) ([]store.Attempt, error) {
	if len(parents) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(parents))
	for i, p := range parents {
		ids[i] = p.ID
	}
	made, err := s.opts.Store.Children(ctx, ids)
	if err != nil {
		return nil, err
	}
	existing := make(map[int64]int) // children made, by parent
	for i, c := range made {
		existing[c.ParentID]++
		made[i].Republished = true // made by an earlier batch, which may have published it
	}
	var (
		children []store.NewInstance
		starts   []store.ParentStart
	)
	for _, p := range parents {
		if n := existing[p.ID]; n > 0 {
			if p.State == schemas.StateDispatched {
				starts = append(starts, store.ParentStart{InstanceID: p.ID, ShardCount: n})
			}
			continue
		}
		if p.State != schemas.StateDispatched {
			continue
		}
		kids, ok, err := s.childrenOf(batch, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		children = append(children, kids...)
		starts = append(starts, store.ParentStart{InstanceID: p.ID, ShardCount: len(kids)})
	}
	created, err := s.opts.Store.CreateInstances(ctx, children)
	if err != nil {
		return nil, err
	}
	if _, err := s.opts.Store.StartParents(ctx, starts); err != nil {
		return nil, err
	}
	return append(made, created...), nil
}

// childrenOf returns the children to make of p, a parent without any: its
// shards, or one child for each eligible live worker of a broadcast,
// pinned to it. A broadcast that finds none is added to batch to be
// routed again after rerouteDelay (false).
func (s *Service) childrenOf(batch *streams.AsyncBatch, p store.Attempt) ([]store.NewInstance, bool, error) {
	route := p.Route
	var workers []schemas.Worker
	n := p.ShardCount
	if p.Strategy == schemas.DispatchBroadcast {
		workers = s.workers.eligible(p.Pool, p.Handler, p.MinWorkerVersion, s.opts.Protocol)
		if len(workers) == 0 {
			s.waits.noteNoBroadcastWorker(p) // logged once per change of reason
			return nil, false, s.router.addReroute(batch, p)
		}
		n = len(workers)
		route.Strategy = schemas.DispatchWorker
	}
	children := make([]store.NewInstance, 0, n)
	for i := range n {
		if workers != nil {
			route.Key = workers[i].ID
		}
		children = append(children, store.NewInstance{
			Task:          p.Task,
			TaskVersion:   p.TaskVersion,
			EventID:       shardEventID(p.EventID, i),
			Source:        p.Source,
			Priority:      p.Priority,
			Pool:          p.Pool,
			Handler:       p.Handler,
			TimeoutMS:     p.TimeoutMS,
			MaxAttempts:   p.MaxAttempts,
			RetryPolicy:   p.RetryPolicy,
			Payload:       p.Payload,
			FiredAt:       p.FiredAt,
			MutexTemplate: p.MutexTemplate,
			Route:         route,
			State:         schemas.StateDispatched,
			CreatedReason: fmt.Sprintf("shard %d of %d of instance %d", i, n, p.ID),
			RunID:         p.RunID,
			Parents:       p.Parents,
			Shard:         store.Shard{ParentID: p.ID, ShardIndex: i, ShardCount: n},
			Trace:         p.Trace, // a shard continues its firing's trace
		})
	}
	return children, true, nil
}
