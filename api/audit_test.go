package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func TestAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	alice := e.as(apitest.Token(t, e.store, "alice", schemas.RoleAdmin))
	bob := e.as(apitest.Token(t, e.store, "bob", schemas.RoleAdmin))

	// Operator actions: every change, with who made it.
	if _, err := alice.ApplyTask(ctx, []byte(echoTask), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.ApplyTask(ctx, []byte(echoTask), "application/yaml"); err != nil { // unchanged: not an action
		t.Fatal(err)
	}
	if _, err := bob.SetTaskEnabled(ctx, "nightly-report", false); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.SetTaskEnabled(ctx, "nightly-report", false); err != nil { // already disabled
		t.Fatal(err)
	}
	if _, err := alice.SetTaskEnabled(ctx, "nightly-report", true); err != nil {
		t.Fatal(err)
	}
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateDispatched) // alice's CREATED, the dispatcher's DISPATCHED

	recs, err := e.client.Audit(ctx, apiclient.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Kind == schemas.AuditAction {
			got = append(got, fmt.Sprintf("%s %s %s", r.Action, r.Operator, r.Details))
		} else {
			got = append(got, fmt.Sprintf("%s→%s %s %d", r.From, r.To, r.Operator, r.InstanceID))
		}
	}
	want := []string{
		fmt.Sprintf("CREATED→DISPATCHED dispatcher %d", id),
		fmt.Sprintf("→CREATED alice %d", id),
		"enable alice ",
		"disable bob ",
		`apply alice {"version":1}`,
		// The tokens the test made, as every token made is.
		`token_create apitest {"role":"admin","token":"bob","token_id":3}`,
		`token_create apitest {"role":"admin","token":"alice","token_id":2}`,
		`token_create apitest {"role":"admin","token":"test-admin","token_id":1}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Audit() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(recs) == 8 && (recs[2].ID[:2] != "o-" || recs[0].ID[:2] != "t-" || recs[2].Task != "nightly-report" || recs[2].At.IsZero()) {
		t.Errorf("records = %+v", recs)
	}

	// The wire form.
	status, body := e.do("GET", "/v1/audit?limit=1", "", nil)
	list, _ := body["records"].([]any)
	if status != 200 || len(list) != 1 {
		t.Fatalf("GET /v1/audit?limit=1: status %d %v", status, body)
	}
	if first := list[0].(map[string]any); first["kind"] != "transition" || first["from"] != "CREATED" || first["to"] != "DISPATCHED" ||
		first["attempt"] != 1.0 || first["instance_id"] != float64(id) || first["operator"] != "dispatcher" ||
		!strings.HasPrefix(first["id"].(string), "t-") {
		t.Errorf("record = %v", first)
	}
	status, body = e.do("GET", "/v1/audit?task=missing", "", nil)
	if list, ok := body["records"].([]any); status != 200 || !ok || len(list) != 0 {
		t.Errorf("empty list: status %d %v, want 200 with an empty list", status, body)
	}

	for _, tt := range []struct {
		q    apiclient.AuditQuery
		want int
	}{
		{apiclient.AuditQuery{Task: "nightly-report"}, 5},
		{apiclient.AuditQuery{InstanceID: id}, 2},
		{apiclient.AuditQuery{Operator: "alice"}, 3},
		{apiclient.AuditQuery{Since: recs[1].At}, 2},
		{apiclient.AuditQuery{Limit: 2, Before: recs[1].ID}, 2},
		{apiclient.AuditQuery{Operator: "bob", Since: recs[4].At, Task: "nightly-report"}, 1},
	} {
		got, err := e.client.Audit(ctx, tt.q)
		if err != nil || len(got) != tt.want {
			t.Errorf("Audit(%+v) = %d records, %v; want %d", tt.q, len(got), err, tt.want)
		}
	}
	// since also takes a duration back from now; fixedNow is 2025, so an
	// hour back from it keeps every record.
	if _, body := e.do("GET", "/v1/audit?since=1h", "", nil); len(body["records"].([]any)) != 8 {
		t.Errorf("since=1h: %v", body)
	}

	for _, tt := range []struct {
		query string
		code  string
		field string
	}{
		{"tsk=a", "unknown_parameter", "tsk"},
		{"task=A.B", "invalid_parameter", "task"},
		{"instance=0", "invalid_parameter", "instance"},
		{"instance=x", "invalid_parameter", "instance"},
		{"operator=" + strings.Repeat("x", 257), "invalid_parameter", "operator"},
		{"since=yesterday", "invalid_parameter", "since"},
		{"since=-1h", "invalid_parameter", "since"},
		{"limit=0", "invalid_parameter", "limit"},
		{"limit=1001", "invalid_parameter", "limit"},
		{"before=42", "invalid_parameter", "before"},
		{"before=t-999999", "invalid_parameter", "before"},
	} {
		status, body := e.do("GET", "/v1/audit?"+tt.query, "", nil)
		er := errorOf(t, body)
		if status != 400 || er["code"] != tt.code || er["field"] != tt.field {
			t.Errorf("GET /v1/audit?%s: status %d %v, want 400 %s field %s", tt.query, status, er, tt.code, tt.field)
		}
	}
	_, err = e.client.Audit(ctx, apiclient.AuditQuery{Since: time.Now(), Operator: "a b&c"})
	if err != nil {
		t.Errorf("Audit with characters to escape: %v", err)
	}
}

// TestAuditTokenAndAlertChanges makes, revokes and changes tokens, alert
// rules and channels as two admins: each change is an operator action in
// the audit trail, with the admin who made it and no secret.
func TestAuditTokenAndAlertChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	alice := e.as(apitest.Token(t, e.store, "alice", schemas.RoleAdmin))
	bob := e.as(apitest.Token(t, e.store, "bob", schemas.RoleAdmin))

	made, err := alice.CreateToken(ctx, "ci", schemas.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.RevokeToken(ctx, made.Token.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.PutAlertRule(ctx, "backlog", wire.AlertRuleRequest{Kind: schemas.AlertBacklog, Level: schemas.AlertP1}); err != nil {
		t.Fatal(err)
	}
	ch, err := alice.AddAlertChannel(ctx, wire.AlertChannelRequest{Kind: schemas.ChannelSlack, URL: "https://hooks.example.com/services/T0/B0/secret-path"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.DeleteAlertChannel(ctx, ch.ID); err != nil {
		t.Fatal(err)
	}
	// A refused change is no action.
	if _, err := alice.DeleteAlertChannel(ctx, ch.ID); !isStatus(err, 404) {
		t.Fatalf("deleting a deleted channel: %v, want 404", err)
	}

	want := []string{
		fmt.Sprintf(`_alerts alert_channel_delete bob {"kind":"slack","channel_id":%d}`, ch.ID),
		fmt.Sprintf(`_alerts alert_channel_add alice {"kind":"slack","channel_id":%d}`, ch.ID),
		`_alerts alert_rule_put bob {"kind":"backlog","rule":"backlog","level":"P1","params":{},"enabled":true}`,
		fmt.Sprintf(`_tokens token_revoke bob {"role":"operator","token":"ci","token_id":%d}`, made.Token.ID),
		fmt.Sprintf(`_tokens token_create alice {"role":"operator","token":"ci","token_id":%d}`, made.Token.ID),
	}
	var got []string
	for _, task := range []string{schemas.AuditTaskAlerts, schemas.AuditTaskTokens} {
		recs, err := e.client.Audit(ctx, apiclient.AuditQuery{Task: task})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind != schemas.AuditAction || r.Operator == "apitest" {
				continue
			}
			got = append(got, fmt.Sprintf("%s %s %s %s", r.Task, r.Action, r.Operator, r.Details))
			if strings.Contains(string(r.Details), "secret") {
				t.Errorf("the audit record %s holds a secret: %s", r.ID, r.Details)
			}
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the audit of the token and alert changes =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Asked for by operator, as for any other action.
	recs, err := e.client.Audit(ctx, apiclient.AuditQuery{Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range recs {
		actions = append(actions, string(r.Action))
	}
	if strings.Join(actions, " ") != "alert_channel_add token_create" {
		t.Errorf("alice's actions = %v, want the channel she added and the token she made", actions)
	}
}
