package monitor

import (
	"context"
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
)

// ScalingQuery is the PromQL an autoscaler reads for pool: the worker
// slots that the pool's attempts waiting and running take, summed
// (ax_pool_slots; an attempt takes its task's execution.slots, 1 by
// default). The Helm chart's ScaledObjects
// (deploy/helm/ax/templates/executors.yaml) send KEDA's Prometheus scaler
// this query; with its threshold T (the slots of one executor), KEDA asks
// for ceil(sum/T) replicas. Unlike the lag of the pool's dispatch
// consumers it counts the attempts executors run after acknowledging
// them, sums the pool's consumers (priorities × handlers) instead of
// taking the largest, and does not depend on which handlers a worker
// registered.
func ScalingQuery(pool string) string {
	return fmt.Sprintf(`sum(ax_pool_slots{pool=%q})`, pool)
}

// refreshPoolAttempts sets ax_pool_attempts and ax_pool_slots from
// PostgreSQL: DISPATCHED and RUNNING for every pool with such instances,
// and 0 for the pools of taskPools, so that a pool with tasks and no work
// reads 0 rather than nothing (an autoscaler told "nothing" keeps its
// replicas, or errs).
func (m *monitor) refreshPoolAttempts(ctx context.Context, taskPools []string) error {
	counts, err := m.opts.Store.PoolAttemptCounts(ctx)
	if err != nil {
		return err
	}
	attempts, slots := map[string]float64{}, map[string]float64{}
	for _, p := range taskPools {
		for _, s := range []schemas.State{schemas.StateDispatched, schemas.StateRunning} {
			attempts[p+labelSep+string(s)], slots[p+labelSep+string(s)] = 0, 0
		}
	}
	for _, c := range counts { // one row a priority: summed
		attempts[c.Pool+labelSep+string(c.State)] += float64(c.Count)
		slots[c.Pool+labelSep+string(c.State)] += float64(c.Slots)
	}
	m.poolAttemptSeries = setGauges(m.metrics.poolAttempts, m.poolAttemptSeries, attempts)
	m.poolSlotSeries = setGauges(m.metrics.poolSlots, m.poolSlotSeries, slots)
	return nil
}
