package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/dispatcher"
)

// TestHistoryRoundMovesWhatIsThere: one round of the history's
// maintenance moves every movable instance it can within half its
// interval, not a fixed 20 calls of 1,000 (which capped the mover at
// 20,000 an interval: 28.8 M a day at the default minute, below what the
// pipeline sustains).
func TestHistoryRoundMovesWhatIsThere(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and moves 25,000 instances")
	}
	t.Parallel()
	s := newSystem(t, func(o *dispatcher.Options) {
		// The leader's own loop runs at its start only, before the
		// instances are there.
		o.History = dispatcher.HistoryOptions{Interval: time.Hour}
	})
	const n = 25000
	s.writeMovable(0, n)
	rep, err := s.dispatcher.MaintainHistory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var left int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM instances WHERE event_id LIKE 'move-%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if rep.Moved.Moved != n || left != 0 {
		t.Errorf("one round moved %d (%+v), %d left in the hot tables; want all %d moved", rep.Moved.Moved, rep.Moved, left, n)
	}
}
