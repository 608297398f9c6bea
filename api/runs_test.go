package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/streams"
)

func TestFireRejectsBadDelaysAndKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	tests := []struct {
		name, body, code, field, message string
	}{
		{"run_at and delay", `{"run_at": "2025-03-01T13:00:00Z", "delay": "1h"}`, "invalid_request", "delay",
			"delay: must be left out when run_at is set: give run_at (a time) or delay (a duration), not both"},
		{"delay without a unit", `{"delay": "90"}`, "invalid_request", "delay", "must be a duration such as 90s"},
		{"delay in words", `{"delay": "soon"}`, "invalid_request", "delay", "must be a duration such as 90s"},
		{"negative delay", `{"delay": "-5s"}`, "invalid_request", "delay", "without a sign"},
		{"delay beyond Go", `{"delay": "9999999999h"}`, "invalid_request", "delay", "must be a duration Go can hold"},
		{"delay as a number", `{"delay": 90}`, "invalid_request", "delay", "must be a string, not a JSON number"},
		{"run_at not a time", `{"run_at": "tomorrow"}`, "invalid_request", "run_at", "run_at must be an RFC 3339 time"},
		{"run_at without a zone", `{"run_at": "2025-03-01T13:00:00"}`, "invalid_request", "run_at", "run_at must be an RFC 3339 time"},
		{"run_at as a number", `{"run_at": 1740834000}`, "invalid_request", "run_at", "run_at must be an RFC 3339 time in quotes"},
		{"idempotency key and event id", `{"idempotency_key": "k", "event_id": "e"}`, "invalid_request", "event_id",
			"event_id: must be left out when idempotency_key is set"},
		{"idempotency key with a space", `{"idempotency_key": "order 42"}`, "invalid_request", "idempotency_key", "must not contain spaces"},
		{"empty idempotency key", `{"idempotency_key": ""}`, "", "", ""}, // empty means none: fired
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.do("POST", "/v1/tasks/nightly-report/runs", "application/json", strings.NewReader(tt.body))
			if tt.code == "" {
				if status != http.StatusAccepted {
					t.Errorf("status %d %v, want 202", status, body)
				}
				return
			}
			if status != http.StatusBadRequest {
				t.Fatalf("status %d %v, want 400", status, body)
			}
			er := errorOf(t, body)
			if msg, _ := er["message"].(string); er["code"] != tt.code || er["field"] != tt.field || !strings.Contains(msg, tt.message) {
				t.Errorf("error = %v, want code %s, field %q, message with %q", er, tt.code, tt.field, tt.message)
			}
		})
	}
	if n := e.triggers(); n != 1 {
		t.Errorf("AX_FIRINGS holds %d messages, want only the firing with an empty key", n)
	}
}

func TestFireDelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.NowFunc = time.Now })
	e.apply(echoTask)
	ctx := t.Context()
	top := streams.Default()
	stream, err := e.js.Stream(ctx, top.FiringsStream())
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(eventID string) (schemas.TriggerEvent, time.Time) {
		t.Helper()
		m, err := stream.GetLastMsgForSubject(ctx, top.SchedFiring("nightly-report", eventID))
		if err != nil {
			t.Fatalf("schedule of %s: %v", eventID, err)
		}
		if m.Header.Get("Nats-Schedule-Target") != "ax.fire.nightly-report.api" {
			t.Errorf("schedule target %q", m.Header.Get("Nats-Schedule-Target"))
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(m.Header.Get("Nats-Schedule"), "@at "))
		if err != nil {
			t.Fatalf("Nats-Schedule %q: %v", m.Header.Get("Nats-Schedule"), err)
		}
		ev, err := taskdef.ParseTriggerEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return ev, at
	}

	// A delay: a schedule due half a second early, carrying the due time.
	before := time.Now()
	res, err := e.client.Fire(ctx, "nightly-report", wire.FireRequest{EventID: "in-an-hour", Delay: "1h", Payload: json.RawMessage(`{"n": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.InstanceID != 0 || res.EventID != "in-an-hour" || res.Task != "nightly-report" ||
		res.RunAt.Before(before.Add(time.Hour)) || res.RunAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("Fire with a delay = %+v, want the event and a run_at an hour ahead", res)
	}
	ev, at := schedule("in-an-hour")
	if !ev.RunAt.Equal(res.RunAt) || ev.Delay != "" || ev.EventID != "in-an-hour" || string(ev.Payload) != `{"n":1}` {
		t.Errorf("scheduled firing = %+v, want run_at %v without a delay", ev, res.RunAt)
	}
	if want := res.RunAt.Add(-500 * time.Millisecond); !at.Equal(want) {
		t.Errorf("schedule @at %v, want %v (half a second early)", at, want)
	}

	// A run_at two days off: the schedule comes back after half the
	// stream's MaxAge (24h), before the stream would drop it.
	runAt := time.Now().Add(48 * time.Hour).UTC()
	before = time.Now()
	status, body := e.do("POST", "/v1/tasks/nightly-report/runs", "application/json",
		strings.NewReader(fmt.Sprintf(`{"event_id": "in-two-days", "run_at": %q}`, runAt.Format(time.RFC3339Nano))))
	if status != http.StatusAccepted || body["run_at"] != runAt.Format(time.RFC3339Nano) || body["instance_id"] != nil {
		t.Errorf("fire with run_at: %d %v, want 202 with run_at %s", status, body, runAt.Format(time.RFC3339Nano))
	}
	ev, at = schedule("in-two-days")
	if !ev.RunAt.Equal(runAt) || at.Before(before.Add(12*time.Hour)) || at.After(time.Now().Add(12*time.Hour)) {
		t.Errorf("schedule @at %v with run_at %v, want 12h from now and the due time", at, ev.RunAt)
	}

	// Due within a second: published at once with its run_at, for the
	// dispatcher to hold.
	res, err = e.client.Fire(ctx, "nightly-report", wire.FireRequest{EventID: "soon", Delay: "200ms"})
	if err != nil || res.RunAt.IsZero() {
		t.Fatalf("Fire soon = %+v, %v", res, err)
	}
	ev, hdr := e.lastTrigger("nightly-report")
	if ev.EventID != "soon" || !ev.RunAt.Equal(res.RunAt) || ev.Delay != "" || hdr.Get("Nats-Msg-Id") != "nightly-report/soon" {
		t.Errorf("published firing = %+v %v, want soon with run_at %v", ev, hdr, res.RunAt)
	}

	// A run_at in the past fires now, keeping it.
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	if _, err = e.client.Fire(ctx, "nightly-report", wire.FireRequest{EventID: "late", RunAt: past}); err != nil {
		t.Fatal(err)
	}
	if ev, _ := e.lastTrigger("nightly-report"); ev.EventID != "late" || !ev.RunAt.Equal(past) {
		t.Errorf("published firing = %+v, want late with run_at %v", ev, past)
	}
	if !strings.Contains(e.log.String(), `"message":"task fired with a delay"`) {
		t.Error("no log line for the delayed firing")
	}
}

func TestFireIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	// An instance the key made before (its payload is {"n":1}).
	id := e.insertInstance("nightly-report", "idem-order-42", schemas.StateSucceeded)

	status, body := e.do("POST", "/v1/tasks/nightly-report/runs", "application/json",
		strings.NewReader(`{"idempotency_key": "order-42", "payload": { "n" : 1.0 }}`))
	if status != http.StatusOK || body["instance_id"] != float64(id) || body["event_id"] != "idem-order-42" ||
		body["state"] != "SUCCEEDED" || body["existing"] != true {
		t.Errorf("same key and payload: %d %v, want 200 with instance %d", status, body, id)
	}
	res, err := e.client.Fire(t.Context(), "nightly-report", wire.FireRequest{IdempotencyKey: "order-42", Payload: json.RawMessage(`{"n": 2}`)})
	apiErr, ok := err.(*wire.Error)
	if !ok || apiErr.Status != http.StatusConflict || apiErr.Code != "idempotency_conflict" || apiErr.Field != "idempotency_key" ||
		!strings.Contains(apiErr.Message, fmt.Sprintf(`idempotency_key "order-42" of task "nightly-report" was used by instance %d with another payload`, id)) {
		t.Errorf("same key, other payload: %+v, %v; want 409 naming instance %d", res, err, id)
	}
	if n := e.triggers(); n != 0 {
		t.Errorf("repeated keys published %d messages, want none", n)
	}

	// A new key fires, with the key (not an event id) in the message.
	res, err = e.client.Fire(t.Context(), "nightly-report", wire.FireRequest{IdempotencyKey: "order-43"})
	if err != nil || res.EventID != "idem-order-43" || res.InstanceID != 0 {
		t.Fatalf("new key: %+v, %v", res, err)
	}
	ev, hdr := e.lastTrigger("nightly-report")
	if ev.IdempotencyKey != "order-43" || ev.EventID != "" || hdr.Get("Nats-Msg-Id") != "nightly-report/idem-order-43" {
		t.Errorf("published firing = %+v %v", ev, hdr)
	}
}
