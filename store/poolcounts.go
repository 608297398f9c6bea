package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// PoolCount is how many instances of a pool at a priority are in a
// state, and the worker slots their attempts take.
type PoolCount struct {
	Pool     string
	Priority schemas.Priority
	State    schemas.State
	Count    int
	// Slots is the sum of their task versions' execution.slots (1 for a
	// task that declares none).
	Slots int
}

// PoolAttemptCounts counts, by pool, priority and state, the instances
// whose attempt a worker of the pool has to run or is running: DISPATCHED
// (waiting on the dispatch stream, held back for fairness, delivered, or
// taken and not yet reported started) and RUNNING, and the worker slots
// they take. Pools with none are left out. Autoscaling reads the slots' sum (ax_pool_slots):
// it does not depend on how the pool's work is split across consumers, nor
// on an executor having acknowledged a dispatch, and a heavy task counts
// for the slots it takes.
func (s *Store) PoolAttemptCounts(ctx context.Context) ([]PoolCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.pool, i.priority, i.state, count(*),
		       sum(GREATEST(COALESCE((v.definition->'execution'->>'slots')::int, 1), 1))
		FROM instances i LEFT JOIN task_versions v ON v.name = i.task AND v.version = i.task_version
		WHERE i.state IN ('DISPATCHED', 'RUNNING')
		GROUP BY i.pool, i.priority, i.state ORDER BY i.pool, i.priority, i.state`)
	if err != nil {
		return nil, fmt.Errorf("count pool attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PoolCount])
	if err != nil {
		return nil, fmt.Errorf("count pool attempts: %w", err)
	}
	return out, nil
}
