package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ParentStart names the parent of a sharded or broadcast firing whose
// children exist, and how many there are.
type ParentStart struct {
	InstanceID int64
	ShardCount int
}

// StartParents moves each parent from DISPATCHED to RUNNING once its
// children are made, setting its shard_count, in one statement. A parent
// has no worker and no started_at: the reaper's lease and timeout checks,
// which read started_at, leave it alone; it ends by [Store.EndParents].
// It returns the ids of the parents moved now.
func (s *Store) StartParents(ctx context.Context, in []ParentStart) ([]int64, error) {
	if len(in) == 0 {
		return nil, nil
	}
	ids, counts := make([]int64, len(in)), make([]int32, len(in))
	for i, p := range in {
		ids[i], counts[i] = p.InstanceID, int32(p.ShardCount)
	}
	var out []int64
	err := queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	}, `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::int[]) AS t(id, shard_count)
), lk AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM `+lockedInstances("input")+` WHERE i.state = 'DISPATCHED' AND i.parent_id IS NULL
), upd AS (
	UPDATE instances i SET state = 'RUNNING', shard_count = input.shard_count, updated_at = now()
	FROM input, lk
	WHERE i.id = input.id AND i.state = 'DISPATCHED' AND i.parent_id IS NULL AND lk.id = i.id
	RETURNING i.id, i.task, i.attempt, i.shard_count
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'DISPATCHED', 'RUNNING', attempt, 'dispatcher', 'fanned out into ' || shard_count || ' shards'
	FROM upd
)
SELECT id FROM upd ORDER BY id`, ids, counts)
	if err != nil {
		return nil, fmt.Errorf("start %d parents: %w", len(in), err)
	}
	return out, nil
}

// EndParents ends the RUNNING parents in the given runs whose children
// have all ended: SUCCEEDED when every child SUCCEEDED, else FAILED with an
// error naming the shards that did not. Two dispatchers that see the last
// children end at once end a parent once: the update is guarded by its
// state. It returns the ends of the parents ended now.
func (s *Store) EndParents(ctx context.Context, runs []string) ([]RunEnd, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	var out []RunEnd
	err := queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunEnd, error) {
			var e RunEnd
			err := row.Scan(&e.Task, &e.RunID)
			return e, err
		})
		return err
	}, `
WITH done AS (
	SELECT p.id, bool_and(c.state = 'SUCCEEDED') AS ok,
		string_agg(c.shard_index || ' (' || c.state || ')', ', ' ORDER BY c.shard_index)
			FILTER (WHERE c.state <> 'SUCCEEDED') AS failed
	FROM instances p JOIN instances c ON c.parent_id = p.id
	WHERE p.run_id = ANY($1::text[]) AND p.parent_id IS NULL AND p.shard_count > 0 AND p.state = 'RUNNING'
	GROUP BY p.id, p.shard_count
	HAVING count(*) = p.shard_count AND bool_and(c.state IN ('SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED'))
), lk AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id FROM `+lockedInstances("done")+` WHERE i.state = 'RUNNING'
), upd AS (
	UPDATE instances i SET
		state = CASE WHEN done.ok THEN 'SUCCEEDED' ELSE 'FAILED' END,
		error = CASE WHEN done.ok THEN '' ELSE 'shards did not succeed: ' || done.failed END,
		finished_at = now(), updated_at = now()
	FROM done, lk
	WHERE i.id = done.id AND i.state = 'RUNNING' AND lk.id = i.id
	RETURNING i.id, i.task, i.run_id, i.state, i.attempt, i.error
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'RUNNING', state, attempt, 'dispatcher',
		CASE WHEN error = '' THEN 'every shard succeeded' ELSE error END
	FROM upd
)
SELECT task, run_id FROM upd ORDER BY id`, runs)
	if err != nil {
		return nil, fmt.Errorf("end the parents in %d runs: %w", len(runs), err)
	}
	return out, nil
}

// Children returns the child instances of the given parents, in any state,
// by parent and shard index.
func (s *Store) Children(ctx context.Context, parents []int64) ([]Attempt, error) {
	if len(parents) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+attemptColumns("i")+` FROM instances i
WHERE i.parent_id = ANY($1::bigint[]) ORDER BY i.parent_id, i.shard_index`, parents)
	if err != nil {
		return nil, fmt.Errorf("read the children of %d instances: %w", len(parents), err)
	}
	out, err := collectAttempts(rows)
	if err != nil {
		return nil, fmt.Errorf("read the children of %d instances: %w", len(parents), err)
	}
	return out, nil
}
