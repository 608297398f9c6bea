package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// WithWaiting is the look PromoteWaiting takes first, for the tests of its plan.
const WithWaiting = withWaiting

// TasksNamed and ChainParentsSQL are the statements of GetTasks and
// ChainFirings, for the tests of their plans.
const (
	TasksNamed      = tasksNamed
	ChainParentsSQL = chainParentsSQL
)

// FailureStreaks and RecentRuns are the health report's reads of a task's
// latest instances, for the tests of their plans.
const (
	FailureStreaks = failureStreaks
	RecentRuns     = recentRuns
)

// InstanceTimesQuery is InstanceTimes' statement, for the tests of its plan.
const InstanceTimesQuery = instanceTimes

// ReadLatest runs q (FailureStreaks or RecentRuns, or EXPLAIN of one) as
// the health report runs them and returns the first column of its rows.
func (s *Store) ReadLatest(ctx context.Context, q string, args ...any) ([]string, error) {
	var out []string
	err := s.readLatest(ctx, q, args, func(rows pgx.Rows) error {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// RelayTransitions is the relay's page of transitions, for the tests of its plan.
var RelayTransitions = relayTransitions

// Conn is the relay's session, for the tests of its plans.
func (r *Relay) Conn() *pgx.Conn { return r.conn }

// ListInstancesSQL is the statement ListInstances runs for f and its
// arguments, for the tests of its plans.
func ListInstancesSQL(f InstanceFilter) (string, []any) {
	sql, args, _ := listInstancesSQL(f)
	return sql, args
}

// ChooseFamiliesSQL is the mover's choice of families, for the tests of
// its plan.
const ChooseFamiliesSQL = chooseFamiliesSQL

// CopiedHot is the mover's FROM of the copies still in the hot tables,
// for the tests of its plan.
const CopiedHot = copiedHot
