package taskdef

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

var triggerAccepts = []struct {
	name string
	in   string
	want schemas.TriggerEvent
}{
	{"empty body", "", schemas.TriggerEvent{}},
	{"blank body", " \r\n", schemas.TriggerEvent{}},
	{"empty object", "{}", schemas.TriggerEvent{}},
	{"full", `{
		"event_id": "order-42",
		"task": "ship-order",
		"source": "manual",
		"operator": "alice@example.com",
		"payload": {"order": 42},
		"payload_version": 2,
		"priority": "urgent",
		"fired_at": "2024-05-01T12:00:00.5Z",
		"retry": {"instance_id": 7, "attempt": 2}
	}`, schemas.TriggerEvent{
		EventID: "order-42", Task: "ship-order", Source: schemas.SourceManual, Operator: "alice@example.com",
		Payload: json.RawMessage(`{"order": 42}`), PayloadVersion: 2, Priority: schemas.PriorityUrgent,
		FiredAt: time.Date(2024, 5, 1, 12, 0, 0, 5e8, time.UTC), Retry: &schemas.RetryOf{InstanceID: 7, Attempt: 2},
	}},
	{"payload string", `{"payload":"hello"}`, schemas.TriggerEvent{Payload: json.RawMessage(`"hello"`)}},
	{"payload null", `{"payload":null}`, schemas.TriggerEvent{Payload: json.RawMessage(`null`)}},
	{"source event", `{"source":"event"}`, schemas.TriggerEvent{Source: schemas.SourceEvent}},
	{"source retry", `{"source":"retry"}`, schemas.TriggerEvent{Source: schemas.SourceRetry}},
	{"priority low", `{"priority":"low"}`, schemas.TriggerEvent{Priority: schemas.PriorityLow}},
	{"event_id 200 chars", `{"event_id":"` + strings.Repeat("e", 200) + `"}`, schemas.TriggerEvent{EventID: strings.Repeat("e", 200)}},
	{"event_id with punctuation", `{"event_id":"cron:nightly@2024-05-01T00:00:00Z"}`, schemas.TriggerEvent{EventID: "cron:nightly@2024-05-01T00:00:00Z"}},
	{"fired_at with offset", `{"fired_at":"2024-05-01T14:00:00+02:00"}`, schemas.TriggerEvent{FiredAt: time.Date(2024, 5, 1, 14, 0, 0, 0, time.FixedZone("", 2*3600))}},
	{"delayed by key", `{"idempotency_key":"order-42","delay":"1h30m","payload":{"order":42}}`,
		schemas.TriggerEvent{IdempotencyKey: "order-42", Delay: "1h30m", Payload: json.RawMessage(`{"order":42}`)}},
	{"delay fractions", `{"delay":"1.5s"}`, schemas.TriggerEvent{Delay: "1.5s"}},
	{"delay zero", `{"delay":"0"}`, schemas.TriggerEvent{Delay: "0"}},
	{"run_at", `{"run_at":"2024-05-01T12:00:00.25Z","reason":"rerun of instance 7"}`,
		schemas.TriggerEvent{RunAt: time.Date(2024, 5, 1, 12, 0, 0, 25e7, time.UTC), Reason: "rerun of instance 7"}},
}

func TestParseTriggerEventAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range triggerAccepts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTriggerEvent([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseTriggerEvent: %v", err)
			}
			if !got.FiredAt.Equal(tc.want.FiredAt) {
				t.Errorf("FiredAt = %v, want %v", got.FiredAt, tc.want.FiredAt)
			}
			got.FiredAt, tc.want.FiredAt = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseTriggerEvent =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

var triggerRejects = []struct {
	name, in, field, msg string
}{
	{"not json", `event_id: x`, "", "is not valid JSON: invalid character 'e' looking for beginning of value, at line 1, column 1"},
	{"truncated", `{"event_id":"x"`, "", "is not valid JSON: it ends too early"},
	{"two values", `{} {}`, "", "unexpected data after the top-level value"},
	{"array", `[]`, "", "must be an object, not a list"},
	{"null", `null`, "", "must be an object, not null"},
	{"unknown field", `{"event_id":"x","eventId":"y"}`, "", `unknown field "eventId"; remove it (allowed: cancel, delay, event_id, fired_at, idempotency_key, operator, parents, payload, payload_version, priority, reason, retry, run_at, run_id, source, task)`},
	{"event_id empty", `{"event_id":""}`, "event_id", "must not be empty"},
	{"event_id space", `{"event_id":"a b"}`, "event_id", "must not contain spaces, tabs or line breaks"},
	{"event_id newline", `{"event_id":"a\nb"}`, "event_id", "must not contain spaces"},
	{"event_id 201 chars", `{"event_id":"` + strings.Repeat("e", 201) + `"}`, "event_id", "must be at most 200 characters long (it has 201)"},
	{"event_id number", `{"event_id":42}`, "event_id", "must be a string, not a number"},
	{"task invalid", `{"task":"Ship Order"}`, "task", "must be a task name"},
	{"source unknown", `{"source":"timer"}`, "source", "must be one of event, manual, retry, cron"},
	{"operator too long", `{"operator":"` + strings.Repeat("o", 257) + `"}`, "operator", "must be at most 256 characters long"},
	{"priority unknown", `{"priority":"high"}`, "priority", "must be one of urgent, normal, low"},
	{"payload_version zero", `{"payload_version":0}`, "payload_version", "must be at least 1"},
	{"payload_version string", `{"payload_version":"2"}`, "payload_version", "must be a whole number, not a string"},
	{"fired_at not a time", `{"fired_at":"yesterday"}`, "fired_at", "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"},
	{"fired_at no zone", `{"fired_at":"2024-05-01T12:00:00"}`, "fired_at", "must be an RFC 3339 time"},
	{"fired_at leap second", `{"fired_at":"2024-06-30T23:59:60Z"}`, "fired_at", "must be an RFC 3339 time"},
	{"fired_at unix", `{"fired_at":1714564800}`, "fired_at", "must be a string, not a number"},
	{"retry not an object", `{"retry":2}`, "retry", "must be an object, not a number"},
	{"retry instance missing", `{"retry":{"attempt":2}}`, "retry.instance_id", "is required"},
	{"retry attempt missing", `{"retry":{"instance_id":1}}`, "retry.attempt", "is required"},
	{"retry instance zero", `{"retry":{"instance_id":0,"attempt":2}}`, "retry.instance_id", "must be at least 1"},
	{"retry attempt zero", `{"retry":{"instance_id":1,"attempt":0}}`, "retry.attempt", "must be at least 1"},
	{"retry unknown field", `{"retry":{"instance_id":1,"attempt":2,"reason":"x"}}`, "retry", `unknown field "reason"; remove it (allowed: attempt, instance_id)`},
	{"run_at and delay", `{"run_at":"2024-05-01T12:00:00Z","delay":"90s"}`, "delay", "must be left out when run_at is set: give run_at (a time) or delay (a duration), not both"},
	{"run_at not a time", `{"run_at":"in an hour"}`, "run_at", "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"},
	{"run_at leap second", `{"run_at":"2024-06-30T23:59:60Z"}`, "run_at", "must be an RFC 3339 time"},
	{"delay no unit", `{"delay":"90"}`, "delay", "must be a duration such as 90s, 15m, 1h30m or 250ms"},
	{"delay negative", `{"delay":"-5s"}`, "delay", "must be a duration such as 90s"},
	{"delay words", `{"delay":"2 hours"}`, "delay", "must be a duration such as 90s"},
	{"delay too long", `{"delay":"9999999999h"}`, "delay", "must be a duration Go can hold"},
	{"delay number", `{"delay":90}`, "delay", "must be a string, not a number"},
	{"idempotency_key and event_id", `{"idempotency_key":"k","event_id":"e"}`, "event_id", "must be left out when idempotency_key is set: the firing's event id is then idem-<idempotency_key>"},
	{"idempotency_key empty", `{"idempotency_key":""}`, "idempotency_key", "must not be empty"},
	{"idempotency_key space", `{"idempotency_key":"order 42"}`, "idempotency_key", "must not contain spaces"},
	{"idempotency_key 196 chars", `{"idempotency_key":"` + strings.Repeat("k", 196) + `"}`, "idempotency_key", "must be at most 195 characters long (it has 196)"},
}

func TestParseTriggerEventRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range triggerRejects {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := ParseTriggerEvent([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseTriggerEvent accepted %s as %+v", tc.in, ev)
			}
			requireProblem(t, err, "trigger event", tc.field, tc.msg)
		})
	}
}
