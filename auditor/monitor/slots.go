package monitor

import (
	"context"

	"github.com/ax-scheduler/ax/schemas"
)

// refreshSlots sets ax_pool_waiting_slots from PostgreSQL: the slots that
// the DISPATCHED attempts of each pool and priority take (a heavy task's
// execution.slots each), those held back for fairness among them, which
// AX_DISPATCH does not hold yet. A failed read keeps the previous series.
func (l *lag) refreshSlots(ctx context.Context) error {
	counts, err := l.opts.Store.PoolAttemptCounts(ctx)
	if err != nil {
		return err
	}
	values := make(map[string]float64, len(counts))
	for _, c := range counts {
		if c.State == schemas.StateDispatched {
			values[c.Pool+labelSep+string(c.Priority)] = float64(c.Slots)
		}
	}
	l.slotSeries = setGauges(l.metrics.poolWaitingSlots, l.slotSeries, values)
	return nil
}
