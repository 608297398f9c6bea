package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// Action is an operator action for the audit trail: what an operator did to
// a task, or to one of its instances.
type Action struct {
	Action schemas.OperatorAction
	Task   string
	// InstanceID is the instance acted on; 0 for an action on the task.
	InstanceID int64
	// Operator names who acted, as the X-Ax-Operator header did.
	Operator string
	Reason   string
	// Details is any JSON value that says what else the action changed
	// (e.g. {"version": 3}); empty means none.
	Details json.RawMessage
}

// RecordAction records a, an action that changes no table of its own (a
// firing, say), in operator_actions, from where the auditor relays it to
// AX_AUDIT. It returns the action's id. An action that does change a table
// is recorded by the store function that makes the change, in the same
// transaction ([Store.ApplyTask], [Store.SetTaskEnabled]).
func (s *Store) RecordAction(ctx context.Context, a Action) (int64, error) {
	id, err := recordAction(ctx, s.pool, a)
	if err != nil {
		return 0, fmt.Errorf("record action %s of task %s: %w", a.Action, a.Task, err)
	}
	return id, nil
}

// recordAction inserts a through q, a pool or a transaction.
func recordAction(ctx context.Context, q querier, a Action) (int64, error) {
	if a.Action == "" || a.Task == "" {
		return 0, errors.New("an action needs its action and task")
	}
	var details []byte
	if len(a.Details) > 0 {
		if !json.Valid(a.Details) {
			return 0, errors.New("details are not JSON")
		}
		details = a.Details
	}
	rows, err := q.Query(ctx, `
		INSERT INTO operator_actions (action, task, instance_id, operator, reason, details)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		string(a.Action), a.Task, a.InstanceID, a.Operator, a.Reason, details)
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
}

// actionInsert is the INSERT, for a WITH clause, that records an action
// on each row of t, a data-modifying WITH query of the same statement:
// its action, task and operator are the statement's parameters $n, $n+1
// and $n+2, its details the SQL expression details of t's row. The
// change and its audit record are then one statement.
func actionInsert(n int, details string) string {
	return fmt.Sprintf(`INSERT INTO operator_actions (action, task, operator, details)
		SELECT $%d, $%d, $%d, %s FROM t`, n, n+1, n+2, details)
}

// versionDetails are the details of an action that made version v of a task.
func versionDetails(v int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"version":%d}`, v)) }

// The columns every audit query returns, as auditScanner reads them: one
// list for both tables, so that they can be merged with UNION ALL.
const (
	transitionRecordColumns = `'transition' AS kind, id, task, instance_id, COALESCE(from_state, '') AS from_state,
		to_state, attempt, '' AS action, operator, reason, NULL::jsonb AS details, at`
	actionRecordColumns = `'action' AS kind, id, task, instance_id, '' AS from_state, '' AS to_state, 0 AS attempt,
		action, operator, reason, details, at`
)

// transitionsOf returns a FROM item, tr: the transitions of the rows of
// instance_transitions that rows (a query of that table) returns, one row
// each, with the table's columns, in the order of rows and then of the
// transitions in a row. A row holds one transition, or two when then_state
// is set, the second with the row's id + 1 (see migration 00017).
func transitionsOf(rows string) string {
	return `(SELECT v.id, t.instance_id, t.task, v.from_state, v.to_state, t.attempt, v.operator, v.reason, t.at, t.xid
		FROM (` + rows + `) t CROSS JOIN LATERAL (VALUES (t.id, t.from_state, t.to_state, t.operator, t.reason),
			(t.id + 1, t.to_state, t.then_state, t.then_operator, COALESCE(t.then_reason, '')))
			AS v(id, from_state, to_state, operator, reason)
		WHERE v.to_state IS NOT NULL) tr`
}

// holdsTransition is the condition that a row of instance_transitions holds
// the transition with id $n.
func holdsTransition(n int) string {
	return fmt.Sprintf(`(id = $%d OR (id = $%d - 1 AND then_state IS NOT NULL))`, n, n)
}

// auditScanner reads the rows of one audit query into records, with
// destinations built once and the low-variety text (kinds, tasks, states,
// actions, operators, reasons) through one set of strings: a page's records
// share them instead of a string each.
type auditScanner struct {
	r     schemas.AuditRecord
	kind  string
	id    int64
	words words
	dest  []any
}

// newAuditScanner returns a scanner for one query's rows.
func newAuditScanner() *auditScanner {
	s := &auditScanner{words: words{}}
	w := s.words
	s.dest = []any{&word[string]{&s.kind, w}, &s.id, &word[string]{&s.r.Task, w}, &s.r.InstanceID,
		&word[schemas.State]{&s.r.From, w}, &word[schemas.State]{&s.r.To, w}, &s.r.Attempt,
		&word[schemas.OperatorAction]{&s.r.Action, w}, &word[string]{&s.r.Operator, w}, &word[string]{&s.r.Reason, w},
		&s.r.Details, &s.r.At}
	return s
}

// scan reads one row (the columns of transitionRecordColumns and
// actionRecordColumns) into a record.
func (s *auditScanner) scan(row pgx.CollectableRow) (schemas.AuditRecord, error) {
	s.r = schemas.AuditRecord{}
	if err := row.Scan(s.dest...); err != nil {
		return schemas.AuditRecord{}, err
	}
	r := s.r
	r.Kind = schemas.AuditKind(s.kind)
	if r.Kind == schemas.AuditTransition {
		r.ID = schemas.TransitionAuditID(s.id)
	} else {
		r.ID = schemas.ActionAuditID(s.id)
	}
	return r, nil
}

// Limits of [AuditFilter.Limit].
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// AuditFilter selects audit records for [Store.ListAudit]. Zero fields
// select everything.
type AuditFilter struct {
	// Task keeps the records of one task.
	Task string
	// InstanceID keeps the records of one instance: its transitions and the
	// actions on it.
	InstanceID int64
	// Operator keeps the records of one operator ("alice", "dispatcher", "worker:w-1", …).
	Operator string
	// Since keeps the records written at or after it.
	Since time.Time
	// Limit is the most records returned: 0 means [DefaultAuditLimit], and
	// more than [MaxAuditLimit] is cut down to it.
	Limit int
	// Before keeps the records that come after the record with this id in
	// the listing's order: pass the last id of a page to read the next one.
	// An id that names no record is an error wrapping [ErrNotFound].
	Before string
}

// auditPos is a record's place in the listing's order: newest first, then
// transitions before actions, then the higher id first.
type auditPos struct {
	at   time.Time
	kind schemas.AuditKind
	id   int64
}

// ListAudit returns the audit records f selects from both outbox tables,
// merged newest first (by the time they were written; on a tie transitions
// first, then by id, higher first). It reads PostgreSQL, which holds
// every record at once, AX_AUDIT only once the auditor relayed it.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]schemas.AuditRecord, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultAuditLimit
	case limit > MaxAuditLimit:
		limit = MaxAuditLimit
	}
	q := auditQuery{f: f}
	if f.Before != "" {
		p, err := s.auditBefore(ctx, f.Before)
		if err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		q.before = p
	}
	sql := q.sql(limit) // before q.args is read: it adds them
	rows, err := s.pool.Query(ctx, sql, q.args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, newAuditScanner().scan)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}

// auditBefore finds the position of the audit record before names, the
// one a page of ListAudit starts after.
func (s *Store) auditBefore(ctx context.Context, before string) (*auditPos, error) {
	kind, id, ok := schemas.ParseAuditID(before)
	if !ok {
		return nil, fmt.Errorf("%q is not an audit record id (t-<id> or o-<id>)", before)
	}
	table := "instance_transitions"
	if kind == schemas.AuditAction {
		table = "operator_actions"
	}
	cond := "id = $1"
	if kind == schemas.AuditTransition {
		cond = holdsTransition(1)
	}
	p := auditPos{kind: kind, id: id}
	err := s.pool.QueryRow(ctx, `SELECT at FROM `+table+` WHERE `+cond+` LIMIT 1`, id).Scan(&p.at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("audit record %s: %w", before, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("find record %s: %w", before, err)
	}
	return &p, nil
}

// auditQuery is ListAudit's statement under construction: the filter,
// the record to start after, and the arguments its placeholders take.
type auditQuery struct {
	f      AuditFilter
	before *auditPos
	args   []any
}

// arg adds the argument v and returns its placeholder.
func (q *auditQuery) arg(v any) string {
	q.args = append(q.args, v)
	return fmt.Sprintf("$%d", len(q.args))
}

// where is the conditions of a table of kind. Each table's conditions
// hold only the filters in use, so that each shape of query gets a plan
// that uses the indexes. pairs is set for the rows of
// instance_transitions, which the transitions are expanded from: a row is
// taken when either of its transitions is by the operator.
func (q *auditQuery) where(kind schemas.AuditKind, pairs bool) string {
	var conds []string
	if q.f.Task != "" {
		conds = append(conds, "task = "+q.arg(q.f.Task))
	}
	if q.f.InstanceID != 0 {
		conds = append(conds, "instance_id = "+q.arg(q.f.InstanceID))
	}
	if q.f.Operator != "" {
		if pairs {
			a := q.arg(q.f.Operator)
			conds = append(conds, "(operator = "+a+" OR then_operator = "+a+")")
		} else {
			conds = append(conds, "operator = "+q.arg(q.f.Operator))
		}
	}
	if !q.f.Since.IsZero() {
		conds = append(conds, "at >= "+q.arg(q.f.Since))
	}
	if q.before != nil {
		switch {
		case kind == q.before.kind:
			conds = append(conds, fmt.Sprintf("(at, id) < (%s, %s)", q.arg(q.before.at), q.arg(q.before.id)))
		case kind < q.before.kind: // action after transition on a tie
			conds = append(conds, "at <= "+q.arg(q.before.at))
		default:
			conds = append(conds, "at < "+q.arg(q.before.at))
		}
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// sql is ListAudit's statement of at most limit records.
func (q *auditQuery) sql(limit int) string {
	limitArg := q.arg(limit)
	// The rows of instance_transitions to expand: one more than the limit,
	// since the row before the Before record may hold only that record
	// (after it in the listing's order) and one that the filters leave out.
	rowsArg := q.arg(limit + 1)
	return `
SELECT * FROM (
	(SELECT ` + transitionRecordColumns + ` FROM ` + transitionsOf(`SELECT * FROM instance_transitions`+
		q.where(schemas.AuditTransition, true)+` ORDER BY at DESC, id DESC LIMIT `+rowsArg) +
		q.where(schemas.AuditTransition, false) + `
	ORDER BY at DESC, id DESC LIMIT ` + limitArg + `)
	UNION ALL
	(SELECT ` + actionRecordColumns + ` FROM operator_actions` + q.where(schemas.AuditAction, false) + `
	ORDER BY at DESC, id DESC LIMIT ` + limitArg + `)
) r
ORDER BY at DESC, kind DESC, id DESC LIMIT ` + limitArg
}
