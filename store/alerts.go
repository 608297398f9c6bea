package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// AlertLevel is how urgent an alert is.
type AlertLevel string

// The alert levels.
const (
	// AlertP0 pages someone now: many tasks fail at once, or a pool that
	// has tasks has no live executor.
	AlertP0 AlertLevel = "P0"
	// AlertP1 wants attention today: a task failed several times in a row,
	// or its attempts time out more often than they should.
	AlertP1 AlertLevel = "P1"
	// AlertP2 is a trend to look at: a backlog, runs that take far longer
	// than they used to.
	AlertP2 AlertLevel = "P2"
)

// Valid reports whether l is one of the alert levels.
func (l AlertLevel) Valid() bool { return l == AlertP0 || l == AlertP1 || l == AlertP2 }

// AlertKind names the check an alert rule makes. Each kind takes its own
// keys in the rule's params (see [AlertParams]).
type AlertKind string

// The alert rule kinds.
const (
	// AlertNoLiveExecutor holds for a pool that enabled tasks dispatch to
	// while no executor of it is live in ax-workers. Key: the pool.
	AlertNoLiveExecutor AlertKind = "no_live_executor"
	// AlertFailingTasks holds while at least params.tasks tasks had an
	// instance FAILED within params.window. Key: "" (the whole fleet).
	AlertFailingTasks AlertKind = "failing_tasks"
	// AlertConsecutiveFailures holds for a task whose latest
	// params.failures ended instances all FAILED, and resolves with its
	// next SUCCEEDED instance. Key: the task.
	AlertConsecutiveFailures AlertKind = "consecutive_failures"
	// AlertTimeoutRate holds for a task of which more than params.rate of
	// the attempts that ended within params.window timed out (at least
	// params.min_attempts attempts). Key: the task.
	AlertTimeoutRate AlertKind = "timeout_rate"
	// AlertBacklog holds for a task with at least params.instances
	// instances DISPATCHED, WAITING or RETRYING for longer than params.age.
	// Key: the task.
	AlertBacklog AlertKind = "backlog"
	// AlertDurationJitter holds for a task whose latest SUCCEEDED run took
	// more than params.factor times the p95 of the params.runs runs before
	// it (see [DurationOutlier]). Key: the task.
	AlertDurationJitter AlertKind = "duration_jitter"
)

// AlertKinds lists every alert rule kind.
var AlertKinds = []AlertKind{AlertNoLiveExecutor, AlertFailingTasks, AlertConsecutiveFailures,
	AlertTimeoutRate, AlertBacklog, AlertDurationJitter}

// DefaultAlertThrottle is the least time between two notifications of one
// alert when its rule sets no throttle.
const DefaultAlertThrottle = 10 * time.Minute

// AlertRule is a rule the auditor checks, in alert_rules.
type AlertRule struct {
	// Name identifies the rule (the defaults are named after their kind).
	Name string `json:"name"`
	// Kind is the check the rule makes; it never changes.
	Kind  AlertKind  `json:"kind"`
	Level AlertLevel `json:"level"`
	// Params holds the kind's parameters as a JSON object (see
	// [AlertParams]); keys left out take their defaults.
	Params    json.RawMessage `json:"params"`
	Enabled   bool            `json:"enabled"`
	UpdatedAt time.Time       `json:"updated_at,omitzero"`
}

// AlertParams are the parameters of an alert rule, defaults filled in. In
// the rule's JSON params durations are Go duration strings ("10m"). Which
// keys a kind takes is said at each field; throttle belongs to every kind.
type AlertParams struct {
	// Failures is how many ended instances in a row must have FAILED
	// (consecutive_failures; default 3).
	Failures int
	// Tasks is how many tasks must have failed within Window
	// (failing_tasks; default 5).
	Tasks int
	// Window is how far back failing_tasks (default 10m) and timeout_rate
	// (default 15m) look.
	Window time.Duration
	// Rate is the share of timed-out attempts above which timeout_rate
	// holds, in (0, 1] (default 0.2).
	Rate float64
	// MinAttempts is how many attempts must have ended within Window for
	// timeout_rate to judge a task (default 5).
	MinAttempts int
	// Instances is how many instances must wait longer than Age (backlog;
	// default 10).
	Instances int
	// Age is how long an instance must have been DISPATCHED, WAITING or
	// RETRYING to count as backlog (default 5m).
	Age time.Duration
	// Runs is how many earlier SUCCEEDED runs duration_jitter compares the
	// latest with (default 20); MinRuns how many it needs at least (default 5).
	Runs    int
	MinRuns int
	// Factor is how many times the p95 of those runs the latest must take
	// to hold (duration_jitter; default 2).
	Factor float64
	// Throttle is the least time between two notifications of one alert
	// (every kind; default [DefaultAlertThrottle]). Repeats within it are
	// counted and reported together with the next notification.
	Throttle time.Duration
}

// alertParamKeys lists the params keys each kind takes, besides throttle.
var alertParamKeys = map[AlertKind][]string{
	AlertNoLiveExecutor:      {},
	AlertFailingTasks:        {"tasks", "window"},
	AlertConsecutiveFailures: {"failures"},
	AlertTimeoutRate:         {"rate", "window", "min_attempts"},
	AlertBacklog:             {"instances", "age"},
	AlertDurationJitter:      {"runs", "min_runs", "factor"},
}

// AlertConfigError says what is wrong with an alert rule or an alert
// channel that an operator sent.
type AlertConfigError struct {
	// Field names the offending field ("level", "params.window", "url").
	Field string
	// Reason says what is wrong and how to fix it.
	Reason string
}

func (e *AlertConfigError) Error() string { return e.Field + ": " + e.Reason }

func configError(field, format string, args ...any) error {
	return &AlertConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DecodeParams checks the rule's kind, level and params and returns the
// params with their defaults filled in. A mistake is an *[AlertConfigError].
func (r AlertRule) DecodeParams() (AlertParams, error) {
	keys, ok := alertParamKeys[r.Kind]
	if !ok {
		names := make([]string, len(AlertKinds))
		for i, k := range AlertKinds {
			names[i] = string(k)
		}
		return AlertParams{}, configError("kind", "%q is not an alert rule kind; use one of %s", r.Kind, strings.Join(names, ", "))
	}
	if !r.Level.Valid() {
		return AlertParams{}, configError("level", "%q is not an alert level; use P0, P1 or P2", r.Level)
	}
	p := AlertParams{Failures: 3, Tasks: 5, Window: 10 * time.Minute, Rate: 0.2, MinAttempts: 5, Instances: 10,
		Age: 5 * time.Minute, Runs: 20, MinRuns: 5, Factor: 2, Throttle: DefaultAlertThrottle}
	if r.Kind == AlertTimeoutRate {
		p.Window = 15 * time.Minute
	}
	raw := bytes.TrimSpace(r.Params)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return p, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return AlertParams{}, configError("params", "must be a JSON object, such as {\"throttle\": \"10m\"}: %v", err)
	}
	for k, v := range m {
		if k != "throttle" && !slices.Contains(keys, k) {
			return AlertParams{}, configError("params."+k, "is not a parameter of a %s rule; it takes %s", r.Kind,
				strings.Join(append(slices.Clone(keys), "throttle"), ", "))
		}
		var err error
		switch k {
		case "failures":
			p.Failures, err = intParam(k, v, 1, 1000)
		case "tasks":
			p.Tasks, err = intParam(k, v, 1, 100000)
		case "min_attempts":
			p.MinAttempts, err = intParam(k, v, 1, 1000000)
		case "instances":
			p.Instances, err = intParam(k, v, 1, 100000000)
		case "runs":
			p.Runs, err = intParam(k, v, 2, 1000)
		case "min_runs":
			p.MinRuns, err = intParam(k, v, 2, 1000)
		case "window":
			p.Window, err = durationParam(k, v, time.Minute, 7*24*time.Hour)
		case "age":
			p.Age, err = durationParam(k, v, time.Second, 7*24*time.Hour)
		case "throttle":
			p.Throttle, err = durationParam(k, v, 0, 7*24*time.Hour)
		case "rate":
			if err = json.Unmarshal(v, &p.Rate); err != nil || p.Rate <= 0 || p.Rate > 1 {
				err = configError("params.rate", "must be a number above 0 and at most 1 (0.2 means 20%% of the attempts)")
			}
		case "factor":
			if err = json.Unmarshal(v, &p.Factor); err != nil || p.Factor <= 1 || p.Factor > 1000 {
				err = configError("params.factor", "must be a number above 1 and at most 1000 (2 means twice the p95)")
			}
		}
		if err != nil {
			return AlertParams{}, err
		}
	}
	if p.MinRuns > p.Runs {
		return AlertParams{}, configError("params.min_runs", "is %d, more than runs (%d); it must be at most runs", p.MinRuns, p.Runs)
	}
	return p, nil
}

func intParam(key string, v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if err := json.Unmarshal(v, &n); err != nil || n < lo || n > hi {
		return 0, configError("params."+key, "must be a whole number from %d to %d", lo, hi)
	}
	return n, nil
}

func durationParam(key string, v json.RawMessage, lo, hi time.Duration) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		if d, err := time.ParseDuration(s); err == nil && d >= lo && d <= hi {
			return d, nil
		}
	}
	return 0, configError("params."+key, "must be a duration string from %v to %v, such as \"10m\" or \"1h\"", lo, hi)
}

const alertRuleColumns = `name, kind, level, params, enabled, updated_at`

func scanAlertRule(row pgx.CollectableRow) (AlertRule, error) {
	var r AlertRule
	var params []byte
	err := row.Scan(&r.Name, &r.Kind, &r.Level, &params, &r.Enabled, &r.UpdatedAt)
	r.Params = params
	return r, err
}

// ListAlertRules returns every alert rule, by name.
func (s *Store) ListAlertRules(ctx context.Context) ([]AlertRule, error) {
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
// rule of another kind under that name is an *[AlertConfigError], and so
// is a rule whose name, kind, level or params are wrong.
func (s *Store) PutAlertRule(ctx context.Context, r AlertRule) (AlertRule, error) {
	if !alertRuleNameRE(r.Name) {
		return AlertRule{}, configError("name", "%q is not a rule name: use 1-64 lower-case letters, digits, '_' and '-'", r.Name)
	}
	if _, err := r.DecodeParams(); err != nil {
		return AlertRule{}, err
	}
	params := r.Params
	if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
		params = json.RawMessage(`{}`)
	}
	rows, err := s.pool.Query(ctx, `
		INSERT INTO alert_rules AS r (name, kind, level, params, enabled) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET level = EXCLUDED.level, params = EXCLUDED.params,
			enabled = EXCLUDED.enabled, updated_at = now()
		WHERE r.kind = EXCLUDED.kind
		RETURNING `+alertRuleColumns, r.Name, string(r.Kind), string(r.Level), []byte(params), r.Enabled)
	if err != nil {
		return AlertRule{}, fmt.Errorf("put alert rule %s: %w", r.Name, err)
	}
	out, err := pgx.CollectRows(rows, scanAlertRule)
	if err != nil {
		return AlertRule{}, fmt.Errorf("put alert rule %s: %w", r.Name, err)
	}
	if len(out) == 0 {
		return AlertRule{}, configError("kind", "rule %s exists with another kind, which cannot change; put a rule of kind %s under a new name",
			r.Name, r.Kind)
	}
	return out[0], nil
}

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

// AlertChannelKind is the payload shape a channel receives.
type AlertChannelKind string

// The alert channel kinds.
const (
	// ChannelWebhook receives the notification as JSON (auditor/monitor.Notification).
	ChannelWebhook AlertChannelKind = "webhook"
	// ChannelWeCom is a WeCom (企业微信) group robot webhook.
	ChannelWeCom AlertChannelKind = "wecom"
	// ChannelSlack is a Slack incoming webhook, or a service that takes its
	// payload ({"text": …}: Mattermost, Rocket.Chat, Discord's /slack).
	ChannelSlack AlertChannelKind = "slack"
)

// AlertChannel is where notifications go, in alert_channels.
type AlertChannel struct {
	ID        int64            `json:"id"`
	Kind      AlertChannelKind `json:"kind"`
	URL       string           `json:"url"`
	CreatedAt time.Time        `json:"created_at"`
}

// ListAlertChannels returns every alert channel, by id.
func (s *Store) ListAlertChannels(ctx context.Context) ([]AlertChannel, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, kind, url, created_at FROM alert_channels ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list alert channels: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AlertChannel])
	if err != nil {
		return nil, fmt.Errorf("list alert channels: %w", err)
	}
	return out, nil
}

// AddAlertChannel stores a channel and returns it. A kind that is not one
// of the channel kinds, or a URL that is not an absolute http(s) URL, is an
// *[AlertConfigError].
func (s *Store) AddAlertChannel(ctx context.Context, kind AlertChannelKind, rawURL string) (AlertChannel, error) {
	switch kind {
	case ChannelWebhook, ChannelWeCom, ChannelSlack:
	default:
		return AlertChannel{}, configError("kind", "%q is not a channel kind; use webhook, wecom or slack", kind)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return AlertChannel{}, configError("url", "%q is not an absolute http or https URL", rawURL)
	}
	rows, err := s.pool.Query(ctx, `INSERT INTO alert_channels (kind, url) VALUES ($1, $2) RETURNING id, kind, url, created_at`,
		string(kind), rawURL)
	if err != nil {
		return AlertChannel{}, fmt.Errorf("add alert channel: %w", err)
	}
	ch, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[AlertChannel])
	if err != nil {
		return AlertChannel{}, fmt.Errorf("add alert channel: %w", err)
	}
	return ch, nil
}

// DeleteAlertChannel deletes channel id and returns it, or returns an
// error wrapping [ErrNotFound].
func (s *Store) DeleteAlertChannel(ctx context.Context, id int64) (AlertChannel, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM alert_channels WHERE id = $1 RETURNING id, kind, url, created_at`, id)
	if err != nil {
		return AlertChannel{}, fmt.Errorf("delete alert channel %d: %w", id, err)
	}
	ch, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[AlertChannel])
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return AlertChannel{}, fmt.Errorf("delete alert channel %d: %w", id, err)
	}
	return ch, nil
}

// AlertState is where an alert is in its episode.
type AlertState string

// The alert states.
const (
	// AlertFiring: the condition holds; notifications go out, throttled.
	AlertFiring AlertState = "firing"
	// AlertAcked: the condition holds and an operator has taken it on; no
	// more notifications until it resolves.
	AlertAcked AlertState = "acked"
	// AlertResolved: the condition no longer holds. The next occurrence
	// opens a new alert.
	AlertResolved AlertState = "resolved"
)

// Valid reports whether s is one of the alert states.
func (s AlertState) Valid() bool { return s == AlertFiring || s == AlertAcked || s == AlertResolved }

// Alert is one episode of a rule's condition for one key, in alerts.
type Alert struct {
	ID    int64      `json:"id"`
	Rule  string     `json:"rule"`
	Level AlertLevel `json:"level"`
	// Key is what the alert is about: a task, a pool, or "" for a
	// fleet-wide rule.
	Key  string `json:"key"`
	Task string `json:"task,omitempty"`
	// InstanceID is the latest instance that showed the condition (the
	// failed or timed-out one, the oldest waiting one); 0 when none does.
	InstanceID int64      `json:"instance_id,omitempty"`
	Reason     string     `json:"reason"`
	State      AlertState `json:"state"`
	// Count is how often the condition was seen in this episode: each
	// failure for a rule fed by transitions, each evaluation for a rule
	// over a state. NotifiedCount is what Count was at the last notification.
	Count          int        `json:"count"`
	NotifiedCount  int        `json:"notified_count"`
	FirstSeen      time.Time  `json:"first_seen"`
	LastSeen       time.Time  `json:"last_seen"`
	LastNotifiedAt *time.Time `json:"last_notified_at,omitempty"`
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`
	AckedBy        string     `json:"acked_by,omitempty"`
	AckedAt        *time.Time `json:"acked_at,omitempty"`
}

const alertColumns = `id, rule, level, key, task, instance_id, reason, state, count, notified_count,
	first_seen, last_seen, last_notified_at, resolved_at, acked_by, acked_at`

func scanAlert(row pgx.CollectableRow) (Alert, error) {
	var a Alert
	err := row.Scan(&a.ID, &a.Rule, &a.Level, &a.Key, &a.Task, &a.InstanceID, &a.Reason, &a.State, &a.Count,
		&a.NotifiedCount, &a.FirstSeen, &a.LastSeen, &a.LastNotifiedAt, &a.ResolvedAt, &a.AckedBy, &a.AckedAt)
	return a, err
}

func collectAlerts(rows pgx.Rows, err error) ([]Alert, error) {
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
	State AlertState
	// Limit is the most alerts returned: 0 means [DefaultAlertLimit], more
	// than [MaxAlertLimit] is cut down to it.
	Limit int
	// BeforeID keeps the alerts whose id is lower, for paging.
	BeforeID int64
}

// ListAlerts returns alerts, newest first.
func (s *Store) ListAlerts(ctx context.Context, f AlertFilter) ([]Alert, error) {
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
func (s *Store) OpenAlerts(ctx context.Context) ([]Alert, error) {
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
func (s *Store) AckAlert(ctx context.Context, id int64, operator string, at time.Time) (Alert, error) {
	rows, err := s.pool.Query(ctx, `
		WITH upd AS (
			UPDATE alerts SET state = 'acked', acked_by = $2, acked_at = $3 WHERE id = $1 AND state = 'firing'
			RETURNING `+alertColumns+`
		)
		SELECT `+alertColumns+` FROM upd
		UNION ALL
		SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM upd)`, id, operator, at)
	if err != nil {
		return Alert{}, fmt.Errorf("ack alert %d: %w", id, err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAlert)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Alert{}, fmt.Errorf("ack alert %d: %w", id, ErrNotFound)
	case err != nil:
		return Alert{}, fmt.Errorf("ack alert %d: %w", id, err)
	case a.State == AlertResolved:
		return a, fmt.Errorf("ack alert %d: %w", id, ErrAlertResolved)
	}
	return a, nil
}

// AlertSignal is one observation of a rule's condition for a key.
type AlertSignal struct {
	Rule  string
	Level AlertLevel
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
func (s *Store) RaiseAlert(ctx context.Context, sig AlertSignal) (Alert, error) {
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
		return Alert{}, fmt.Errorf("raise alert %s/%s: %w", sig.Rule, sig.Key, err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAlert)
	if err != nil {
		return Alert{}, fmt.Errorf("raise alert %s/%s: %w", sig.Rule, sig.Key, err)
	}
	return a, nil
}

// ClaimNotification marks firing alert id notified at now when its last
// notification is at least throttle old (or it has none), and returns it
// with how many occurrences the notification reports: those since the
// previous one. ok is false, and nothing changes, when the alert is not
// firing or was notified within throttle. Claiming before sending makes
// the throttle hold for any number of auditors.
func (s *Store) ClaimNotification(ctx context.Context, id int64, throttle time.Duration, now time.Time) (a Alert, repeats int, ok bool, err error) {
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
		return Alert{}, 0, false, fmt.Errorf("claim notification of alert %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return Alert{}, 0, false, rows.Err()
	}
	var before int
	err = rows.Scan(&a.ID, &a.Rule, &a.Level, &a.Key, &a.Task, &a.InstanceID, &a.Reason, &a.State, &a.Count,
		&a.NotifiedCount, &a.FirstSeen, &a.LastSeen, &a.LastNotifiedAt, &a.ResolvedAt, &a.AckedBy, &a.AckedAt, &before)
	if err != nil {
		return Alert{}, 0, false, fmt.Errorf("claim notification of alert %d: %w", id, err)
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
func (s *Store) ResolveAlerts(ctx context.Context, rule string, keys []string, at time.Time) ([]Alert, error) {
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
func (s *Store) ResolveAlertsExcept(ctx context.Context, rule string, keep []string, at time.Time) ([]Alert, error) {
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
