package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ax-scheduler/ax/schemas"
)

// ErrorClassSQL is the error class of an instance's error, as SQL over
// its column error: the first line, with numbers written N and quoted
// strings "…", at most 120 characters. Two failures of one cause with
// different ids, times or file names fall in one class.
const ErrorClassSQL = `left(regexp_replace(regexp_replace(split_part(error, E'\n', 1), '"[^"]*"', '"…"', 'g'), '[0-9]+', 'N', 'g'), 120)`

// notRerunSQL is the condition that the instance t was not rerun: no
// instance of its task has the event id of one of its reruns.
func notRerunSQL(t string) string {
	return `NOT EXISTS (SELECT 1 FROM instances r WHERE r.task = ` + t + `.task
		AND r.event_id LIKE '` + schemas.RerunEventIDPrefix + `' || ` + t + `.id || '-%')`
}

// instanceWhere returns q as SQL conditions on instances and their
// arguments, numbered from $1; notRerun adds that the instance was not
// rerun (by an instance rerun, a bulk rerun or a replay).
func instanceWhere(q schemas.InstanceQuery, notRerun bool) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if q.Task != "" {
		add("task = $?", q.Task)
	}
	if len(q.State) > 0 {
		states := make([]string, len(q.State))
		for i, s := range q.State {
			states[i] = string(s)
		}
		add("state = ANY($?)", states)
	}
	if !q.Since.IsZero() {
		add("fired_at >= $?", q.Since)
	}
	if !q.Until.IsZero() {
		add("fired_at < $?", q.Until)
	}
	if q.Error != "" {
		add("strpos(lower(error), lower($?)) > 0", q.Error)
	}
	if q.Worker != "" {
		add("worker_id = $?", q.Worker)
	}
	if q.ErrorClass != "" {
		add(ErrorClassSQL+" = $?", q.ErrorClass)
	}
	if notRerun {
		conds = append(conds, notRerunSQL("instances"))
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

// Match is one instance a query matched.
type Match struct {
	ID      int64
	Task    string
	State   schemas.State
	FiredAt time.Time
	Error   string
	Worker  string
	// Payload, PayloadVersion and Priority are the instance's firing, for
	// a rerun.
	Payload        json.RawMessage
	PayloadVersion int
	Priority       schemas.Priority
}

// MatchInstances returns how many instances q matches (those not rerun
// yet only, when notRerun) and the first limit of them, oldest first (by
// id), with their firings.
func (s *Store) MatchInstances(ctx context.Context, q schemas.InstanceQuery, notRerun bool, limit int) (int, []Match, error) {
	cond, args := instanceWhere(q, notRerun)
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM instances WHERE `+cond, args...).Scan(&total); err != nil {
		return 0, nil, fmt.Errorf("match instances: %w", err)
	}
	args = append(args, limit, schemas.DefaultSchemaVersion)
	rows, err := s.pool.Query(ctx, `
		SELECT i.id, i.task, i.state, i.fired_at, i.error, i.worker_id, i.payload, i.priority,
			COALESCE((v.definition->>'schema_version')::int, $`+strconv.Itoa(len(args))+`)
		FROM (SELECT * FROM instances WHERE `+cond+` ORDER BY id LIMIT $`+strconv.Itoa(len(args)-1)+`) i
		LEFT JOIN task_versions v ON v.name = i.task AND v.version = i.task_version
		ORDER BY i.id`, args...)
	if err != nil {
		return 0, nil, fmt.Errorf("match instances: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Match, error) {
		var m Match
		var payload []byte
		err := row.Scan(&m.ID, &m.Task, &m.State, &m.FiredAt, &m.Error, &m.Worker, &payload, &m.Priority, &m.PayloadVersion)
		if payload != nil {
			m.Payload = payload
		}
		m.FiredAt = m.FiredAt.UTC()
		return m, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("match instances: %w", err)
	}
	return total, list, nil
}

// DeadLetters groups the FAILED instances — those whose last attempt
// failed, with no retry left, and that were not rerun since — of task (every task's when empty) by task
// and error class, the largest groups first, at most limit groups.
func (s *Store) DeadLetters(ctx context.Context, task string, limit int) ([]schemas.DeadLetterGroup, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT task, class, count(*), min(at), max(at),
			(array_agg(error ORDER BY id DESC))[1], max(id)
		FROM (SELECT task, id, error, COALESCE(finished_at, updated_at) AS at, `+ErrorClassSQL+` AS class
			FROM instances WHERE state = 'FAILED' AND ($1 = '' OR task = $1) AND `+notRerunSQL("instances")+`) d
		GROUP BY task, class ORDER BY count(*) DESC, task, class LIMIT $2`, task, limit)
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (schemas.DeadLetterGroup, error) {
		var g schemas.DeadLetterGroup
		err := row.Scan(&g.Task, &g.ErrorClass, &g.Count, &g.FirstSeen, &g.LastSeen, &g.Example, &g.LatestID)
		g.FirstSeen, g.LastSeen = g.FirstSeen.UTC(), g.LastSeen.UTC()
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	return list, nil
}
