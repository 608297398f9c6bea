package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/wire"
)

// benchFiring is how ax bench fires: as fast as the API answers (rate and
// batch 0), at a steady rate a second, or in requests of batch firings.
type benchFiring struct {
	rate, batch int
}

// fire fires task n times as f says and returns the results in firing
// order. Every firing asks the API not to wait for its instance (Prefer:
// respond-async): the answer comes from the publish's acknowledgement, and
// ax bench reads the instances afterwards (waitMany), so what it measures
// is the pipeline, not the API's wait.
func (f benchFiring) fire(ctx context.Context, client *apiclient.Client, task string, req wire.FireRequest, n int) ([]wire.FireResult, error) {
	switch {
	case f.batch > 0:
		return fireBatches(ctx, client, task, req, n, f.batch)
	case f.rate > 0:
		return firePaced(ctx, client, task, req, n, f.rate)
	}
	results := make([]wire.FireResult, n)
	err := eachIndex(ctx, n, func(ctx context.Context, i int) error {
		res, err := client.FireAsync(ctx, task, req)
		if err != nil {
			return fmt.Errorf("firing %d of %d: %w", i+1, n, err)
		}
		results[i] = res
		return nil
	})
	return results, err
}

// benchTick is how often a paced ax bench fires rate/100 firings.
const benchTick = 10 * time.Millisecond

// firePaced fires n times at rate a second: every benchTick the firings
// due by then, each in a request of its own, concurrently.
func firePaced(ctx context.Context, client *apiclient.Client, task string, req wire.FireRequest, n, rate int) ([]wire.FireResult, error) {
	results := make([]wire.FireResult, n)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	ticker := time.NewTicker(benchTick)
	defer ticker.Stop()
	start, next := time.Now(), 0
	for next < n && ctx.Err() == nil {
		due := min(n, int(time.Since(start).Seconds()*float64(rate))+1)
		for ; next < due; next++ {
			i := next
			wg.Go(func() {
				res, err := client.FireAsync(ctx, task, req)
				if err != nil {
					cancel(fmt.Errorf("firing %d of %d: %w", i+1, n, err))
				}
				results[i] = res
			})
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	return results, context.Cause(ctx)
}

// fireBatches fires n times in requests of up to batch firings (one trigger
// message each), from manyWorkers requests at once.
func fireBatches(ctx context.Context, client *apiclient.Client, task string, req wire.FireRequest, n, batch int) ([]wire.FireResult, error) {
	results := make([]wire.FireResult, n)
	requests := (n + batch - 1) / batch
	err := eachIndex(ctx, requests, func(ctx context.Context, r int) error {
		from, to := r*batch, min(n, (r+1)*batch)
		reqs := make([]wire.FireRequest, to-from)
		for i := range reqs {
			reqs[i] = req
		}
		items, err := client.FireBatch(ctx, task, reqs)
		if err != nil {
			return fmt.Errorf("batch %d of %d: %w", r+1, requests, err)
		}
		for i, it := range items {
			if it.Error != nil {
				return fmt.Errorf("firing %d of %d: %w", from+i+1, n, it.Error)
			}
			results[from+i] = *it.FireResult
		}
		return nil
	})
	return results, err
}
