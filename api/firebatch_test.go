package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// TestFireBatch fires a batch through the API whose good firings sit
// among bad ones: each bad one gets the error a single firing so bad gets,
// the good ones travel in one trigger message, and a batch over the limit
// or of an unknown task is refused whole.
func TestFireBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply("task_name: typed\nschema_version: 2\nexecution: {handler: h}\npayload_schema: {type: object, required: [day], properties: {day: {type: string}}}\n")

	status, body := e.do("POST", "/v1/tasks/typed/runs", "application/json", strings.NewReader(`[
		{"event_id": "a", "payload": {"day": "mon"}, "payload_version": 2},
		{"event_id": "old", "payload": {"day": "mon"}},
		{"event_id": "bad", "payload": {"day": 1}, "payload_version": 2},
		{"event_id": "x", "nope": 1},
		{"event_id": "retry-1-2", "payload": {"day": "mon"}, "payload_version": 2},
		{"idempotency_key": "k", "payload": {"day": "tue"}, "payload_version": 2},
		{"payload": {"day": "wed"}, "payload_version": 2, "delay": "1h"}
	]`))
	if status != http.StatusAccepted {
		t.Fatalf("status %d %v, want 202", status, body)
	}
	results, _ := body["results"].([]any)
	if len(results) != 7 {
		t.Fatalf("results %v, want 7", body)
	}
	want := []struct {
		status      float64
		event, code string
	}{
		{202, "a", ""}, {422, "", "payload_version_mismatch"}, {422, "", "invalid_payload"}, {400, "", "unknown_field"},
		{400, "", "invalid_request"}, {202, "idem-k", ""}, {202, "", ""},
	}
	for i, w := range want {
		r := results[i].(map[string]any)
		er, _ := r["error"].(map[string]any)
		if r["status"] != w.status || (w.event != "" && r["event_id"] != w.event) || (w.code != "" && (er == nil || er["code"] != w.code)) {
			t.Errorf("result %d = %v, want status %v, event %q, code %q", i, r, w.status, w.event, w.code)
		}
	}
	if r := results[6].(map[string]any); r["run_at"] == nil || r["event_id"] == "" {
		t.Errorf("the delayed firing's result %v has no run_at or event id", r)
	}
	// The two firings due now in one message, the delayed one scheduled.
	if n := e.triggers(); n != 2 {
		t.Errorf("AX_TRIGGERS holds %d messages, want the batch and the schedule", n)
	}
	s, err := e.js.Stream(t.Context(), "AX_TRIGGERS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(t.Context(), "ax.trigger.typed.api")
	if err != nil {
		t.Fatal(err)
	}
	items, err := schemas.SplitTriggerBatch(msg.Data)
	if err != nil || len(items) != 2 {
		t.Fatalf("published %s: %d firings, %v", msg.Data, len(items), err)
	}
	var second schemas.TriggerEvent
	if err := json.Unmarshal(items[1], &second); err != nil || second.IdempotencyKey != "k" || second.EventID != "" {
		t.Errorf("the keyed firing travels as %s, want its key", items[1])
	}

	// Refused whole: over the limit, and a task that does not exist.
	evs := make([]schemas.TriggerEvent, schemas.MaxTriggerBatch+1)
	for i := range evs {
		evs[i] = schemas.TriggerEvent{EventID: fmt.Sprintf("e%d", i)}
	}
	big, err := schemas.MarshalTriggerBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	status, body = e.do("POST", "/v1/tasks/typed/runs", "application/json", strings.NewReader(string(big)))
	if er := errorOf(t, body); status != http.StatusBadRequest || er["code"] != "invalid_batch" ||
		!strings.Contains(er["message"].(string), "a batch holds at most 1000 (schemas.MaxTriggerBatch)") {
		t.Errorf("a batch over the limit: %d %v, want 400 naming the limit", status, body)
	}
	status, body = e.do("POST", "/v1/tasks/nosuch/runs", "application/json", strings.NewReader(`[{"event_id": "a"}]`))
	if er := errorOf(t, body); status != http.StatusNotFound || er["code"] != "task_not_found" {
		t.Errorf("a batch of an unknown task: %d %v, want 404", status, body)
	}
	if n := e.triggers(); n != 2 {
		t.Errorf("the refused batches published: AX_TRIGGERS holds %d messages", n)
	}
}
