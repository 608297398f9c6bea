package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Due is what the ends of a batch of instances make due: see
// [Store.DueAfterEnds].
type Due struct {
	// Firings are the chained tasks to fire (see [Store.ChainFirings]).
	Firings []ChainFiring
	// Waiting are the tasks among the ended ones with WAITING instances,
	// which a slot of max_running_instances the ends freed may start
	// ([Store.StartWaiting]).
	Waiting []string
	// Limited tells that instances wait for named limits, which a slot
	// the ends freed may admit ([Store.PromoteLimited]).
	Limited bool
}

// waitingOnLimits is the FROM and WHERE of the instances (i) that wait for
// a named limit, one row a limit not yet admitting them (il): what
// [Store.PromoteLimited] looks at.
const waitingOnLimits = `FROM instances i JOIN instance_limits il ON il.instance_id = i.id
	WHERE i.state = 'WAITING' AND il.admitted_at IS NULL`

// limitedWaiting tells whether any instance waits for a named limit: the
// look of [Store.PromoteLimited], asked only whether it would find any.
const limitedWaiting = `SELECT EXISTS (SELECT 1 ` + waitingOnLimits + `)`

// DueAfterEnds returns what the ends of a batch make due, read in one round
// trip: at a steady rate the dispatcher asks after every small batch of
// ends, and most find nothing due. Call it after the transaction that
// recorded the ends has committed (see [Store.ChainFirings]).
func (s *Store) DueAfterEnds(ctx context.Context, ended []RunEnd) (Due, error) {
	var due Due
	if len(ended) == 0 {
		return due, nil
	}
	tasks := make([]string, len(ended))
	for i, e := range ended {
		tasks[i] = e.Task
	}
	stmts := []statement{waitingQuery(tasks, &due.Waiting), {sql: limitedWaiting, read: func(rows pgx.Rows) (err error) {
		due.Limited, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
		return err
	}}}
	if chains, ok := chainFiringsQuery(ended, &due.Firings); ok {
		stmts = append(stmts, chains)
	}
	if err := queriesWith(ctx, s.pool, genericPlan, stmts...); err != nil {
		return Due{}, fmt.Errorf("find what %d ends make due: %w", len(ended), err)
	}
	return due, nil
}
