package api_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// raise opens an alert the way the auditor does.
func (e *env) raise(rule, key string) schemas.Alert {
	e.t.Helper()
	a, err := e.store.RaiseAlert(e.t.Context(), store.AlertSignal{Rule: rule, Level: schemas.AlertP1, Key: key, Task: key,
		InstanceID: 42, Reason: "failed 3 times in a row", At: fixedNow})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func TestAlerts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	first := e.raise("consecutive_failures", "etl")
	second := e.raise("backlog", "mail")
	if _, err := e.store.ResolveAlerts(ctx, "backlog", []string{"mail"}, fixedNow); err != nil {
		t.Fatal(err)
	}
	all, err := e.client.ListAlerts(ctx, apiclient.AlertQuery{})
	if err != nil || len(all) != 2 || all[0].ID != second.ID || all[1].Task != "etl" || all[1].InstanceID != 42 {
		t.Fatalf("alerts = %+v, %v", all, err)
	}
	if firing, err := e.client.ListAlerts(ctx, apiclient.AlertQuery{State: schemas.AlertFiring}); err != nil || len(firing) != 1 || firing[0].ID != first.ID {
		t.Errorf("firing alerts = %+v, %v", firing, err)
	}
	if page, err := e.client.ListAlerts(ctx, apiclient.AlertQuery{Limit: 1, Before: second.ID}); err != nil || len(page) != 1 || page[0].ID != first.ID {
		t.Errorf("second page = %+v, %v", page, err)
	}

	// An operator acknowledges, under the token's name.
	otto := e.as(apitest.Token(t, e.store, "otto", schemas.RoleOperator))
	acked, err := otto.AckAlert(ctx, first.ID)
	if err != nil || acked.State != schemas.AlertAcked || acked.AckedBy != "otto" || acked.AckedAt == nil {
		t.Errorf("ack = %+v, %v", acked, err)
	}
	for _, tt := range []struct {
		id     int64
		status int
		code   string
	}{{second.ID, 409, "alert_resolved"}, {999, 404, "alert_not_found"}} {
		_, err := otto.AckAlert(ctx, tt.id)
		if ae, ok := errors.AsType[*wire.Error](err); !ok || ae.Status != tt.status || ae.Code != tt.code {
			t.Errorf("ack %d = %v, want %d %s", tt.id, err, tt.status, tt.code)
		}
	}

	for _, tt := range []struct{ path, want string }{
		{"/v1/alerts?state=open", `state="open" is not an alert state; use firing, acked or resolved`},
		{"/v1/alerts?limit=0", `limit="0" is not a number from 1 to 1000`},
		{"/v1/alerts?before=x", `before="x" is not an alert id`},
		{"/v1/alerts?status=firing", `unknown query parameter "status"`},
	} {
		status, body := e.do("GET", tt.path, "", nil)
		if msg, _ := body["error"].(map[string]any)["message"].(string); status != 400 || !strings.HasPrefix(msg, tt.want) {
			t.Errorf("GET %s: %d %v, want 400 %q", tt.path, status, body, tt.want)
		}
	}
	if status, body := e.do("POST", "/v1/alerts/abc/ack", "", nil); status != 400 || body["error"].(map[string]any)["code"] != "invalid_alert_id" {
		t.Errorf("ack of abc: %d %v", status, body)
	}
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	rules, err := e.client.ListAlertRules(ctx)
	if err != nil || len(rules) != len(schemas.AlertKinds) {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
	off := false
	r, err := e.client.PutAlertRule(ctx, "consecutive_failures", wire.AlertRuleRequest{Kind: schemas.AlertConsecutiveFailures,
		Level: schemas.AlertP0, Params: json.RawMessage(`{"failures": 5, "throttle": "1h"}`), Enabled: &off})
	if err != nil || r.Level != schemas.AlertP0 || r.Enabled || !strings.Contains(string(r.Params), `"failures":5`) {
		t.Errorf("put = %+v, %v", r, err)
	}
	r, err = e.client.PutAlertRule(ctx, "etl-backlog", wire.AlertRuleRequest{Kind: schemas.AlertBacklog, Level: schemas.AlertP1})
	if err != nil || !r.Enabled || string(r.Params) != "{}" {
		t.Errorf("new rule = %+v, %v", r, err)
	}
	for _, tt := range []struct {
		name, body, field, want string
	}{
		{"x", `{"kind": "backlog", "level": "P2", "params": {"age": 5}}`, "params.age",
			`alert rule x: params.age: must be a duration string`},
		{"x", `{"kind": "backlog", "level": "P7"}`, "level", `alert rule x: level: "P7" is not an alert level`},
		{"backlog", `{"kind": "timeout_rate", "level": "P1"}`, "kind", `alert rule backlog: kind: rule backlog exists with another kind`},
		{"Bad", `{"kind": "backlog", "level": "P1"}`, "name", `alert rule Bad: name: "Bad" is not a rule name`},
		{"x", `{"kind": "backlog", "level": "P1", "threshold": 3}`, "", `the body is not an alert rule`},
		{"x", ``, "", `the body is empty; send an alert rule`},
	} {
		status, body := e.do("PUT", "/v1/alert-rules/"+tt.name, "application/json", strings.NewReader(tt.body))
		errBody, _ := body["error"].(map[string]any)
		if msg, _ := errBody["message"].(string); status != 400 || !strings.HasPrefix(msg, tt.want) || (tt.field != "" && errBody["field"] != tt.field) {
			t.Errorf("PUT %s %s: %d %v, want 400 %s: %q", tt.name, tt.body, status, body, tt.field, tt.want)
		}
	}
	// A viewer reads the rules but changes none.
	vera := e.as(apitest.Token(t, e.store, "vera", schemas.RoleViewer))
	if _, err := vera.ListAlertRules(ctx); err != nil {
		t.Errorf("viewer lists rules: %v", err)
	}
	if _, err := vera.PutAlertRule(ctx, "x", wire.AlertRuleRequest{Kind: schemas.AlertBacklog, Level: schemas.AlertP1}); !isStatus(err, 403) {
		t.Errorf("viewer puts a rule: %v, want 403", err)
	}
}

func TestAlertChannels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	ch, err := e.client.AddAlertChannel(ctx, wire.AlertChannelRequest{Kind: schemas.ChannelWeCom, URL: "https://qyapi.example/send?key=k"})
	if err != nil || ch.ID == 0 || ch.Kind != schemas.ChannelWeCom {
		t.Fatalf("add = %+v, %v", ch, err)
	}
	status, body := e.do("POST", "/v1/alert-channels", "application/json", strings.NewReader(`{"kind": "pager", "url": "https://x"}`))
	if msg, _ := body["error"].(map[string]any)["message"].(string); status != 400 || msg != `alert channel: kind: "pager" is not a channel kind; use webhook, wecom or slack` {
		t.Errorf("bad kind: %d %v", status, body)
	}
	status, body = e.do("POST", "/v1/alert-channels", "application/json", strings.NewReader(`{"kind": "slack", "url": "hooks"}`))
	if status != 400 || body["error"].(map[string]any)["field"] != "url" {
		t.Errorf("bad url: %d %v", status, body)
	}
	chs, err := e.client.ListAlertChannels(ctx)
	if err != nil || len(chs) != 1 || chs[0].URL != ch.URL {
		t.Errorf("channels = %+v, %v", chs, err)
	}
	if gone, err := e.client.DeleteAlertChannel(ctx, ch.ID); err != nil || gone.ID != ch.ID {
		t.Errorf("delete = %+v, %v", gone, err)
	}
	if _, err := e.client.DeleteAlertChannel(ctx, ch.ID); !isStatus(err, 404) {
		t.Errorf("second delete = %v, want 404", err)
	}
	// Channel URLs hold secrets: an operator cannot read them.
	otto := e.as(apitest.Token(t, e.store, "otto", schemas.RoleOperator))
	if _, err := otto.ListAlertChannels(ctx); !isStatus(err, 403) {
		t.Errorf("operator lists channels: %v, want 403", err)
	}
}
