package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReapedRetry is an instance that the reaper moved to RETRYING: its
// failed attempt, the task, the reason recorded and the workers that died
// running it so far.
type ReapedRetry struct {
	InstanceID int64
	Attempt    int
	Task       string
	Reason     string
	Deaths     int
}

// ReapedRetries returns, in id order from after on, at most limit
// instances RETRYING for longer than age (by PostgreSQL's clock) whose
// move to RETRYING was the reaper's: those whose next attempt the reaper
// may have failed to send (its write committed, then its dispatcher died
// before the retry was published). The query reads the live instances' index and, for each
// RETRYING one, its latest transition.
func (s *Store) ReapedRetries(ctx context.Context, age time.Duration, after int64, limit int) ([]ReapedRetry, error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.id, i.attempt, i.task, t.reason, i.deaths
FROM instances i
CROSS JOIN LATERAL (
	SELECT operator, to_state, attempt, reason FROM instance_transitions tr
	WHERE tr.instance_id = i.id ORDER BY tr.id DESC LIMIT 1
) t
WHERE i.state = 'RETRYING' AND i.id > $3 AND i.updated_at < now() - $1::bigint * interval '1 millisecond'
	AND t.operator = $2 AND t.to_state = 'RETRYING' AND t.attempt = i.attempt
ORDER BY i.id LIMIT $4`, age.Milliseconds(), OperatorReaper, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list reaped retries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReapedRetry, error) {
		var r ReapedRetry
		err := row.Scan(&r.InstanceID, &r.Attempt, &r.Task, &r.Reason, &r.Deaths)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list reaped retries: %w", err)
	}
	return out, nil
}
