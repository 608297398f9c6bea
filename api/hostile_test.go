package api_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestApplyBoundsPayloadSchema applies a payload_schema of 5,000 nested
// items (45 KB), which once kept a core busy for minutes: it is refused at
// once with a 400 that names payload_schema.
func TestApplyBoundsPayloadSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	schema := strings.Repeat(`{"type":"array","items":`, 5000) + `{"type":"string"}` + strings.Repeat(`}`, 5000)
	start := time.Now()
	status, body := e.do("POST", "/v1/tasks", "application/json",
		strings.NewReader(`{"task_name":"deep","execution":{"handler":"builtin.echo"},"payload_schema":`+schema+`}`))
	// Minutes are the fault; a loaded machine with the race detector can
	// take seconds over a 45 KB body, which is no fault.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("answered after %s", took)
	}
	if status != 400 {
		t.Fatalf("status %d %v, want 400", status, body)
	}
	er := errorOf(t, body)
	problems, _ := er["problems"].([]any)
	if er["code"] != "invalid_task" || len(problems) != 1 || problems[0].(map[string]any)["field"] != "payload_schema" ||
		!strings.Contains(problems[0].(map[string]any)["message"].(string), "64 deep") {
		t.Errorf("error = %v, want invalid_task naming payload_schema and its bound", er)
	}
}

// TestUnstorableInput sends what once gave a 500 or was taken silently:
// NUL characters and bytes that are not UTF-8 in fields and query
// parameters, factor=NaN, repeated keys and firings back-dated to 1970.
// Each is a 400 that names its field.
func TestUnstorableInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "e-1", "RUNNING")
	task := func(field string) string {
		return `{"task_name":"other","execution":{"handler":"builtin.echo"},` + field + `}`
	}
	for _, c := range []struct {
		name, method, path, body, code, field string
	}{
		{"NUL in owner", "POST", "/v1/tasks", task(`"owner":"a\u0000"`), "invalid_task", "owner"},
		{"NUL in description", "POST", "/v1/tasks", task(`"description":"\u0000"`), "invalid_task", "description"},
		{"NUL in task_type", "POST", "/v1/tasks", task(`"task_type":"etl\u0000"`), "invalid_task", "task_type"},
		{"a repeated key in a task", "POST", "/v1/tasks", task(`"owner":"a","owner":"b"`), "duplicate_key", "owner"},
		{"NUL in idempotency_key", "POST", "/v1/tasks/nightly-report/runs", `{"idempotency_key":"k\u0000"}`, "invalid_request", "idempotency_key"},
		{"a repeated key in a firing", "POST", "/v1/tasks/nightly-report/runs", `{"idempotency_key":"a","idempotency_key":"b"}`, "duplicate_key", "idempotency_key"},
		{"run_at in 1970", "POST", "/v1/tasks/nightly-report/runs", `{"run_at":"1970-01-01T00:00:00Z"}`, "invalid_request", "run_at"},
		{"run_at in year 1", "POST", "/v1/tasks/nightly-report/runs", `{"run_at":"0001-01-01T00:00:00+01:00"}`, "invalid_request", "run_at"},
		{"NUL in a cancel reason", "POST", fmt.Sprintf("/v1/instances/%d/cancel", id), `{"reason":"a\u0000"}`, "", "reason"},
		{"NUL in a token name", "POST", "/v1/tokens", `{"name":"ci\u0000","role":"viewer"}`, "", "name"},
		{"NUL in a query parameter", "GET", "/v1/instances?task=a%00", "", "invalid_parameter", "task"},
		{"non-UTF-8 in a query parameter", "GET", "/v1/audit?operator=%ff", "", "invalid_parameter", "operator"},
		{"NUL in the path", "GET", "/v1/tasks/a%00b", "", "", ""},
		{"factor=NaN", "GET", "/v1/reports/health?factor=NaN", "", "invalid_parameter", "factor"},
	} {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		status, got := e.do(c.method, c.path, "application/json", body)
		if status != 400 {
			t.Errorf("%s: status %d %v, want 400", c.name, status, got)
			continue
		}
		er := errorOf(t, got)
		field, _ := er["field"].(string)
		if problems, _ := er["problems"].([]any); field == "" && len(problems) > 0 {
			field, _ = problems[0].(map[string]any)["field"].(string)
		}
		if (c.code != "" && er["code"] != c.code) || field != c.field {
			t.Errorf("%s: error %v, want code %q naming %q", c.name, er, c.code, c.field)
		}
	}
}
