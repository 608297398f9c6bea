package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Event is something that befell an attempt without changing its state,
// for the instance's timeline (table instance_events; see
// [Store.RecordStaleReports] for the stale reports).
type Event struct {
	InstanceID int64
	Attempt    int
	// Kind names the event, e.g. "worker_gone".
	Kind     string
	Operator string
	Reason   string
	At       time.Time
}

// RecordEvents adds events to their instances' timelines, one per attempt
// and kind: an event recorded before adds none, nor one of an instance no
// longer in the hot tables. Events are not transitions
// and are not relayed to AX_AUDIT.
func (s *Store) RecordEvents(ctx context.Context, in []Event) error {
	if len(in) == 0 {
		return nil
	}
	n := len(in)
	ids, attempts, kinds, operators, reasons, at := make([]int64, n), make([]int32, n), make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, e := range in {
		ids[i], attempts[i], kinds[i], operators[i], reasons[i], at[i] = e.InstanceID, int32(e.Attempt), e.Kind, e.Operator, e.Reason, e.At
	}
	// The instances are locked first, in id order: one that moved to the
	// history meanwhile (see Store.MoveHistory) is left out, not a foreign
	// key's error.
	_, err := s.pool.Exec(ctx, `
WITH lk AS (
	SELECT id FROM instances WHERE id = ANY($1) ORDER BY id FOR KEY SHARE
)
INSERT INTO instance_events (instance_id, attempt, kind, operator, reason, at)
SELECT u.* FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
	AS u(instance_id, attempt, kind, operator, reason, at)
JOIN lk ON lk.id = u.instance_id
ORDER BY 1
ON CONFLICT (instance_id, attempt, kind) DO NOTHING`, ids, attempts, kinds, operators, reasons, at)
	if err != nil {
		return fmt.Errorf("record %d instance events: %w", n, err)
	}
	return nil
}

// DrillJitterInstances returns which of ids are instances of tasks of type
// [schemas.DrillJitterTaskType], whose reports a dispatcher with drill
// faults on records late.
func (s *Store) DrillJitterInstances(ctx context.Context, ids []int64) (map[int64]bool, error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.id FROM instances i JOIN tasks t ON t.name = i.task
WHERE i.id = ANY($1) AND t.definition->>'task_type' = $2`, ids, schemas.DrillJitterTaskType)
	if err != nil {
		return nil, fmt.Errorf("read drill instances: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read drill instances: %w", err)
	}
	out := make(map[int64]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}
