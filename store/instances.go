package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Operators recorded on transitions the dispatcher makes by itself.
const (
	OperatorDispatcher = "dispatcher"
	OperatorReaper     = "reaper"
)

// WorkerOperator is the operator recorded on a transition an executor's report made.
func WorkerOperator(workerID string) string { return "worker:" + workerID }

// NewInstance is one instance for [Store.CreateInstances] to create: a
// firing of a task with the execution settings of the task's current version.
type NewInstance struct {
	Task        string
	TaskVersion int
	EventID     string
	Source      schemas.Source
	// Operator names who fired a manual run; it is recorded on the CREATED transition.
	Operator    string
	Priority    schemas.Priority
	Pool        string
	Handler     string
	TimeoutMS   int64
	MaxAttempts int
	RetryPolicy schemas.Retry
	Payload     json.RawMessage
	FiredAt     time.Time
	// State is the state after CREATED: DISPATCHED, or SKIPPED with Reason.
	State  schemas.State
	Reason string
}

// Attempt is an instance as the dispatcher needs it to route an attempt.
type Attempt struct {
	ID          int64
	Task        string
	TaskVersion int
	EventID     string
	State       schemas.State
	Attempt     int
	MaxAttempts int
	RetryPolicy schemas.Retry
	Priority    schemas.Priority
	Pool        string
	Handler     string
	TimeoutMS   int64
	Payload     json.RawMessage
	FiredAt     time.Time
	// DispatchedAt is when the current attempt was routed.
	DispatchedAt time.Time
	// Created is true when this call created the instance (false: it existed).
	Created bool
}

// attemptColumns lists the columns scanAttempt reads, of the table named t.
func attemptColumns(t string) string {
	return fmt.Sprintf(`%[1]s.id, %[1]s.task, %[1]s.task_version, %[1]s.event_id, %[1]s.state, %[1]s.attempt,
	%[1]s.max_attempts, %[1]s.retry_policy, %[1]s.priority, %[1]s.pool, %[1]s.handler, %[1]s.timeout_ms, %[1]s.payload,
	%[1]s.fired_at, COALESCE(%[1]s.dispatched_at, %[1]s.created_at)`, t)
}

func scanAttempt(row pgx.Row, extra ...any) (Attempt, error) {
	var a Attempt
	var retry []byte
	dest := append([]any{&a.ID, &a.Task, &a.TaskVersion, &a.EventID, &a.State, &a.Attempt, &a.MaxAttempts,
		&retry, &a.Priority, &a.Pool, &a.Handler, &a.TimeoutMS, &a.Payload, &a.FiredAt, &a.DispatchedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return a, err
	}
	if err := json.Unmarshal(retry, &a.RetryPolicy); err != nil {
		return a, fmt.Errorf("decode retry policy of instance %d: %w", a.ID, err)
	}
	return a, nil
}

// CreateInstances creates the instances of a batch of firings in one
// statement, with their CREATED transition and the one after it. A firing
// whose (task, event_id) already has an instance creates nothing: its
// existing instance is returned with Created false. An instance that another
// transaction is creating at the same moment is left out of the result: that
// transaction owns it.
func (s *Store) CreateInstances(ctx context.Context, in []NewInstance) ([]Attempt, error) {
	if len(in) == 0 {
		return nil, nil
	}
	n := len(in)
	var (
		task, eventID, source, operator, priority, pool, handler, state, reason = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		version, maxAttempts = make([]int32, n), make([]int32, n)
		timeout              = make([]int64, n)
		retry, payload       = make([][]byte, n), make([][]byte, n)
		firedAt              = make([]time.Time, n)
	)
	for i, x := range in {
		task[i], eventID[i], source[i], operator[i] = x.Task, x.EventID, string(x.Source), x.Operator
		priority[i], pool[i], handler[i], state[i], reason[i] = string(x.Priority), x.Pool, x.Handler, string(x.State), x.Reason
		version[i], maxAttempts[i], timeout[i], firedAt[i] = int32(x.TaskVersion), int32(x.MaxAttempts), x.TimeoutMS, x.FiredAt
		r, err := json.Marshal(x.RetryPolicy)
		if err != nil {
			return nil, fmt.Errorf("create instances: encode retry policy: %w", err)
		}
		retry[i] = r
		if len(x.Payload) > 0 {
			payload[i] = x.Payload
		}
	}
	rows, err := s.pool.Query(ctx, `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
		$8::text[], $9::bigint[], $10::int[], $11::jsonb[], $12::jsonb[], $13::timestamptz[], $14::text[], $15::text[])
	AS t(task, task_version, event_id, source, operator, priority, pool, handler, timeout_ms, max_attempts,
		retry_policy, payload, fired_at, state, reason)
), ins AS (
	INSERT INTO instances (task, task_version, event_id, source, operator, state, max_attempts, retry_policy,
		priority, pool, handler, timeout_ms, payload, fired_at, dispatched_at, finished_at)
	SELECT task, task_version, event_id, source, operator, state, max_attempts, retry_policy,
		priority, pool, handler, timeout_ms, payload, fired_at,
		CASE WHEN state = 'DISPATCHED' THEN now() END, CASE WHEN state = 'SKIPPED' THEN now() END
	FROM input
	ON CONFLICT (task, event_id) DO NOTHING
	RETURNING *
), created AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT ins.id, ins.task, NULL, 'CREATED', 1,
		CASE WHEN ins.operator <> '' THEN ins.operator ELSE ins.source END, ''
	FROM ins
	UNION ALL
	SELECT ins.id, ins.task, 'CREATED', ins.state, 1, 'dispatcher', input.reason
	FROM ins JOIN input USING (task, event_id)
)
SELECT `+attemptColumns("ins")+`, true FROM ins
UNION ALL
SELECT `+attemptColumns("i")+`, false FROM instances i JOIN input ON i.task = input.task AND i.event_id = input.event_id`,
		task, version, eventID, source, operator, priority, pool, handler, timeout, maxAttempts, retry, payload,
		firedAt, state, reason)
	if err != nil {
		return nil, fmt.Errorf("create %d instances: %w", n, err)
	}
	out, err := collectAttempts(rows, true)
	if err != nil {
		return nil, fmt.Errorf("create %d instances: %w", n, err)
	}
	return out, nil
}

func collectAttempts(rows pgx.Rows, withCreated bool) ([]Attempt, error) {
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		var err error
		if withCreated {
			a, err = scanAttempt(rows, &a.Created)
		} else {
			a, err = scanAttempt(rows)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// RetryStart names an attempt to start: Attempt is the new attempt's number.
type RetryStart struct {
	InstanceID int64
	Attempt    int
}

// StartRetries moves each instance from RETRYING at Attempt-1 to DISPATCHED
// at Attempt, in one statement. It returns the instances that are DISPATCHED
// at their Attempt afterwards — moved now, or by an earlier call whose
// dispatch may not have been published — and leaves out the rest (cancelled,
// already running, unknown).
func (s *Store) StartRetries(ctx context.Context, in []RetryStart) ([]Attempt, error) {
	if len(in) == 0 {
		return nil, nil
	}
	ids, attempts := make([]int64, len(in)), make([]int32, len(in))
	for i, r := range in {
		ids[i], attempts[i] = r.InstanceID, int32(r.Attempt)
	}
	rows, err := s.pool.Query(ctx, `
WITH input AS (
	SELECT * FROM unnest($1::bigint[], $2::int[]) AS t(id, attempt)
), upd AS (
	UPDATE instances i SET state = 'DISPATCHED', attempt = input.attempt, dispatched_at = now(),
		worker_id = '', updated_at = now()
	FROM input
	WHERE i.id = input.id AND i.state = 'RETRYING' AND i.attempt = input.attempt - 1
	RETURNING i.*
), tr AS (
	INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
	SELECT id, task, 'RETRYING', 'DISPATCHED', attempt, 'dispatcher', 'attempt ' || attempt || ' of ' || max_attempts
	FROM upd
)
SELECT `+attemptColumns("upd")+` FROM upd
UNION ALL
SELECT `+attemptColumns("i")+` FROM instances i JOIN input ON i.id = input.id AND i.attempt = input.attempt
WHERE i.state = 'DISPATCHED'`,
		ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("start %d retries: %w", len(in), err)
	}
	out, err := collectAttempts(rows, false)
	if err != nil {
		return nil, fmt.Errorf("start %d retries: %w", len(in), err)
	}
	return out, nil
}
