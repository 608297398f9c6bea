package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
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
	// AlertQuarantined holds for a task an instance of which was
	// quarantined (failed because workers kept dying while running it)
	// within params.window. Key: the task.
	AlertQuarantined AlertKind = "quarantined"
	// AlertDeadlineMissed holds for a run of a task with a deadline that
	// is not done by it — waiting, running or failed — among the runs
	// fired within params.window; its message names what the run waits
	// for. Key: the task and the instance ("report/42").
	AlertDeadlineMissed AlertKind = "deadline_missed"
)

// AlertKinds lists every alert rule kind.
var AlertKinds = []AlertKind{AlertNoLiveExecutor, AlertFailingTasks, AlertConsecutiveFailures,
	AlertTimeoutRate, AlertBacklog, AlertDurationJitter, AlertQuarantined, AlertDeadlineMissed}

// DefaultAlertThrottle is the least time between two notifications of one
// alert when its rule sets no throttle.
const DefaultAlertThrottle = 10 * time.Minute

// DefaultJitterFloor is the least run time a duration_jitter alert
// judges when its rule sets no min_duration: below it a run's time is
// noise (a cold cache, a GC pause), not a slow task.
const DefaultJitterFloor = time.Second

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
	// Window is how far back failing_tasks (default 10m), timeout_rate
	// (default 15m) and quarantined (default 1h) look.
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
	// MinDuration is the absolute floor of duration_jitter (default 1s):
	// a latest run shorter than it never holds, whatever the ratio, so
	// that 9 ms against a p95 of 3 ms raises nothing.
	MinDuration time.Duration
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
	AlertDurationJitter:      {"runs", "min_runs", "factor", "min_duration"},
	AlertQuarantined:         {"window"},
	AlertDeadlineMissed:      {"window"},
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

// AlertConfigErrorf returns an *[AlertConfigError] for field, its reason
// formatted as by fmt.Sprintf.
func AlertConfigErrorf(field, format string, args ...any) error {
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
		return AlertParams{}, AlertConfigErrorf("kind", "%q is not an alert rule kind; use one of %s", r.Kind, strings.Join(names, ", "))
	}
	if !r.Level.Valid() {
		return AlertParams{}, AlertConfigErrorf("level", "%q is not an alert level; use P0, P1 or P2", r.Level)
	}
	p := AlertParams{Failures: 3, Tasks: 5, Window: 10 * time.Minute, Rate: 0.2, MinAttempts: 5, Instances: 10,
		Age: 5 * time.Minute, Runs: 20, MinRuns: 5, Factor: 2, MinDuration: DefaultJitterFloor, Throttle: DefaultAlertThrottle}
	switch r.Kind {
	case AlertTimeoutRate:
		p.Window = 15 * time.Minute
	case AlertQuarantined:
		p.Window = time.Hour
	case AlertDeadlineMissed:
		p.Window = 48 * time.Hour
	}
	raw := bytes.TrimSpace(r.Params)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return p, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return AlertParams{}, AlertConfigErrorf("params", "must be a JSON object, such as {\"throttle\": \"10m\"}: %v", err)
	}
	for k, v := range m {
		if k != "throttle" && !slices.Contains(keys, k) {
			return AlertParams{}, AlertConfigErrorf("params."+k, "is not a parameter of a %s rule; it takes %s", r.Kind,
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
		case "min_duration":
			p.MinDuration, err = durationParam(k, v, 0, 24*time.Hour)
		case "throttle":
			p.Throttle, err = durationParam(k, v, 0, 7*24*time.Hour)
		case "rate":
			if err = json.Unmarshal(v, &p.Rate); err != nil || p.Rate <= 0 || p.Rate > 1 {
				err = AlertConfigErrorf("params.rate", "must be a number above 0 and at most 1 (0.2 means 20%% of the attempts)")
			}
		case "factor":
			if err = json.Unmarshal(v, &p.Factor); err != nil || p.Factor <= 1 || p.Factor > 1000 {
				err = AlertConfigErrorf("params.factor", "must be a number above 1 and at most 1000 (2 means twice the p95)")
			}
		}
		if err != nil {
			return AlertParams{}, err
		}
	}
	if p.MinRuns > p.Runs {
		return AlertParams{}, AlertConfigErrorf("params.min_runs", "is %d, more than runs (%d); it must be at most runs", p.MinRuns, p.Runs)
	}
	return p, nil
}

func intParam(key string, v json.RawMessage, lo, hi int) (int, error) {
	var n int
	if err := json.Unmarshal(v, &n); err != nil || n < lo || n > hi {
		return 0, AlertConfigErrorf("params."+key, "must be a whole number from %d to %d", lo, hi)
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
	return 0, AlertConfigErrorf("params."+key, "must be a duration string from %v to %v, such as \"10m\" or \"1h\"", lo, hi)
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
