package api_test

import (
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
	if took := time.Since(start); took > 5*time.Second {
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
