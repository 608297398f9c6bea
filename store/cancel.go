package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CancelRequest asks to cancel one instance on an operator's behalf.
type CancelRequest struct {
	InstanceID int64  `json:"id"`
	Operator   string `json:"operator"`
	Reason     string `json:"reason"`
}

// CancelInstances cancels every requested instance that has not ended yet
// (CREATED, WAITING, DISPATCHED, RUNNING or RETRYING → CANCELLED), recording
// the operator and reason on the transition, in one statement. Instances
// that already ended, or do not exist, are left out of the result.
func (s *Store) CancelInstances(ctx context.Context, in []CancelRequest) ([]Victim, error) {
	if len(in) == 0 {
		return nil, nil
	}
	batch, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("cancel %d instances: encode: %w", len(in), err)
	}
	var out []Victim
	err = queryWith(ctx, s.pool, byKey, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Victim, error) {
			var v Victim
			err := row.Scan(&v.InstanceID, &v.Task, &v.RunID, &v.Attempt, &v.WorkerID, &v.WasRunning)
			return v, err
		})
		return err
	}, `
WITH r AS (
	SELECT DISTINCT ON (id) * FROM jsonb_to_recordset($1::jsonb) AS t(id bigint, operator text, reason text)
), old AS (
	-- In id order, as every batch statement locks (see reportRows.record).
	SELECT i.id, i.state AS old_state
	FROM `+lockedInstances("r")+` WHERE i.state IN ('CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING')
), upd AS (
	UPDATE instances i SET state = 'CANCELLED', finished_at = now(), updated_at = now(),
		error = 'cancelled: ' || r.reason
	FROM r, old WHERE i.id = r.id AND old.id = i.id
	RETURNING i.id, i.task, i.run_id, i.attempt, i.worker_id, old.old_state, r.operator, r.reason
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, old_state, 'CANCELLED', attempt, operator, reason FROM upd
)
SELECT id, task, run_id, attempt, worker_id, old_state IN ('DISPATCHED', 'RUNNING') FROM upd`, batch)
	if err != nil {
		return nil, fmt.Errorf("cancel %d instances: %w", len(in), err)
	}
	return out, nil
}
