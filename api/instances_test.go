package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
)

func TestRerun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed)

	// No dispatcher runs, so the answer is 202; the firing is in the stream.
	alice := e.as(apitest.Token(t, e.store, "alice", schemas.RoleOperator))
	res, err := alice.Rerun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("rerun-%d-", id)
	if res.InstanceID != 0 || res.Task != "nightly-report" || !strings.HasPrefix(res.EventID, prefix) {
		t.Errorf("Rerun = %+v, want task nightly-report and an event id %s…", res, prefix)
	}
	ev, hdr := e.lastTrigger("nightly-report")
	want := schemas.TriggerEvent{EventID: res.EventID, Task: "nightly-report", Source: schemas.SourceManual, Operator: "alice",
		Payload: []byte(`{"n":1}`), PayloadVersion: 1, Priority: schemas.PriorityUrgent, FiredAt: fixedNow,
		Reason: fmt.Sprintf("rerun of instance %d", id)}
	if fmt.Sprintf("%+v", ev) != fmt.Sprintf("%+v", want) || hdr.Get("Nats-Msg-Id") != "nightly-report/"+res.EventID {
		t.Errorf("published firing\n got %+v\nwant %+v", ev, want)
	}

	// The body's operator is not recorded: the token's name is. Each
	// rerun is a new firing.
	status, body := e.do("POST", fmt.Sprintf("/v1/instances/%d/rerun", id), "application/json", strings.NewReader(`{"operator": "carol"}`))
	if status != http.StatusAccepted || body["event_id"] == res.EventID {
		t.Errorf("rerun with a body: %d %v, want 202 with a new event id", status, body)
	}
	if ev, _ := e.lastTrigger("nightly-report"); ev.Operator != apitest.AdminName {
		t.Errorf("operator = %q, want %s", ev.Operator, apitest.AdminName)
	}
	if n := e.triggers(); n != 2 {
		t.Errorf("AX_FIRINGS holds %d messages, want 2", n)
	}
}

func TestRerunRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateSucceeded)
	e.apply("task_name: paused\nexecution: {handler: h}\n")
	paused := e.insertInstance("paused", "ev-1", schemas.StateSucceeded)
	if _, err := e.client.SetTaskEnabled(t.Context(), "paused", false); err != nil {
		t.Fatal(err)
	}
	e.apply("task_name: strict\nexecution: {handler: h}\n")
	strict := e.insertInstance("strict", "ev-1", schemas.StateSucceeded)
	// The task now takes another payload than the instance ran with.
	e.apply("task_name: strict\nexecution: {handler: h}\npayload_schema: {type: object, required: [day]}\n")

	tests := []struct {
		name, path, body string
		status           int
		code, field, msg string
	}{
		{"not an id", "/v1/instances/abc/rerun", "", 400, "invalid_instance_id", "id", `"abc" is not an instance id`},
		{"zero id", "/v1/instances/0/rerun", "", 400, "invalid_instance_id", "id", ""},
		{"unknown instance", fmt.Sprintf("/v1/instances/%d/rerun", strict+100), "", 404, "instance_not_found", "id", "does not exist"},
		{"unknown field", fmt.Sprintf("/v1/instances/%d/rerun", id), `{"payloads": {}}`, 400, "unknown_field", "payloads", `like {"payload": {"day": "2025-03-01"}}`},
		{"operator not a string", fmt.Sprintf("/v1/instances/%d/rerun", id), `{"operator": 7}`, 400, "invalid_request", "operator", `like {"payload": {"day": "2025-03-01"}}`},
		{"payload the task refuses", fmt.Sprintf("/v1/instances/%d/rerun", strict), `{"payload": {"night": 1}}`, 422, "invalid_payload", "payload.day", "is required"},
		{"malformed body", fmt.Sprintf("/v1/instances/%d/rerun", id), `{"operator": `, 400, "malformed_json", "", "not valid JSON"},
		{"disabled task", fmt.Sprintf("/v1/instances/%d/rerun", paused), "", 409, "task_disabled", "name", "ax task enable paused"},
		{"payload the task now refuses", fmt.Sprintf("/v1/instances/%d/rerun", strict), "", 422, "invalid_payload", "payload.day", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.do("POST", tt.path, "application/json", strings.NewReader(tt.body))
			if status != tt.status {
				t.Fatalf("status %d %v, want %d", status, body, tt.status)
			}
			er := errorOf(t, body)
			msg, _ := er["message"].(string)
			if er["code"] != tt.code || (er["field"] != nil && er["field"] != tt.field) || (er["field"] == nil && tt.field != "") ||
				!strings.Contains(msg, tt.msg) {
				t.Errorf("error = %v, want code %s, field %q, message with %q", er, tt.code, tt.field, tt.msg)
			}
		})
	}
	if n := e.triggers(); n != 0 {
		t.Errorf("refused reruns published %d messages", n)
	}
}

// TestRerunWithAPayload reruns an instance with another payload, which the
// task's payload_schema judges like any firing's.
func TestRerunWithAPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask + "payload_schema: {type: object, properties: {count: {type: integer}}}\n")
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed)

	res, err := e.client.RerunWith(t.Context(), id, wire.RerunRequest{Payload: []byte(`{"count": 2}`)})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := e.lastTrigger("nightly-report")
	if ev.EventID != res.EventID || string(ev.Payload) != `{"count":2}` || ev.Reason != fmt.Sprintf("rerun of instance %d", id) {
		t.Errorf("published firing %+v, want payload {\"count\":2}", ev)
	}
	status, body := e.do("POST", fmt.Sprintf("/v1/instances/%d/rerun", id), "application/json", strings.NewReader(`{"payload": {"count": "two"}}`))
	if status != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(body), "payload.count") {
		t.Errorf("rerun with a payload the schema refuses: %d %v, want 422 naming payload.count", status, body)
	}
	// Without a payload, the instance's own.
	if _, err := e.client.RerunWith(t.Context(), id, wire.RerunRequest{}); err != nil {
		t.Fatal(err)
	}
	if ev, _ := e.lastTrigger("nightly-report"); string(ev.Payload) != `{"n":1}` {
		t.Errorf("rerun without a payload published %s, want the instance's {\"n\":1}", ev.Payload)
	}
}
