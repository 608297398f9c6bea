package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// Wait is why one attempt of an instance waits, as the dispatcher records
// it in instance_waits (see [Store.SetWaits]).
type Wait struct {
	InstanceID int64
	Attempt    int
	// Kind, Reason, Ends and Since are those of [schemas.Wait].
	Kind   schemas.WaitKind
	Reason string
	Ends   string
	Since  time.Time
}

// SetWaits records waits, one statement for all: a row whose attempt,
// kind and reason are unchanged keeps its since. Callers write only
// changes, so it does not run per attempt.
func (s *Store) SetWaits(ctx context.Context, waits []Wait) error {
	if len(waits) == 0 {
		return nil
	}
	ids := make([]int64, len(waits))
	attempts := make([]int32, len(waits))
	kinds, reasons, ends := make([]string, len(waits)), make([]string, len(waits)), make([]string, len(waits))
	since := make([]time.Time, len(waits))
	for i, w := range waits {
		ids[i], attempts[i], kinds[i], reasons[i], ends[i], since[i] = w.InstanceID, int32(w.Attempt), string(w.Kind), w.Reason, w.Ends, w.Since
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO instance_waits (instance_id, attempt, kind, reason, ends, since)
		SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
		ORDER BY 1
		ON CONFLICT (instance_id) DO UPDATE SET attempt = EXCLUDED.attempt, kind = EXCLUDED.kind,
			reason = EXCLUDED.reason, ends = EXCLUDED.ends,
			since = CASE WHEN instance_waits.attempt = EXCLUDED.attempt AND instance_waits.kind = EXCLUDED.kind
				AND instance_waits.reason = EXCLUDED.reason THEN instance_waits.since ELSE EXCLUDED.since END`,
		ids, attempts, kinds, reasons, ends, since)
	if err != nil {
		return fmt.Errorf("record %d wait reasons: %w", len(waits), err)
	}
	return nil
}

// PruneWaits deletes the wait reasons of instances that no longer wait
// (running, ended, or moved to the history), so that the table holds only
// the instances that wait now or did until lately.
func (s *Store) PruneWaits(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `
		DELETE FROM instance_waits w WHERE NOT EXISTS (SELECT 1 FROM instances i
			WHERE i.id = w.instance_id AND i.state IN ('CREATED', 'WAITING', 'DISPATCHED', 'RETRYING'))`)
	if err != nil {
		return fmt.Errorf("prune wait reasons: %w", err)
	}
	return nil
}

// ClearWaits deletes the wait reasons of instance ids (attempts that
// routed after waiting).
func (s *Store) ClearWaits(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM instance_waits WHERE instance_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("clear %d wait reasons: %w", len(ids), err)
	}
	return nil
}

// Waits returns the recorded wait reasons of instances ids, by id,
// whatever their attempt: the caller keeps those of an instance's current
// attempt (see [WaitOf]).
func (s *Store) Waits(ctx context.Context, ids []int64) (map[int64]Wait, error) {
	out := make(map[int64]Wait)
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT instance_id, attempt, kind, reason, ends, since FROM instance_waits
		WHERE instance_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read wait reasons: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var w Wait
		if err := rows.Scan(&w.InstanceID, &w.Attempt, &w.Kind, &w.Reason, &w.Ends, &w.Since); err != nil {
			return nil, fmt.Errorf("read wait reasons: %w", err)
		}
		out[w.InstanceID] = w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read wait reasons: %w", err)
	}
	return out, nil
}

// WaitOf returns w as the wait of in, or nil when it is not about in's
// current attempt or in does not wait.
func WaitOf(in schemas.Instance, w Wait, ok bool) *schemas.Wait {
	if !ok || w.Attempt != in.Attempt || !in.State.Waits() {
		return nil
	}
	return &schemas.Wait{Kind: w.Kind, Reason: w.Reason, Ends: w.Ends, Since: w.Since}
}
