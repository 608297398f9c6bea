package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

func TestDefaultAlertRules(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	rules, err := st.ListAlertRules(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	levels := map[schemas.AlertLevel]int{}
	kinds := map[schemas.AlertKind]bool{}
	for _, r := range rules {
		if !r.Enabled || string(r.Kind) != r.Name {
			t.Errorf("default rule %+v: want enabled and named after its kind", r)
		}
		if _, err := r.DecodeParams(); err != nil {
			t.Errorf("default rule %s: %v", r.Name, err)
		}
		levels[r.Level]++
		kinds[r.Kind] = true
	}
	if len(kinds) != len(schemas.AlertKinds) || levels[schemas.AlertP0] != 2 || levels[schemas.AlertP1] != 4 || levels[schemas.AlertP2] != 2 {
		t.Errorf("default rules = %+v, want one per kind: two P0, four P1 (quarantined and deadline_missed among them), two P2", rules)
	}
}

func TestDecodeParams(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		kind   schemas.AlertKind
		level  schemas.AlertLevel
		params string
		want   func(schemas.AlertParams) bool
		err    string
	}{
		{schemas.AlertConsecutiveFailures, "P1", ``, func(p schemas.AlertParams) bool {
			return p.Failures == 3 && p.Throttle == schemas.DefaultAlertThrottle
		}, ""},
		{schemas.AlertConsecutiveFailures, "P1", `{"failures": 5, "throttle": "0s"}`, func(p schemas.AlertParams) bool {
			return p.Failures == 5 && p.Throttle == 0
		}, ""},
		{schemas.AlertTimeoutRate, "P1", `{"rate": 0.5}`, func(p schemas.AlertParams) bool {
			return p.Rate == 0.5 && p.Window == 15*time.Minute && p.MinAttempts == 5
		}, ""},
		{schemas.AlertFailingTasks, "P0", `{"window": "1h"}`, func(p schemas.AlertParams) bool {
			return p.Window == time.Hour && p.Tasks == 5
		}, ""},
		{schemas.AlertBacklog, "P2", `{"age": "30s", "instances": 1}`, func(p schemas.AlertParams) bool {
			return p.Age == 30*time.Second && p.Instances == 1
		}, ""},
		{schemas.AlertDurationJitter, "P2", `{"factor": 3, "runs": 10, "min_runs": 3}`, func(p schemas.AlertParams) bool {
			return p.Factor == 3 && p.Runs == 10 && p.MinRuns == 3 && p.MinDuration == time.Second
		}, ""},
		{schemas.AlertDurationJitter, "P2", `{"min_duration": "250ms"}`, func(p schemas.AlertParams) bool {
			return p.MinDuration == 250*time.Millisecond
		}, ""},
		{"nope", "P1", ``, nil, `kind: "nope" is not an alert rule kind`},
		{schemas.AlertBacklog, "P9", ``, nil, `level: "P9" is not an alert level`},
		{schemas.AlertBacklog, "P2", `[1]`, nil, `params: must be a JSON object`},
		{schemas.AlertBacklog, "P2", `{"failures": 3}`, nil, `params.failures: is not a parameter of a backlog rule; it takes instances, age, throttle`},
		{schemas.AlertConsecutiveFailures, "P1", `{"failures": 0}`, nil, `params.failures: must be a whole number from 1 to 1000`},
		{schemas.AlertTimeoutRate, "P1", `{"rate": 1.5}`, nil, `params.rate: must be a number above 0 and at most 1`},
		{schemas.AlertTimeoutRate, "P1", `{"window": "10"}`, nil, `params.window: must be a duration string`},
		{schemas.AlertDurationJitter, "P2", `{"factor": 1}`, nil, `params.factor: must be a number above 1`},
		{schemas.AlertDurationJitter, "P2", `{"runs": 4}`, nil, `params.min_runs: is 5, more than runs (4)`},
	} {
		p, err := schemas.AlertRule{Name: "r", Kind: tt.kind, Level: tt.level, Params: json.RawMessage(tt.params)}.DecodeParams()
		switch {
		case tt.err != "":
			var ce *schemas.AlertConfigError
			if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("%s %s: error %v, want an *AlertConfigError starting %q", tt.kind, tt.params, err, tt.err)
			}
		case err != nil:
			t.Errorf("%s %s: %v", tt.kind, tt.params, err)
		case !tt.want(p):
			t.Errorf("%s %s = %+v", tt.kind, tt.params, p)
		}
	}
}

func TestPutAlertRule(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	r, err := st.PutAlertRule(ctx, schemas.AlertRule{Name: "consecutive_failures", Kind: schemas.AlertConsecutiveFailures,
		Level: schemas.AlertP0, Params: json.RawMessage(`{"failures": 5}`), Enabled: false}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if r.Level != schemas.AlertP0 || r.Enabled || compact(r.Params) != `{"failures":5}` {
		t.Errorf("replaced rule = %+v", r)
	}
	n, err := st.PutAlertRule(ctx, schemas.AlertRule{Name: "etl-backlog", Kind: schemas.AlertBacklog, Level: schemas.AlertP1, Enabled: true}, "test")
	if err != nil || compact(n.Params) != `{}` || !n.Enabled {
		t.Fatalf("new rule = %+v, %v", n, err)
	}
	for _, bad := range []schemas.AlertRule{
		{Name: "backlog", Kind: schemas.AlertTimeoutRate, Level: schemas.AlertP1},
		{Name: "Bad Name", Kind: schemas.AlertBacklog, Level: schemas.AlertP1},
		{Name: "x", Kind: schemas.AlertBacklog, Level: schemas.AlertP1, Params: json.RawMessage(`{"age": 5}`)},
	} {
		if _, err := st.PutAlertRule(ctx, bad, "test"); !errors.As(err, new(*schemas.AlertConfigError)) {
			t.Errorf("PutAlertRule(%+v) = %v, want an *AlertConfigError", bad, err)
		}
	}
	rules, err := st.ListAlertRules(ctx)
	if err != nil || len(rules) != len(schemas.AlertKinds)+1 {
		t.Errorf("rules = %+v, %v", rules, err)
	}
}

func TestAlertChannels(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	a, err := st.AddAlertChannel(ctx, schemas.ChannelSlack, "https://hooks.example.com/x", "test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.AddAlertChannel(ctx, schemas.ChannelWeCom, "http://127.0.0.1:9/robot", "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kind schemas.AlertChannelKind
		url  string
	}{{"email", "https://x"}, {schemas.ChannelWebhook, "ftp://x/y"}, {schemas.ChannelWebhook, "/relative"}} {
		if _, err := st.AddAlertChannel(ctx, tt.kind, tt.url, "test"); !errors.As(err, new(*schemas.AlertConfigError)) {
			t.Errorf("AddAlertChannel(%s, %s) = %v, want an *AlertConfigError", tt.kind, tt.url, err)
		}
	}
	if gone, err := st.DeleteAlertChannel(ctx, a.ID, "test"); err != nil || gone != a {
		t.Fatalf("delete = %+v, %v; want %+v", gone, err, a)
	}
	if _, err := st.DeleteAlertChannel(ctx, a.ID, "test"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete = %v, want ErrNotFound", err)
	}
	chs, err := st.ListAlertChannels(ctx)
	if err != nil || len(chs) != 1 || chs[0] != b {
		t.Errorf("channels = %+v, %v; want only %+v", chs, err, b)
	}
}

func TestAlertLifecycle(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := t.Context()
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	raise := func(key string, instance int64, at time.Time) schemas.Alert {
		t.Helper()
		a, err := st.RaiseAlert(ctx, store.AlertSignal{Rule: "consecutive_failures", Level: schemas.AlertP1, Key: key, Task: key,
			InstanceID: instance, Reason: "failed", At: at})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	claim := func(id int64, at time.Time) (int, bool) {
		t.Helper()
		_, repeats, ok, err := st.ClaimNotification(ctx, id, 10*time.Minute, at)
		if err != nil {
			t.Fatal(err)
		}
		return repeats, ok
	}

	a := raise("etl", 7, t0)
	if a.State != schemas.AlertFiring || a.Count != 1 || a.InstanceID != 7 || !a.FirstSeen.Equal(t0) {
		t.Fatalf("raised = %+v", a)
	}
	if repeats, ok := claim(a.ID, t0); !ok || repeats != 1 {
		t.Fatalf("first claim = %d, %t; want 1, true", repeats, ok)
	}
	// Repeats within the throttle are counted, not notified.
	raise("etl", 8, t0.Add(time.Minute))
	b := raise("etl", 0, t0.Add(2*time.Minute))
	if b.ID != a.ID || b.Count != 3 || b.InstanceID != 8 || !b.LastSeen.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("after two repeats = %+v", b)
	}
	if _, ok := claim(a.ID, t0.Add(5*time.Minute)); ok {
		t.Error("claimed within the throttle")
	}
	if repeats, ok := claim(a.ID, t0.Add(10*time.Minute)); !ok || repeats != 2 {
		t.Errorf("claim after the throttle = %d, %t; want 2, true", repeats, ok)
	}

	other := raise("mail", 1, t0)
	acked, err := st.AckAlert(ctx, other.ID, "alice", t0.Add(time.Minute))
	if err != nil || acked.State != schemas.AlertAcked || acked.AckedBy != "alice" {
		t.Fatalf("ack = %+v, %v", acked, err)
	}
	if again, err := st.AckAlert(ctx, other.ID, "bob", t0.Add(2*time.Minute)); err != nil || again.AckedBy != "alice" {
		t.Errorf("second ack = %+v, %v; want alice's unchanged", again, err)
	}
	if _, ok := claim(other.ID, t0.Add(time.Hour)); ok {
		t.Error("claimed an acked alert")
	}
	if _, err := st.AckAlert(ctx, 999, "alice", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ack of an unknown alert = %v", err)
	}
	open, err := st.OpenAlerts(ctx)
	if err != nil || len(open) != 2 {
		t.Fatalf("open = %+v, %v", open, err)
	}

	// State rules resolve what no longer holds; each alert resolves once.
	res, err := st.ResolveAlertsExcept(ctx, "consecutive_failures", []string{"mail"}, t0.Add(time.Hour))
	if err != nil || len(res) != 1 || res[0].ID != a.ID || res[0].State != schemas.AlertResolved || res[0].ResolvedAt == nil {
		t.Fatalf("resolve except mail = %+v, %v", res, err)
	}
	if res, err := st.ResolveAlerts(ctx, "consecutive_failures", []string{"etl"}, t0.Add(time.Hour)); err != nil || len(res) != 0 {
		t.Errorf("second resolve = %+v, %v", res, err)
	}
	if _, err := st.AckAlert(ctx, a.ID, "alice", t0); !errors.Is(err, store.ErrAlertResolved) {
		t.Errorf("ack of a resolved alert = %v", err)
	}
	// The next occurrence opens a new alert.
	if n := raise("etl", 9, t0.Add(2*time.Hour)); n.ID == a.ID || n.Count != 1 {
		t.Errorf("after resolution = %+v, want a new alert", n)
	}
	// A rule that counts by itself sets the count; it never goes down.
	for _, tt := range []struct{ count, want int }{{5, 5}, {3, 5}, {0, 6}} {
		a, err := st.RaiseAlert(ctx, store.AlertSignal{Rule: "consecutive_failures", Level: schemas.AlertP1, Key: "streak", Reason: "r",
			At: t0, Count: tt.count})
		if err != nil || a.Count != tt.want {
			t.Errorf("raise with count %d = %+v, %v; want count %d", tt.count, a, err, tt.want)
		}
	}
	if res, err := st.ResolveAlerts(ctx, "consecutive_failures", []string{"mail"}, t0.Add(3*time.Hour)); err != nil || len(res) != 1 {
		t.Errorf("resolve acked = %+v, %v", res, err)
	}

	list, err := st.ListAlerts(ctx, store.AlertFilter{})
	if err != nil || len(list) != 4 || list[0].ID < list[3].ID {
		t.Fatalf("list = %+v, %v; want three, newest first", list, err)
	}
	if firing, err := st.ListAlerts(ctx, store.AlertFilter{State: schemas.AlertFiring}); err != nil || len(firing) != 2 {
		t.Errorf("firing = %+v, %v", firing, err)
	}
	if page, err := st.ListAlerts(ctx, store.AlertFilter{Limit: 1, BeforeID: list[0].ID}); err != nil || len(page) != 1 || page[0].ID != list[1].ID {
		t.Errorf("second page = %+v, %v", page, err)
	}
}

func TestMonitorLockIsExclusive(t *testing.T) {
	t.Parallel()
	st := store.New(storetest.NewDB(t))
	ctx := context.Background()
	l, err := st.AcquireMonitor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireMonitor(ctx); !errors.Is(err, store.ErrMonitorHeld) {
		t.Fatalf("second acquire = %v, want ErrMonitorHeld", err)
	}
	if err := l.Check(ctx); err != nil {
		t.Error(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := st.AcquireMonitor(ctx)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if err := l2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
