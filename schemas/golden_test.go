package schemas

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenMessage is a wire message, fully populated, with its golden file
// (testdata/golden/<name>.json) and the schema it satisfies.
type goldenMessage struct {
	name   string
	schema string // a location in JSONSchemas, "<file>#<JSON pointer>"
	value  any
}

// golden lists every wire message of messages.go.
var golden = []goldenMessage{
	{"trigger_event", "trigger.schema.json#", &TriggerEvent{
		EventID:        "cron:nightly-report:2024-05-01T02:00:00Z",
		Task:           "nightly-report",
		Source:         SourceRetry,
		Operator:       "alice@example.com",
		Payload:        json.RawMessage(`{"day":"2024-04-30","regions":["eu","us"]}`),
		PayloadVersion: 2,
		Priority:       PriorityUrgent,
		FiredAt:        goldenTime(0),
		Retry:          &RetryOf{InstanceID: 4711, Attempt: 3},
		Cancel:         &CancelOf{InstanceID: 4711, Reason: "superseded by a manual run"},
		Reason:         "misfire catch_up: missed tick fired late (3 of 7 missed ticks fired, oldest first)",
		IdempotencyKey: "order-42",
		RunAt:          goldenTime(90 * time.Minute),
		Delay:          "1h30m",
		RunID:          "run-4700",
		Parents:        goldenParents,
	}},
	{"retry_of", "trigger.schema.json#/$defs/retry_of", &RetryOf{InstanceID: 4711, Attempt: 3}},
	{"dispatch", "json/dispatch.schema.json#", &Dispatch{
		InstanceID:    4711,
		Task:          "nightly-report",
		TaskVersion:   5,
		Handler:       "reports.nightly",
		Attempt:       3,
		MaxAttempts:   5,
		EventID:       "cron:nightly-report:2024-05-01T02:00:00Z",
		Priority:      PriorityUrgent,
		Pool:          "eu+gpu",
		Payload:       json.RawMessage(`{"day":"2024-04-30","regions":["eu","us"]}`),
		TimeoutMS:     600000,
		MutexTemplate: "report-{{.day}}",
		FiredAt:       goldenTime(0),
		DispatchedAt:  goldenTime(90 * time.Second),
		RunID:         "run-4700",
		Parents:       goldenParents,
		ShardIndex:    2,
		ShardCount:    4,
		Protocol:      2,
		ReportBatches: true,
		Republished:   true,
		Slots:         4,
	}},
	{"report", "json/report.schema.json#", &Report{
		InstanceID:   4711,
		Attempt:      3,
		WorkerID:     "worker-eu-1",
		Kind:         ReportFailed,
		At:           goldenTime(5 * time.Minute),
		StartedAt:    goldenTime(91 * time.Second),
		Output:       json.RawMessage(`{"rows":1200}`),
		Error:        "upload report: connection reset by peer",
		Permanent:    true,
		RetryAfterMS: 60000,
		Traceparent:  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}},
	{"report_progress", "json/report.schema.json#", &Report{
		InstanceID: 4711,
		Attempt:    3,
		WorkerID:   "worker-eu-1",
		Kind:       ReportProgress,
		At:         goldenTime(2 * time.Minute),
		StartedAt:  goldenTime(91 * time.Second),
		Progress:   &Progress{Done: 420, Total: 1200, Message: "uploading region eu"},
	}},
	{"report_batch", "json/report_batch.schema.json#", &ReportBatch{Reports: []Report{{
		InstanceID: 4711,
		Attempt:    3,
		WorkerID:   "worker-eu-1",
		Kind:       ReportSucceeded,
		At:         goldenTime(5 * time.Minute),
		StartedAt:  goldenTime(91 * time.Second),
		Output:     json.RawMessage(`{"rows":1200}`),
	}, {
		InstanceID: 4712,
		Attempt:    1,
		WorkerID:   "worker-eu-1",
		Kind:       ReportFailed,
		At:         goldenTime(5 * time.Minute),
		StartedAt:  goldenTime(4 * time.Minute),
		Error:      "upload report: connection reset by peer",
	}}}},
	{"worker", "json/worker.schema.json#", &Worker{
		ID:          "worker-eu-1",
		Hostname:    "eu-host-7",
		Version:     "1.4.0",
		Pools:       []string{"default", "eu+gpu"},
		Handlers:    []string{"builtin.echo", "reports.nightly"},
		Slots:       8,
		Busy:        3,
		StartedAt:   goldenTime(-time.Hour),
		HeartbeatAt: goldenTime(10 * time.Second),
		Protocol:    2,
	}},
	{"lease", "json/lease.schema.json#", &Lease{
		InstanceID: 4711,
		Attempt:    3,
		WorkerID:   "worker-eu-1",
		AcquiredAt: goldenTime(91 * time.Second),
	}},
	{"control", "json/control.schema.json#", &Control{
		Action:     ControlCancel,
		InstanceID: 4711,
		Attempt:    3,
		Reason:     "cancelled by alice@example.com",
	}},
	{"fence_question", "json/fence_question.schema.json#", &FenceQuestion{
		InstanceID: 4711,
		Attempt:    3,
		WorkerID:   "worker-eu-1",
	}},
	{"fence_answer", "json/fence_answer.schema.json#", &FenceAnswer{
		Start:  true,
		Reason: "attempt 3 never ran: the instance is DISPATCHED at attempt 3 and no lease of it was seen",
	}},
	{"task_entry", "json/task_entry.schema.json#", &TaskEntry{Version: 5, Enabled: true}},
	{"log_line", "json/log_line.schema.json#", &LogLine{
		InstanceID: 4711,
		Task:       "nightly-report",
		Attempt:    3,
		WorkerID:   "worker-eu-1",
		Level:      "warn",
		Message:    "upload slow; retrying",
		Time:       goldenTime(2 * time.Minute),
		Fields:     json.RawMessage(`{"region":"eu","rows":1200,"error":"connection reset by peer"}`),
	}},
	{"audit_record", "json/audit.schema.json#", &AuditRecord{
		ID:          "o-4242",
		Kind:        AuditAction,
		Task:        "nightly-report",
		InstanceID:  4711,
		From:        StateRunning,
		To:          StateCancelled,
		Attempt:     3,
		Action:      ActionCancel,
		Operator:    "alice@example.com",
		Reason:      "wrong day",
		Details:     json.RawMessage(`{"worker_id":"worker-eu-1"}`),
		At:          goldenTime(5 * time.Minute),
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		FiredAt:     goldenTime(0),
		StartedAt:   goldenTime(91 * time.Second),
	}},
	{"transition", "json/transition.schema.json#", &Transition{
		ID:         90210,
		InstanceID: 4711,
		Task:       "nightly-report",
		From:       StateRunning,
		To:         StateRetrying,
		Attempt:    3,
		Operator:   "dispatcher",
		Reason:     "lease expired",
		At:         goldenTime(5 * time.Minute),
	}},
	{"instance", "json/instance.schema.json#", &Instance{
		ID:          4711,
		Task:        "nightly-report",
		TaskVersion: 5,
		EventID:     "cron:nightly-report:2024-05-01T02:00:00Z",
		Source:      SourceEvent,
		State:       StateSucceeded,
		Attempt:     3,
		MaxAttempts: 5,
		Priority:    PriorityNormal,
		Pool:        "eu+gpu",
		WorkerID:    "worker-eu-1",
		Payload:     json.RawMessage(`{"day":"2024-04-30","regions":["eu","us"]}`),
		Output:      json.RawMessage(`{"rows":1200}`),
		Error:       "upload report: connection reset by peer",
		FiredAt:     goldenTime(0),
		CreatedAt:   goldenTime(time.Second),
		StartedAt:   ptr(goldenTime(91 * time.Second)),
		FinishedAt:  ptr(goldenTime(6 * time.Minute)),
		RunID:       "run-4700",
		Parents:     goldenParents,
		Transitions: []Transition{
			{ID: 90001, InstanceID: 4711, Task: "nightly-report", From: "", To: StateCreated, Attempt: 0, Operator: "dispatcher", At: goldenTime(time.Second)},
			{ID: 90002, InstanceID: 4711, Task: "nightly-report", From: StateCreated, To: StateDispatched, Attempt: 1, Operator: "dispatcher", Reason: "pool eu+gpu", At: goldenTime(2 * time.Second)},
		},
		Events: []InstanceEvent{
			{Kind: "stale_succeeded", Attempt: 1, Operator: "worker:worker-eu-2", Reason: "succeeded report of attempt 1 refused: the instance is SUCCEEDED at attempt 3", At: goldenTime(7 * time.Minute)},
		},
		Progress: &InstanceProgress{Attempt: 3, Done: 1200, Total: 1200, Message: "uploaded", At: goldenTime(5 * time.Minute)},
		Archived: true,
		Wait: &Wait{Kind: WaitUnservedPool, Reason: "no live worker of pool \"eu\" has registered handler \"report\"",
			Ends: "start an executor with --pool eu that registers handler report", Since: goldenTime(2 * time.Second)},
		Attempts: []AttemptRun{{Attempt: 3, StartedAt: ptr(goldenTime(91 * time.Second)), EndedAt: ptr(goldenTime(6 * time.Minute)),
			Worker: "worker-eu-2", State: StateSucceeded, Error: "", DurationMS: ptr(int64(269000))}},
	}},
}

// goldenParents are the parents of a chained task in the golden messages.
var goldenParents = map[string]ParentResult{
	"extract": {InstanceID: 4700, State: StateSucceeded, Output: json.RawMessage(`{"rows":1200}`)},
	"notify":  {InstanceID: 4701, State: StateFailed},
}

// goldenTime is a fixed instant plus d, with fractions of a second to show
// that they survive the wire.
func goldenTime(d time.Duration) time.Time {
	return time.Date(2024, 5, 1, 2, 0, 0, 123456789, time.UTC).Add(d)
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".json") }

// TestGolden compares each message's encoding with its golden file, so that
// any change of the wire format shows in review. Run `go test ./schemas
// -update` to rewrite the files after an intended change.
func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			got, err := json.MarshalIndent(g.value, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := goldenPath(g.name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./schemas -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the encoding of %T differs from %s (run go test ./schemas -update if the change is intended):\ngot:\n%s\nwant:\n%s", g.value, path, got, want)
			}
		})
	}
}

// TestGoldenDecodes decodes each golden file strictly back into its type and
// expects the value it was written from.
func TestGoldenDecodes(t *testing.T) {
	t.Parallel()
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(goldenPath(g.name))
			if err != nil {
				t.Fatal(err)
			}
			got := reflect.New(reflect.TypeOf(g.value).Elem())
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(got.Interface()); err != nil {
				t.Fatalf("decode %s: %v", goldenPath(g.name), err)
			}
			compactRaw(got)
			if !reflect.DeepEqual(got.Interface(), g.value) {
				t.Errorf("%s decodes to\n%+v\nwant\n%+v", goldenPath(g.name), got.Elem().Interface(), reflect.ValueOf(g.value).Elem().Interface())
			}
		})
	}
}

// compactRaw compacts every json.RawMessage inside v: an indented golden
// file keeps the indentation inside raw values.
func compactRaw(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			compactRaw(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			compactRaw(v.Field(i))
		}
	case reflect.Map:
		// Map values are not addressable: compact a copy and put it back.
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			compactRaw(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Slice:
		if v.Type() == rawType {
			if v.Len() > 0 {
				var b bytes.Buffer
				if err := json.Compact(&b, v.Bytes()); err == nil {
					v.SetBytes(b.Bytes())
				}
			}
			return
		}
		for i := range v.Len() {
			compactRaw(v.Index(i))
		}
	}
}

// TestEverySchemaHasGolden keeps the golden list and the schemas in step.
func TestEverySchemaHasGolden(t *testing.T) {
	t.Parallel()
	entries, err := JSONSchemas.ReadDir("json")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		loc := "json/" + e.Name() + "#"
		if !slices.ContainsFunc(golden, func(g goldenMessage) bool {
			return g.schema == loc
		}) {
			t.Errorf("schema %s has no golden message", e.Name())
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if !slices.ContainsFunc(golden, func(g goldenMessage) bool {
			return g.name == name
		}) {
			t.Errorf("golden file %s belongs to no message; remove it", f)
		}
	}
}

// TestGoldenFullyPopulated keeps every field of every wire type set in one
// of its golden messages, so that each field's encoding is pinned down. A
// type whose fields exclude one another (a progress report carries no
// output) has a golden message per kind.
func TestGoldenFullyPopulated(t *testing.T) {
	t.Parallel()
	set := make(map[reflect.Type]map[int]bool)
	for _, g := range golden {
		v := reflect.ValueOf(g.value).Elem()
		if set[v.Type()] == nil {
			set[v.Type()] = make(map[int]bool)
		}
		for i := range v.NumField() {
			if !v.Field(i).IsZero() {
				set[v.Type()][i] = true
			}
		}
	}
	for typ, fields := range set {
		for i := range typ.NumField() {
			// A field that is never encoded has no encoding to pin down.
			if typ.Field(i).Tag.Get("json") == "-" {
				continue
			}
			if !fields[i] {
				t.Errorf("no golden %s sets %s", typ.Name(), typ.Field(i).Name)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

var rawType = reflect.TypeFor[json.RawMessage]()
