package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/jackc/pgx/v5"
)

const alertRuleColumns = `name, kind, level, params, enabled, updated_at`

func scanAlertRule(row pgx.CollectableRow) (schemas.AlertRule, error) {
	var r schemas.AlertRule
	var params []byte
	err := row.Scan(&r.Name, &r.Kind, &r.Level, &params, &r.Enabled, &r.UpdatedAt)
	r.Params = params
	return r, err
}

// ListAlertRules returns every alert rule, by name.
func (s *Store) ListAlertRules(ctx context.Context) ([]schemas.AlertRule, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+alertRuleColumns+` FROM alert_rules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list alert rules: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanAlertRule)
	if err != nil {
		return nil, fmt.Errorf("list alert rules: %w", err)
	}
	return out, nil
}

// PutAlertRule creates the rule r.Name or replaces its level, params and
// enabled flag, and returns it as stored. A rule's kind never changes: a
// rule of another kind under that name is an *[schemas.AlertConfigError], and so
// is a rule whose name, kind, level or params are wrong. The audit trail
// records that operator put it (an action alert_rule_put of
// schemas.AuditTaskAlerts, in the same statement).
func (s *Store) PutAlertRule(ctx context.Context, r schemas.AlertRule, operator string) (schemas.AlertRule, error) {
	if !alertRuleNameRE(r.Name) {
		return schemas.AlertRule{}, schemas.AlertConfigErrorf("name", "%q is not a rule name: use 1-64 lower-case letters, digits, '_' and '-'", r.Name)
	}
	if _, err := r.DecodeParams(); err != nil {
		return schemas.AlertRule{}, err
	}
	params := r.Params
	if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		params = json.RawMessage(`{}`)
	}
	rows, err := s.pool.Query(ctx, `
		WITH t AS (
			INSERT INTO alert_rules AS r (name, kind, level, params, enabled) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET level = EXCLUDED.level, params = EXCLUDED.params,
				enabled = EXCLUDED.enabled, updated_at = now()
			WHERE r.kind = EXCLUDED.kind
			RETURNING `+alertRuleColumns+`
		), a AS (`+actionInsert(6, `jsonb_build_object('rule', name, 'kind', kind, 'level', level, 'params', params, 'enabled', enabled)`)+`)
		SELECT `+alertRuleColumns+` FROM t`, r.Name, string(r.Kind), string(r.Level), []byte(params), r.Enabled,
		string(schemas.ActionAlertRulePut), schemas.AuditTaskAlerts, operator)
	if err != nil {
		return schemas.AlertRule{}, fmt.Errorf("put alert rule %s: %w", r.Name, err)
	}
	out, err := pgx.CollectRows(rows, scanAlertRule)
	if err != nil {
		return schemas.AlertRule{}, fmt.Errorf("put alert rule %s: %w", r.Name, err)
	}
	if len(out) == 0 {
		return schemas.AlertRule{}, schemas.AlertConfigErrorf("kind", "rule %s exists with another kind, which cannot change; put a rule of kind %s under a new name",
			r.Name, r.Kind)
	}
	return out[0], nil
}

// channelDetails are an alert channel action's details: never the URL,
// which may hold a secret (a WeCom key, a Slack webhook path).
const channelDetails = `jsonb_build_object('channel_id', id, 'kind', kind)`

// alertRuleNameRE reports whether name is a valid rule name.
func alertRuleNameRE(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ListAlertChannels returns every alert channel, by id.
func (s *Store) ListAlertChannels(ctx context.Context) ([]schemas.AlertChannel, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, kind, url, created_at FROM alert_channels ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list alert channels: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[schemas.AlertChannel])
	if err != nil {
		return nil, fmt.Errorf("list alert channels: %w", err)
	}
	return out, nil
}

// AddAlertChannel stores a channel and returns it; the audit trail records
// that operator added it (its id and kind: the URL may hold a secret). A
// kind that is not one of the channel kinds, or a URL that is not an
// absolute http(s) URL, is an *[schemas.AlertConfigError].
func (s *Store) AddAlertChannel(ctx context.Context, kind schemas.AlertChannelKind, rawURL string, operator string) (schemas.AlertChannel, error) {
	switch kind {
	case schemas.ChannelWebhook, schemas.ChannelWeCom, schemas.ChannelSlack:
	default:
		return schemas.AlertChannel{}, schemas.AlertConfigErrorf("kind", "%q is not a channel kind; use webhook, wecom or slack", kind)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return schemas.AlertChannel{}, schemas.AlertConfigErrorf("url", "%q is not an absolute http or https URL", rawURL)
	}
	rows, err := s.pool.Query(ctx, `
		WITH t AS (INSERT INTO alert_channels (kind, url) VALUES ($1, $2) RETURNING id, kind, url, created_at),
		a AS (`+actionInsert(3, channelDetails)+`)
		SELECT id, kind, url, created_at FROM t`,
		string(kind), rawURL, string(schemas.ActionAlertChannelAdd), schemas.AuditTaskAlerts, operator)
	if err != nil {
		return schemas.AlertChannel{}, fmt.Errorf("add alert channel: %w", err)
	}
	ch, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[schemas.AlertChannel])
	if err != nil {
		return schemas.AlertChannel{}, fmt.Errorf("add alert channel: %w", err)
	}
	return ch, nil
}

// DeleteAlertChannel deletes channel id and returns it, or returns an
// error wrapping [ErrNotFound]; the audit trail records that operator
// deleted it.
func (s *Store) DeleteAlertChannel(ctx context.Context, id int64, operator string) (schemas.AlertChannel, error) {
	rows, err := s.pool.Query(ctx, `
		WITH t AS (DELETE FROM alert_channels WHERE id = $1 RETURNING id, kind, url, created_at),
		a AS (`+actionInsert(2, channelDetails)+`)
		SELECT id, kind, url, created_at FROM t`,
		id, string(schemas.ActionAlertChannelDelete), schemas.AuditTaskAlerts, operator)
	if err != nil {
		return schemas.AlertChannel{}, fmt.Errorf("delete alert channel %d: %w", id, err)
	}
	ch, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[schemas.AlertChannel])
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return schemas.AlertChannel{}, fmt.Errorf("delete alert channel %d: %w", id, err)
	}
	return ch, nil
}

const alertColumns = `id, rule, level, key, task, instance_id, reason, state, count, notified_count,
	first_seen, last_seen, last_notified_at, resolved_at, acked_by, acked_at`

func scanAlert(row pgx.CollectableRow) (schemas.Alert, error) {
	var a schemas.Alert
	err := row.Scan(&a.ID, &a.Rule, &a.Level, &a.Key, &a.Task, &a.InstanceID, &a.Reason, &a.State, &a.Count,
		&a.NotifiedCount, &a.FirstSeen, &a.LastSeen, &a.LastNotifiedAt, &a.ResolvedAt, &a.AckedBy, &a.AckedAt)
	return a, err
}

func collectAlerts(rows pgx.Rows, err error) ([]schemas.Alert, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanAlert)
}

// Limits of [AlertFilter.Limit].
const (
	DefaultAlertLimit = 100
	MaxAlertLimit     = 1000
)

// AlertFilter selects alerts for [Store.ListAlerts]; zero fields select everything.
type AlertFilter struct {
	State schemas.AlertState
	// Limit is the most alerts returned: 0 means [DefaultAlertLimit], more
	// than [MaxAlertLimit] is cut down to it.
	Limit int
	// BeforeID keeps the alerts whose id is lower, for paging.
	BeforeID int64
}

// ListAlerts returns alerts, newest first.
func (s *Store) ListAlerts(ctx context.Context, f AlertFilter) ([]schemas.Alert, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultAlertLimit
	}
	limit = min(limit, MaxAlertLimit)
	out, err := collectAlerts(s.pool.Query(ctx, `SELECT `+alertColumns+` FROM alerts
		WHERE ($1 = '' OR state = $1) AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`,
		string(f.State), f.BeforeID, limit))
	if err != nil {
		return nil, fmt.Errorf("list alerts: %w", err)
	}
	return out, nil
}

// OpenAlerts returns the alerts that are firing or acked, by id.
func (s *Store) OpenAlerts(ctx context.Context) ([]schemas.Alert, error) {
	out, err := collectAlerts(s.pool.Query(ctx, `SELECT `+alertColumns+` FROM alerts WHERE state <> 'resolved' ORDER BY id`))
	if err != nil {
		return nil, fmt.Errorf("list open alerts: %w", err)
	}
	return out, nil
}

// ErrAlertResolved is returned, wrapped, by [Store.AckAlert] for an alert
// that has already resolved.
var ErrAlertResolved = errors.New("the alert has resolved")

// AckAlert acknowledges a firing alert as operator: it stays open, without
// further notifications, until it resolves. Acknowledging an acked alert
// returns it unchanged; an unknown one is an error wrapping [ErrNotFound],
// a resolved one an error wrapping [ErrAlertResolved].
func (s *Store) AckAlert(ctx context.Context, id int64, operator string, at time.Time) (schemas.Alert, error) {
	rows, err := s.pool.Query(ctx, `
		WITH upd AS (
			UPDATE alerts SET state = 'acked', acked_by = $2, acked_at = $3 WHERE id = $1 AND state = 'firing'
			RETURNING `+alertColumns+`
		)
		SELECT `+alertColumns+` FROM upd
		UNION ALL
		SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM upd)`, id, operator, at)
	if err != nil {
		return schemas.Alert{}, fmt.Errorf("ack alert %d: %w", id, err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAlert)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return schemas.Alert{}, fmt.Errorf("ack alert %d: %w", id, ErrNotFound)
	case err != nil:
		return schemas.Alert{}, fmt.Errorf("ack alert %d: %w", id, err)
	case a.State == schemas.AlertResolved:
		return a, fmt.Errorf("ack alert %d: %w", id, ErrAlertResolved)
	}
	return a, nil
}

// AlertSignal is one observation of a rule's condition for a key.
type AlertSignal struct {
	Rule  string
	Level schemas.AlertLevel
	Key   string
	Task  string
	// InstanceID, when not 0, becomes the alert's instance.
	InstanceID int64
	Reason     string
	At         time.Time
	// Count, when positive, is how many times the rule has seen the
	// condition in the episode by its own reckoning (a streak of failures):
	// the alert's count becomes the greater of its count and Count. Zero
	// counts one more occurrence.
	Count int
}

// RaiseAlert records sig: it opens a firing alert for the rule and key, or
// counts sig's occurrence in the open one (taking sig's reason, and its
// instance when it names one). It is safe to call concurrently: the rule and
// key have at most one open alert.
func (s *Store) RaiseAlert(ctx context.Context, sig AlertSignal) (schemas.Alert, error) {
	rows, err := s.pool.Query(ctx, `
		INSERT INTO alerts AS a (rule, level, key, task, instance_id, reason, state, count, first_seen, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, 'firing', GREATEST($8, 1), $7, $7)
		ON CONFLICT (rule, key) WHERE state <> 'resolved' DO UPDATE SET
			count = CASE WHEN $8 > 0 THEN GREATEST(a.count, $8) ELSE a.count + 1 END, last_seen = GREATEST(a.last_seen, EXCLUDED.last_seen), reason = EXCLUDED.reason,
			level = EXCLUDED.level, task = EXCLUDED.task,
			instance_id = CASE WHEN EXCLUDED.instance_id <> 0 THEN EXCLUDED.instance_id ELSE a.instance_id END
		RETURNING `+alertColumns, sig.Rule, string(sig.Level), sig.Key, sig.Task, sig.InstanceID, sig.Reason, sig.At,
		sig.Count)
	if err != nil {
		return schemas.Alert{}, fmt.Errorf("raise alert %s/%s: %w", sig.Rule, sig.Key, err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAlert)
	if err != nil {
		return schemas.Alert{}, fmt.Errorf("raise alert %s/%s: %w", sig.Rule, sig.Key, err)
	}
	return a, nil
}

// ClaimNotification marks firing alert id notified at now when its last
// notification is at least throttle old (or it has none), and returns it
// with how many occurrences the notification reports: those since the
// previous one. ok is false, and nothing changes, when the alert is not
// firing or was notified within throttle. Claiming before sending makes
// the throttle hold for any number of auditors.
func (s *Store) ClaimNotification(ctx context.Context, id int64, throttle time.Duration, now time.Time) (a schemas.Alert, repeats int, ok bool, err error) {
	rows, err := s.pool.Query(ctx, `
		WITH old AS (
			SELECT id, notified_count FROM alerts
			WHERE id = $1 AND state = 'firing' AND (last_notified_at IS NULL OR last_notified_at <= $3::timestamptz - $2 * interval '1 microsecond')
			FOR UPDATE
		), upd AS (
			UPDATE alerts a SET last_notified_at = $3, notified_count = a.count FROM old WHERE a.id = old.id
			RETURNING `+prefixed("a", alertColumns)+`, old.notified_count AS before
		)
		SELECT * FROM upd`, id, throttle.Microseconds(), now)
	if err != nil {
		return schemas.Alert{}, 0, false, fmt.Errorf("claim notification of alert %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return schemas.Alert{}, 0, false, rows.Err()
	}
	var before int
	err = rows.Scan(&a.ID, &a.Rule, &a.Level, &a.Key, &a.Task, &a.InstanceID, &a.Reason, &a.State, &a.Count,
		&a.NotifiedCount, &a.FirstSeen, &a.LastSeen, &a.LastNotifiedAt, &a.ResolvedAt, &a.AckedBy, &a.AckedAt, &before)
	if err != nil {
		return schemas.Alert{}, 0, false, fmt.Errorf("claim notification of alert %d: %w", id, err)
	}
	return a, a.Count - before, true, nil
}

// prefixed qualifies each of a comma-separated column list with table t.
func prefixed(t, columns string) string {
	parts := strings.Split(columns, ",")
	for i, p := range parts {
		parts[i] = t + "." + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

// ResolveAlerts resolves the open alerts of rule whose key is in keys, at
// at, and returns them as resolved. Each alert resolves once: a second call
// returns nothing.
func (s *Store) ResolveAlerts(ctx context.Context, rule string, keys []string, at time.Time) ([]schemas.Alert, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	out, err := collectAlerts(s.pool.Query(ctx, `
		UPDATE alerts SET state = 'resolved', resolved_at = $3
		WHERE rule = $1 AND key = ANY($2) AND state <> 'resolved'
		RETURNING `+alertColumns, rule, keys, at))
	if err != nil {
		return nil, fmt.Errorf("resolve alerts of %s: %w", rule, err)
	}
	return out, nil
}

// ResolveAlertsExcept resolves the open alerts of rule whose key is not in
// keep, at at, and returns them as resolved: a rule over a state holds for
// keep and no longer for the others.
func (s *Store) ResolveAlertsExcept(ctx context.Context, rule string, keep []string, at time.Time) ([]schemas.Alert, error) {
	out, err := collectAlerts(s.pool.Query(ctx, `
		UPDATE alerts SET state = 'resolved', resolved_at = $3
		WHERE rule = $1 AND NOT (key = ANY($2)) AND state <> 'resolved'
		RETURNING `+alertColumns, rule, append([]string{}, keep...), at))
	if err != nil {
		return nil, fmt.Errorf("resolve alerts of %s: %w", rule, err)
	}
	return out, nil
}

// monitorLockKey is the pg_advisory_lock key of the auditor that leads
// monitoring: metrics from the audit feed, alert evaluation ("ax_monit").
const monitorLockKey int64 = 0x61785f6d6f6e6974

// ErrMonitorHeld is returned, wrapped, by [Store.AcquireMonitor] when
// another session leads monitoring.
var ErrMonitorHeld = errors.New("monitoring is led by another session")

// MonitorLock is the session of the auditor that leads monitoring: a
// connection of its own holding a session advisory lock, released when the
// connection closes or dies. It is not safe for concurrent use.
type MonitorLock struct {
	sessionLock
}

// AcquireMonitor opens a connection with the settings of the store's pool
// and takes the monitoring lock on it without waiting; it returns an error
// wrapping [ErrMonitorHeld] when another session holds it. Close the lock
// to release it.
func (s *Store) AcquireMonitor(ctx context.Context) (*MonitorLock, error) {
	l, err := s.acquireSessionLock(ctx, monitorLockKey, "monitor lock", ErrMonitorHeld)
	if err != nil {
		return nil, err
	}
	return &MonitorLock{l}, nil
}
