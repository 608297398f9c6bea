package taskdef

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// sameAsSchemaPath fails the test when the fast path accepts data and the
// full path does not, or reads it otherwise. It reports whether the fast
// path took it.
func sameAsSchemaPath(t *testing.T, data []byte) bool {
	t.Helper()
	fast, ok := schemas.ParseCanonicalTriggerEvent(data)
	if !ok {
		return false
	}
	full, err := parseTriggerEventBySchema(data)
	if err != nil {
		t.Fatalf("the fast path accepts %s, the schema refuses it: %v", data, err)
	}
	if !reflect.DeepEqual(fast, full) {
		t.Fatalf("%s: the fast path reads\n%+v\nthe schema path\n%+v", data, fast, full)
	}
	return true
}

func TestTheEventsAXEncodesTakeTheFastPath(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 0, 30, 0, 123456789, time.UTC)
	for _, ev := range []schemas.TriggerEvent{
		{EventID: "bench-17", FiredAt: time.Now()},
		{EventID: "retry-92-2", Task: "t", Source: schemas.SourceRetry, FiredAt: at, Retry: &schemas.RetryOf{InstanceID: 92, Attempt: 2}},
		{EventID: schemas.CronEventID("nightly", 0, at), Source: schemas.SourceCron, FiredAt: at, Reason: "misfire catch_up: tick 1 of 3"},
		{EventID: "order-42", Source: schemas.SourceManual, Operator: "alice@example.com", Payload: json.RawMessage(`{"order":42}`),
			PayloadVersion: 2, Priority: schemas.PriorityUrgent, FiredAt: at.In(time.FixedZone("", 3600)), RunID: "run-7"},
		{IdempotencyKey: "order-42", RunAt: at, Payload: json.RawMessage(`null`)},
	} {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !sameAsSchemaPath(t, data) {
			t.Errorf("%s took the full path", data)
		}
	}
}

func TestTheFastPathAcceptsOnlyWhatTheSchemaAccepts(t *testing.T) {
	t.Parallel()
	var corpus [][]byte
	for _, tc := range triggerAccepts {
		corpus = append(corpus, []byte(tc.in))
		if ev, err := ParseTriggerEvent([]byte(tc.in)); err == nil {
			data, _ := json.Marshal(ev)
			corpus = append(corpus, data)
		}
	}
	for _, tc := range triggerRejects {
		corpus = append(corpus, []byte(tc.in))
	}
	for _, seed := range triggerFuzzSeeds {
		corpus = append(corpus, []byte(seed))
	}
	for _, data := range corpus {
		sameAsSchemaPath(t, data)
	}

	// Encodings of events the schema or the code refuses: the fast path
	// leaves each to the full path, which says what is wrong.
	at := time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC)
	for _, ev := range []schemas.TriggerEvent{
		{EventID: "two words"},
		{EventID: strings.Repeat("é", 201)},
		{Task: "Ship"},
		{Task: strings.Repeat("t", 65)},
		{Source: "robot"},
		{Priority: "high"},
		{PayloadVersion: -1},
		{Operator: strings.Repeat("ö", 257)},
		{Reason: strings.Repeat("r", 1025)},
		{IdempotencyKey: "a\tb"},
		{IdempotencyKey: strings.Repeat("k", 196)},
		{RunID: "run 7"},
		{Retry: &schemas.RetryOf{InstanceID: 0, Attempt: 1}},
		{Retry: &schemas.RetryOf{InstanceID: 1, Attempt: 0}},
		{EventID: "e", IdempotencyKey: "k"},
		{FiredAt: time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)},
		{EventID: "nul\x00"},
		{Payload: json.RawMessage(`{"note":"\u0000"}`)},
		{RunAt: at, Delay: "1s"},
	} {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := schemas.ParseCanonicalTriggerEvent(data); ok {
			t.Errorf("the fast path accepts %s", data)
		}
		if _, err := ParseTriggerEvent(data); err == nil {
			t.Errorf("ParseTriggerEvent accepts %s", data)
		}
	}
}
