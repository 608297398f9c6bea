package monitor

import "context"

// refreshSlots sets ax_pool_waiting_slots from PostgreSQL: the slots that
// the DISPATCHED attempts of each pool and priority take (a heavy task's
// execution.slots each), those held back for fairness among them, which
// AX_DISPATCH does not hold yet. A failed read keeps the previous series.
func (l *lag) refreshSlots(ctx context.Context) error {
	waiting, err := l.opts.Store.WaitingSlots(ctx)
	if err != nil {
		return err
	}
	values := make(map[string]float64, len(waiting))
	for _, w := range waiting {
		values[w.Pool+labelSep+string(w.Priority)] = float64(w.Slots)
	}
	l.slotSeries = setGauges(l.metrics.poolWaitingSlots, l.slotSeries, values)
	return nil
}
