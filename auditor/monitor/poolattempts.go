package monitor

import (
	"context"
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
)

// ScalingQuery is the PromQL an autoscaler reads for pool: the pool's
// attempts waiting and running, summed (ax_pool_attempts). The Helm
// chart's ScaledObjects (deploy/helm/ax/templates/executors.yaml) send
// KEDA's Prometheus scaler this query; with its threshold T, KEDA asks for
// ceil(sum/T) replicas. Unlike the lag of the pool's dispatch consumers it
// counts the attempts executors run after acknowledging them, sums the
// pool's consumers (priorities × handlers) instead of taking the largest,
// and does not depend on which handlers a worker registered.
func ScalingQuery(pool string) string {
	return fmt.Sprintf(`sum(ax_pool_attempts{pool=%q})`, pool)
}

// refreshPoolAttempts sets ax_pool_attempts from PostgreSQL: DISPATCHED
// and RUNNING for every pool with such instances, and 0 for the pools of
// taskPools, so that a pool with tasks and no work reads 0 rather than
// nothing (an autoscaler told "nothing" keeps its replicas, or errs).
func (m *monitor) refreshPoolAttempts(ctx context.Context, taskPools []string) error {
	counts, err := m.opts.Store.PoolAttemptCounts(ctx)
	if err != nil {
		return err
	}
	values := map[string]float64{}
	for _, p := range taskPools {
		for _, s := range []schemas.State{schemas.StateDispatched, schemas.StateRunning} {
			values[p+labelSep+string(s)] = 0
		}
	}
	for _, c := range counts {
		values[c.Pool+labelSep+string(c.State)] = float64(c.Count)
	}
	m.poolAttemptSeries = setGauges(m.metrics.poolAttempts, m.poolAttemptSeries, values)
	return nil
}
