package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// ChainCycleError is the error of [Store.ApplyTask] for a definition whose
// after would close a cycle with the stored tasks: the tasks on it could
// never fire. Cycle lists them in the order they would run, the applied task
// first and last.
type ChainCycleError struct {
	Cycle []string
}

// Error names the cycle: "chain cycle: a → b → c → a".
func (e *ChainCycleError) Error() string {
	return "chain cycle: " + strings.Join(e.Cycle, " → ")
}

// chainLockKey is the transaction-level advisory lock that serialises the
// applies of definitions with after: of two applies that would close a
// cycle together, the second sees the first and refuses. Applies without
// after cannot close a cycle and do not take it.
const chainLockKey int64 = 0x61785f636861696e // "ax_chain"

// checkChainCycle refuses def with a *[ChainCycleError] when its after
// closes a cycle with the tasks stored. It runs in tx, the transaction that
// stores def: it takes the chain lock first and reads in a later statement,
// so that it sees every definition applied under the lock before.
func checkChainCycle(ctx context.Context, tx pgx.Tx, def *schemas.Task) error {
	if len(def.After) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, chainLockKey); err != nil {
		return fmt.Errorf("lock chains: %w", err)
	}
	parents := afterNames(def.After)
	// The after entries of every stored task that def's parents run after,
	// however far up: the only tasks a cycle through def can pass. def's
	// own stored entries are left out, since its new after replaces them.
	rows, err := tx.Query(ctx, `
WITH RECURSIVE up(name) AS (
	SELECT unnest($2::text[])
	UNION
	SELECT tp.parent FROM up JOIN task_parents tp ON tp.child = up.name AND tp.child <> $1
)
SELECT tp.child, tp.parent FROM up JOIN task_parents tp ON tp.child = up.name
WHERE tp.child <> $1
ORDER BY tp.child, tp.position`, def.TaskName, parents)
	if err != nil {
		return fmt.Errorf("read chains: %w", err)
	}
	graph := map[string][]string{def.TaskName: parents}
	var child, parent string
	if _, err := pgx.ForEachRow(rows, []any{&child, &parent}, func() error {
		graph[child] = append(graph[child], parent)
		return nil
	}); err != nil {
		return fmt.Errorf("read chains: %w", err)
	}
	if cycle := findCycle(graph, def.TaskName); cycle != nil {
		return &ChainCycleError{Cycle: cycle}
	}
	return nil
}

// setTaskParents makes task_parents hold def's after entries, in tx, the
// transaction that stores def as a new version.
func setTaskParents(ctx context.Context, tx pgx.Tx, def *schemas.Task) error {
	parents := afterNames(def.After)
	_, err := tx.Exec(ctx, `
WITH gone AS (
	DELETE FROM task_parents WHERE child = $1 AND NOT (parent = ANY($2::text[]))
)
INSERT INTO task_parents (child, parent, position)
SELECT $1, p, ord - 1 FROM unnest($2::text[]) WITH ORDINALITY AS u(p, ord)
ON CONFLICT (child, parent) DO UPDATE SET position = EXCLUDED.position`, def.TaskName, parents)
	if err != nil {
		return fmt.Errorf("save the after of task %s: %w", def.TaskName, err)
	}
	return nil
}

// afterNames returns the parents an after names, in its order: its chain
// parents only, not its calendar-aligned ones (with a window), which
// never fire the task (dispatcher/calendar.go).
func afterNames(after []schemas.After) []string {
	names := make([]string, 0, len(after))
	for _, a := range after {
		if a.Window == "" {
			names = append(names, a.Task)
		}
	}
	return names
}

// findCycle looks for a way from start back to itself in graph, which maps
// each task to the tasks it runs after, trying parents in the order given.
// It returns the cycle in the order the tasks would run, start first and
// last ("a → c → b → a" when a runs after b, b after c and c after a), or
// nil when there is none. Every task is visited once.
func findCycle(graph map[string][]string, start string) []string {
	visited := make(map[string]bool)
	var path []string // from start, each task running after the next
	var walk func(task string) bool
	walk = func(task string) bool {
		for _, p := range graph[task] {
			if p == start {
				path = append(path, p)
				return true
			}
			if visited[p] {
				continue
			}
			visited[p] = true
			path = append(path, p)
			if walk(p) {
				return true
			}
			path = path[:len(path)-1]
		}
		return false
	}
	path = append(path, start)
	if !walk(start) {
		return nil
	}
	// path runs against the order of execution.
	slices.Reverse(path)
	return path
}

// RunEnd is an instance that reached a terminal state (SUCCEEDED, FAILED,
// SKIPPED, CANCELLED) in a run, as [Store.ChainFirings] takes it.
type RunEnd struct {
	Task  string
	RunID string
	// NoParent is true when the instance is known to be no shard or
	// broadcast child, so that its end can end no parent (see
	// [Store.EndParents]); false when it may be one.
	NoParent bool
}

// ChainFiring is a chained task whose parents have all ended in a run: the
// dispatcher fires it there, once (its event id is
// [schemas.ChainEventID](Task, RunID)).
type ChainFiring struct {
	// Task is the chained task; RunID the run it fires in.
	Task  string
	RunID string
	// Parents tells how each of the task's parents ended in the run: its
	// latest instance there.
	Parents map[string]schemas.ParentResult
}

// ChainFirings returns the chained tasks that the ends of a batch of
// instances make due: every task whose after names one of the ended tasks,
// and all of whose parents now have a terminal instance in the same run.
// Each (task, run) comes back once, whether or not it fired before: a
// chain firing is idempotent (see [schemas.ChainEventID]). Ends without a
// run id are ignored.
//
// Call it after the transaction that recorded the ends has committed.
// When two parents of a task end at the same moment in two dispatchers,
// each calls it after its own commit, so the later of the two reads sees
// both ends: one of them at least returns the firing.
func (s *Store) ChainFirings(ctx context.Context, ended []RunEnd) ([]ChainFiring, error) {
	var out []ChainFiring
	q, ok := chainFiringsQuery(ended, &out)
	if !ok {
		return nil, nil
	}
	if err := queriesWith(ctx, s.pool, genericPlan, q); err != nil {
		return nil, fmt.Errorf("find chain firings of %d ends: %w", len(ended), err)
	}
	return out, nil
}

// chainFiringsQuery returns the statement of [Store.ChainFirings] for
// ended, which reads its firings into out; false when no end has a run.
func chainFiringsQuery(ended []RunEnd, out *[]ChainFiring) (statement, bool) {
	var tasks, runs []string
	seen := make(map[RunEnd]bool, len(ended))
	for _, e := range ended {
		if e.RunID == "" || seen[e] {
			continue
		}
		seen[e] = true
		tasks, runs = append(tasks, e.Task), append(runs, e.RunID)
	}
	if len(tasks) == 0 {
		return statement{}, false
	}
	// For each child of an ended task and each of the child's parents, the
	// parent's latest instance in the run, if any.
	return statement{sql: chainParentsSQL, args: []any{textArray(tasks), textArray(runs)}, read: func(rows pgx.Rows) (err error) {
		*out, err = collectChainFirings(rows)
		return err
	}}, true
}

// chainParentsSQL is the statement of [Store.ChainFirings]: for each
// child of the tasks $1 ended in the runs $2, and each of its parents, the
// parent's latest instance in the run, ordered by run and child. It runs
// with the generic plan (genericPlan): lookups by index whatever the ends.
const chainParentsSQL = `
WITH children AS (
	SELECT DISTINCT e.run_id, tp.child
	FROM unnest($1::text[], $2::text[]) AS e(task, run_id) JOIN task_parents tp ON tp.parent = e.task
)
SELECT c.run_id, c.child, p.parent, i.id, i.state, i.output
FROM children c JOIN task_parents p ON p.child = c.child
LEFT JOIN LATERAL (
	SELECT id, state, output FROM instances
	WHERE run_id = c.run_id AND task = p.parent AND parent_id IS NULL -- a shard's end is its parent's
	ORDER BY id DESC LIMIT 1
) i ON true
ORDER BY c.run_id, c.child`

// collectChainFirings reads the rows of chainParentsSQL into the
// firings whose parents all ended, one per run and child.
func collectChainFirings(rows pgx.Rows) ([]ChainFiring, error) {
	var (
		out     []ChainFiring
		ready   bool
		runID   string
		child   string
		parent  string
		id      *int64
		state   *string
		output  []byte
		current *ChainFiring
	)
	flush := func() {
		if current != nil && ready {
			out = append(out, *current)
		}
	}
	_, err := pgx.ForEachRow(rows, []any{&runID, &child, &parent, &id, &state, &output}, func() error {
		if current == nil || current.RunID != runID || current.Task != child {
			flush()
			current = &ChainFiring{Task: child, RunID: runID, Parents: make(map[string]schemas.ParentResult)}
			ready = true
		}
		if id == nil || !schemas.State(*state).Terminal() {
			ready = false
			return nil
		}
		r := schemas.ParentResult{InstanceID: *id, State: schemas.State(*state)}
		if len(output) > 0 {
			r.Output = slices.Clone(json.RawMessage(output))
		}
		current.Parents[parent] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	flush()
	return out, nil
}
