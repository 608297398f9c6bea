package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

// manyWorkers is how many requests ax fire --count and ax bench keep in
// flight at once: enough to keep the API busy, few enough not to swamp a
// laptop running ax dev.
const manyWorkers = 8

// fireMany fires task n times with req, from manyWorkers goroutines, and
// returns the results in firing order. Each firing gets its own event id
// (req.EventID must be empty). It stops at the first refusal.
func fireMany(ctx context.Context, client *apiclient.Client, task string, req wire.FireRequest, n int) ([]wire.FireResult, error) {
	results := make([]wire.FireResult, n)
	err := eachIndex(ctx, n, func(ctx context.Context, i int) error {
		res, err := client.Fire(ctx, task, req)
		if err != nil {
			return fmt.Errorf("firing %d of %d: %w", i+1, n, err)
		}
		results[i] = res
		return nil
	})
	return results, err
}

// waitMany waits until the instance of every firing has ended, from
// manyWorkers goroutines, calling ended for each as it does, and returns
// them in the order of res. On ctx's deadline it returns what ended with
// an error that wraps context.DeadlineExceeded; the instances that did not
// end are zero.
func (g *cli) waitMany(ctx context.Context, client *apiclient.Client, res []wire.FireResult, ended func(schemas.Instance)) ([]schemas.Instance, error) {
	out := make([]schemas.Instance, len(res))
	err := eachIndex(ctx, len(res), func(ctx context.Context, i int) error {
		id := res[i].InstanceID
		if id == 0 {
			made, err := client.WaitFiring(ctx, res[i].Task, res[i].EventID)
			if err != nil {
				return fmt.Errorf("event %s: %w", res[i].EventID, err)
			}
			id = made.ID
		}
		in, err := client.WaitInstance(ctx, id)
		if err != nil {
			return fmt.Errorf("instance %d: %w", id, err)
		}
		out[i] = in
		ended(in)
		return nil
	})
	return out, err
}

// eachIndex calls fn for 0..n-1 from at most manyWorkers goroutines and
// returns the first error, after which it starts no more calls and cancels
// the context of those in flight.
func eachIndex(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(manyWorkers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
