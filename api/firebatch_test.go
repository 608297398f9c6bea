package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
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
		t.Errorf("AX_FIRINGS holds %d messages, want the batch and the schedule", n)
	}
	s, err := e.js.Stream(t.Context(), "AX_FIRINGS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(t.Context(), "ax.fire.typed.api")
	if err != nil {
		t.Fatal(err)
	}
	items, err := taskdef.SplitTriggerBatch(msg.Data)
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
		t.Errorf("the refused batches published: AX_FIRINGS holds %d messages", n)
	}
}

// TestClientFireBatch fires batches with apiclient's FireBatch: a result a
// firing in order, those refused alone with their Status and an Error that
// carries it, a key used before answered 200 Existing, the firings due now
// in one trigger message; a batch refused whole is an error naming why;
// with a codec, the payloads travel encoded, and a key whose instance holds
// the same plaintext under another envelope answers Existing.
func TestClientFireBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply("task_name: typed\nschema_version: 2\nexecution: {handler: h}\npayload_schema: {type: object, required: [day], properties: {day: {type: string}}}\n")
	ctx := t.Context()

	results, err := e.client.FireBatch(ctx, "typed", []wire.FireRequest{
		{EventID: "a", Payload: json.RawMessage(`{"day": "mon"}`), PayloadVersion: 2},
		{EventID: "bad", Payload: json.RawMessage(`{"day": 1}`), PayloadVersion: 2},
		{IdempotencyKey: "k", Payload: json.RawMessage(`{"day": "tue"}`), PayloadVersion: 2},
		{Payload: json.RawMessage(`{"day": "wed"}`), PayloadVersion: 2, Delay: "1h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want 4: %+v", len(results), results)
	}
	if r := results[0]; r.Status != http.StatusAccepted || r.FireResult == nil || r.EventID != "a" || r.Task != "typed" || r.Error != nil {
		t.Errorf("firing 0: %+v, want 202 event a", r)
	}
	if r := results[1]; r.Status != http.StatusUnprocessableEntity || r.Error == nil || r.Error.Code != "invalid_payload" || r.Error.Status != r.Status || r.FireResult != nil {
		t.Errorf("firing 1: %+v, want 422 invalid_payload with its status", r)
	}
	if r := results[2]; r.Status != http.StatusAccepted || r.FireResult == nil || r.EventID != "idem-k" {
		t.Errorf("firing 2: %+v, want 202 idem-k", r)
	}
	if r := results[3]; r.Status != http.StatusAccepted || r.FireResult == nil || r.RunAt.IsZero() || r.EventID == "" {
		t.Errorf("firing 3: %+v, want 202 with a run_at", r)
	}
	if n := e.triggers(); n != 2 {
		t.Errorf("AX_FIRINGS holds %d messages, want the batch and the schedule", n)
	}

	// A key whose instance is made: its payload again is that instance,
	// another payload refused.
	e.apply("task_name: plain\nexecution: {handler: h}\n")
	made := e.insertInstance("plain", "idem-p", schemas.StateSucceeded)
	results, err = e.client.FireBatch(ctx, "plain", []wire.FireRequest{
		{IdempotencyKey: "p", Payload: json.RawMessage(`{"n": 1}`)},
		{IdempotencyKey: "p", Payload: json.RawMessage(`{"n": 2}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; r.Status != http.StatusOK || r.FireResult == nil || !r.Existing || r.InstanceID != made {
		t.Errorf("the key again with its payload: %+v, want 200 Existing instance %d", r, made)
	}
	if r := results[1]; r.Status != http.StatusConflict || r.Error == nil || r.Error.Code != "idempotency_conflict" || r.Error.Status != http.StatusConflict {
		t.Errorf("the key again with another payload: %+v, want 409 idempotency_conflict with its status", r)
	}

	// Refused whole.
	for _, tc := range []struct {
		name, task string
		reqs       []wire.FireRequest
		status     int
		code, says string
	}{
		{"none", "typed", nil, 400, "invalid_batch", "holds no firing"},
		{"over the limit", "typed", make([]wire.FireRequest, schemas.MaxTriggerBatch+1), 400, "invalid_batch", "at most 1000 (schemas.MaxTriggerBatch)"},
		{"unknown task", "nosuch", []wire.FireRequest{{}}, 404, "task_not_found", "nosuch"},
	} {
		results, err := e.client.FireBatch(ctx, tc.task, tc.reqs)
		apiErr, ok := errors.AsType[*wire.Error](err)
		if !ok || apiErr.Status != tc.status || apiErr.Code != tc.code || !strings.Contains(apiErr.Message, tc.says) || results != nil {
			t.Errorf("%s: %v %+v, want %d %s saying %q", tc.name, err, results, tc.status, tc.code, tc.says)
		}
	}

	// With a codec.
	codec, err := schemas.NewAESGCM(schemas.CodecKey{ID: "k1", Key: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := codec.Encode(json.RawMessage(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	id := e.insertInstance("plain", "idem-sealed", schemas.StateSucceeded)
	if _, err := e.pool.Exec(ctx, `UPDATE instances SET payload = $1 WHERE id = $2`, stored, id); err != nil {
		t.Fatal(err)
	}
	sealed := e.as(e.admin)
	sealed.Codec = codec
	results, err = sealed.FireBatch(ctx, "plain", []wire.FireRequest{
		{EventID: "c", Payload: json.RawMessage(`{"secret": "s"}`)},
		{IdempotencyKey: "sealed", Payload: json.RawMessage(`{"n": 1}`)},
		{IdempotencyKey: "sealed", Payload: json.RawMessage(`{"n": 2}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := results[1]; r.Status != http.StatusOK || r.FireResult == nil || !r.Existing || r.InstanceID != id {
		t.Errorf("the key of an instance of the same plaintext: %+v, want 200 Existing instance %d", r, id)
	}
	if r := results[2]; r.Status != http.StatusConflict || r.Error == nil || r.Error.Code != "idempotency_conflict" {
		t.Errorf("the key of an instance of another plaintext: %+v, want 409", r)
	}
	s, err := e.js.Stream(ctx, "AX_FIRINGS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, "ax.fire.plain.api")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(msg.Data, []byte("secret")) || !bytes.Contains(msg.Data, []byte(`"event_id":"c"`)) {
		t.Errorf("the batch published %s, want firing c with its payload encoded", msg.Data)
	}
}
