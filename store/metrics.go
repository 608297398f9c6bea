package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// The queries the auditor's metrics and alert rules read. Each reads the
// live instances' partial index, an instance's transitions by their index,
// or a window of instance_transitions by its time index: none scans the
// instances that ended long ago.

// Reason prefixes of the failures the fleet metrics tell apart. An attempt
// that timed out ends with a reason starting with TimeoutReasonPrefix
// (the executor's "timeout after 1m0s", the reaper's "timeout: …"); one
// whose lease expired with LeaseExpiredReasonPrefix, by the reaper; one
// its worker handed back (a released report) with HandedBackReasonPrefix,
// which the store puts before the report's reason if it lacks it.
const (
	TimeoutReasonPrefix      = "timeout"
	LeaseExpiredReasonPrefix = "lease expired"
	HandedBackReasonPrefix   = "handed back"
)

// IsHandedBackReason reports whether a transition's reason says the
// attempt was handed back by its worker: it did not fail.
func IsHandedBackReason(reason string) bool { return strings.HasPrefix(reason, HandedBackReasonPrefix) }

// handedBackReason is the transition reason of a released report whose
// own reason is why.
func handedBackReason(why string) string {
	switch {
	case IsHandedBackReason(why):
		return why
	case why == "":
		return HandedBackReasonPrefix + " by its worker"
	}
	return HandedBackReasonPrefix + ": " + why
}

// IsTimeoutReason reports whether a transition's reason says the attempt timed out.
func IsTimeoutReason(reason string) bool { return strings.HasPrefix(reason, TimeoutReasonPrefix) }

// IsLeaseExpiredReason reports whether a transition's reason says the
// attempt's lease expired.
func IsLeaseExpiredReason(reason string) bool {
	return strings.HasPrefix(reason, LeaseExpiredReasonPrefix)
}

// InstanceTimes are the times of an instance that its latencies are measured from.
type InstanceTimes struct {
	// FiredAt is when its firing was due (the cron tick, the run_at of a
	// delayed firing, the moment of a manual one).
	FiredAt time.Time
	// Running holds when each attempt was recorded RUNNING, by attempt.
	Running map[int]time.Time
	// StartedAt is when the handler of attempt StartedAttempt (the
	// instance's current one) began, as its worker reported it: before
	// it was recorded RUNNING, which waits for the started report (sent
	// after a second, or with the final report). Zero when unknown.
	StartedAt      time.Time
	StartedAttempt int
}

// instanceTimes reads the instances $1 with when each attempt of theirs was
// recorded RUNNING: from the rows of instance_transitions that hold a
// transition to RUNNING as their first (to_state) or second (then_state)
// half, both of which are at the row's attempt and time. Each id is looked
// up by itself, its instance by the primary key and its rows by
// instance_transitions_instance_idx (OFFSET 0 keeps each LATERAL from being
// flattened into a join), whatever the tables' statistics: never the whole
// hot table. A join of the instances = ANY($1) with the view
// instance_transition_log, the table's two halves as a UNION ALL, was
// planned as a hash join over two scans of every row of instance_transitions
// (and, on a table not analysed since a burst began, a scan of every
// instance), for every batch of audit records. See
// TestInstanceTimesReadsItsInstancesOnly.
const instanceTimes = `
	SELECT i.id, i.fired_at, i.attempt, i.started_at, t.attempt, t.at
	FROM unnest($1::bigint[]) AS q(id)
	CROSS JOIN LATERAL (SELECT id, fired_at, attempt, started_at FROM instances WHERE id = q.id OFFSET 0) i
	LEFT JOIN LATERAL (
		SELECT attempt, at FROM instance_transitions
		WHERE instance_id = q.id AND (to_state = 'RUNNING' OR then_state = 'RUNNING') OFFSET 0
	) t ON true`

// InstanceTimes returns the times of the instances ids, by id, in one query;
// ids that name no instance are missing. The monitor reads it for the
// audit records that lack the times the relay puts on them.
func (s *Store) InstanceTimes(ctx context.Context, ids []int64) (map[int64]InstanceTimes, error) {
	out := make(map[int64]InstanceTimes, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, instanceTimes, ids)
	if err != nil {
		return nil, fmt.Errorf("read instance times: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id      int64
			fired   time.Time
			current int
			started *time.Time
			attempt *int
			at      *time.Time
		)
		if err := rows.Scan(&id, &fired, &current, &started, &attempt, &at); err != nil {
			return nil, fmt.Errorf("read instance times: %w", err)
		}
		it, ok := out[id]
		if !ok {
			it = InstanceTimes{FiredAt: fired, Running: map[int]time.Time{}}
			if started != nil {
				it.StartedAt, it.StartedAttempt = *started, current
			}
			out[id] = it
		}
		if attempt != nil && at != nil {
			it.Running[*attempt] = *at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read instance times: %w", err)
	}
	return out, nil
}

// LiveStates are the states an instance has before it ends.
var LiveStates = []schemas.State{schemas.StateCreated, schemas.StateWaiting, schemas.StateDispatched,
	schemas.StateRunning, schemas.StateRetrying}

// StateCount is how many instances of a task are in a state.
type StateCount struct {
	Task  string
	State schemas.State
	Count int
}

// LiveInstanceCounts counts the instances in each live state ([LiveStates])
// by task. Tasks with none are left out.
func (s *Store) LiveInstanceCounts(ctx context.Context) ([]StateCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT task, state, count(*) FROM instances
		WHERE state IN ('CREATED', 'WAITING', 'DISPATCHED', 'RUNNING', 'RETRYING')
		GROUP BY task, state ORDER BY task, state`)
	if err != nil {
		return nil, fmt.Errorf("count live instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StateCount])
	if err != nil {
		return nil, fmt.Errorf("count live instances: %w", err)
	}
	return out, nil
}

// BacklogCount is how many instances of a task have waited in a state
// longer than the age asked for.
type BacklogCount struct {
	Task  string
	Pool  string
	State schemas.State
	Count int
	// OldestID is the instance that has waited longest.
	OldestID int64
}

// Backlog counts, by task, pool and state, the instances that have been
// DISPATCHED (not yet taken by an executor), WAITING (held by the task's
// concurrency limit) or RETRYING (waiting for their next attempt) since
// before now - age.
func (s *Store) Backlog(ctx context.Context, age time.Duration, now time.Time) ([]BacklogCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT task, pool, state, count(*), (array_agg(id ORDER BY updated_at))[1] FROM instances
		WHERE state IN ('DISPATCHED', 'WAITING', 'RETRYING') AND updated_at < $1
		GROUP BY task, pool, state ORDER BY task, pool, state`, now.Add(-age))
	if err != nil {
		return nil, fmt.Errorf("count backlog: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[BacklogCount])
	if err != nil {
		return nil, fmt.Errorf("count backlog: %w", err)
	}
	return out, nil
}

// TaskEnds is what became of a task's attempts within a window.
type TaskEnds struct {
	Task string
	// Attempts is how many attempts ended (SUCCEEDED, FAILED or RETRYING).
	Attempts int
	// Timeouts is how many of them timed out, and LastTimeoutID the latest
	// instance that did (0 for none).
	Timeouts      int
	LastTimeoutID int64
	// Failed is how many instances ended FAILED, and LastFailedID the
	// latest of them (0 for none).
	Failed       int
	LastFailedID int64
	// Quarantined is how many instances were failed as quarantined
	// (workers kept dying while running them), and LastQuarantinedID the
	// latest of them (0 for none).
	Quarantined       int
	LastQuarantinedID int64
}

// RecentEnds sums up, by task, the attempts that ended at or after since,
// from the transitions' time index. Tasks without any are left out.
func (s *Store) RecentEnds(ctx context.Context, since time.Time) ([]TaskEnds, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT task,
			count(*) FILTER (WHERE attempt_end),
			count(*) FILTER (WHERE attempt_end AND timed_out),
			COALESCE(max(instance_id) FILTER (WHERE attempt_end AND timed_out), 0),
			count(*) FILTER (WHERE to_state = 'FAILED'),
			COALESCE(max(instance_id) FILTER (WHERE to_state = 'FAILED'), 0),
			count(*) FILTER (WHERE to_state = 'FAILED' AND quarantined),
			COALESCE(max(instance_id) FILTER (WHERE to_state = 'FAILED' AND quarantined), 0)
		FROM (
			SELECT task, instance_id, to_state,
				to_state IN ('SUCCEEDED', 'FAILED', 'RETRYING') AND from_state IN ('DISPATCHED', 'RUNNING') AS attempt_end,
				starts_with(reason, $2) AS timed_out, starts_with(reason, $3) AS quarantined
			FROM instance_transition_log WHERE at >= $1 AND task NOT IN `+rehearsalTasks+`
		) t
		GROUP BY task ORDER BY task`, since, TimeoutReasonPrefix, QuarantinedReasonPrefix)
	if err != nil {
		return nil, fmt.Errorf("sum up recent attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TaskEnds])
	if err != nil {
		return nil, fmt.Errorf("sum up recent attempts: %w", err)
	}
	return out, nil
}
