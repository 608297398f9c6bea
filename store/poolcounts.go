package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// PoolCount is how many instances of a pool are in a state.
type PoolCount struct {
	Pool  string
	State schemas.State
	Count int
}

// PoolAttemptCounts counts, by pool, the instances whose attempt a worker
// of the pool has to run or is running: DISPATCHED (waiting on the
// dispatch stream, delivered, or taken and not yet reported started) and
// RUNNING. Pools with none are left out. Autoscaling reads the sum
// (ax_pool_attempts): it does not depend on how the pool's work is split
// across consumers, nor on an executor having acknowledged a dispatch.
func (s *Store) PoolAttemptCounts(ctx context.Context) ([]PoolCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT pool, state, count(*) FROM instances
		WHERE state IN ('DISPATCHED', 'RUNNING')
		GROUP BY pool, state ORDER BY pool, state`)
	if err != nil {
		return nil, fmt.Errorf("count pool attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PoolCount])
	if err != nil {
		return nil, fmt.Errorf("count pool attempts: %w", err)
	}
	return out, nil
}
