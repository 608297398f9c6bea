package taskdef

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// TestPayloadSchemaBounds applies the schema that kept a core busy for
// minutes — 5,000 nested items, 45 KB — and others past the bounds: each
// is refused at once, naming payload_schema.
func TestPayloadSchemaBounds(t *testing.T) {
	t.Parallel()
	nested := func(n int) string {
		return strings.Repeat(`{"type":"array","items":`, n) + `{"type":"string"}` + strings.Repeat(`}`, n)
	}
	task := func(schema string) string {
		return `{"task_name":"x","execution":{"handler":"h"},"payload_schema":` + schema + `}`
	}
	var wide strings.Builder
	wide.WriteString(`{"type":"object","properties":{`)
	for i := range 3000 {
		if i > 0 {
			wide.WriteString(",")
		}
		fmt.Fprintf(&wide, `"field_%04d":{"type":"string"}`, i)
	}
	wide.WriteString(`}}`)
	for name, def := range map[string]string{
		"5,000 nested items":         task(nested(5000)),
		"one level too deep":         task(nested(MaxPayloadSchemaDepth)),
		"larger than 64 KiB":         task(wide.String()),
		"5,000 nested items in YAML": "task_name: x\nexecution: {handler: h}\npayload_schema: " + nested(5000) + "\n",
	} {
		_, err := ParseTask([]byte(def))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "payload_schema" {
			t.Errorf("%s: %v, want one problem with payload_schema", name, err)
			continue
		}
		// The bound's own message: the schema was refused before it reached
		// the JSON Schema compiler, whose time on such a schema is what the
		// bound prevents.
		if msg := ve.Problems[0].Message; !strings.Contains(msg, "more than 64 deep") && !strings.Contains(msg, "keep it to 65536 (64 KiB)") {
			t.Errorf("%s: refused with %q, not by the depth or size bound", name, msg)
		}
	}
	// At the bounds it compiles.
	if _, err := ParseTask([]byte(task(nested(MaxPayloadSchemaDepth - 1)))); err != nil {
		t.Errorf("a schema %d deep: %v", MaxPayloadSchemaDepth, err)
	}
}

// TestStrictInput feeds task definitions and trigger events what once gave
// a 500 or was taken silently: NUL characters (PostgreSQL stores none),
// repeated keys, and times from 1970 or year 1.
func TestStrictInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, def, field string
	}{
		{"NUL in owner", `{"task_name":"x","owner":"a\u0000b","execution":{"handler":"h"}}`, "owner"},
		{"NUL in description", `{"task_name":"x","description":"\u0000","execution":{"handler":"h"}}`, "description"},
		{"NUL in task_type", `{"task_name":"x","task_type":"etl\u0000","execution":{"handler":"h"}}`, "task_type"},
		{"NUL in YAML", "task_name: x\ntask_type: \"a\\0b\"\nexecution: {handler: h}\n", "task_type"},
		{"NUL deeper", `{"task_name":"x","execution":{"handler":"h"},"payload_schema":{"description":"\u0000"}}`, "payload_schema.description"},
		{"a repeated key", `{"task_name":"x","execution":{"handler":"h"},"task_name":"y"}`, "task_name"},
		{"a repeated nested key", `{"task_name":"x","execution":{"handler":"h","handler":"g"}}`, "execution.handler"},
		{"a repeated key in a list", `{"task_name":"x","execution":{"handler":"h"},"triggers":[{"type":"cron","schedule":"* * * * *","schedule":"0 * * * *"}]}`, "triggers[0].schedule"},
		{"a repeated key in YAML", "task_name: x\ntask_name: y\nexecution: {handler: h}\n", ""},
	} {
		_, err := ParseTask([]byte(c.def))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) == 0 || (c.field != "" && ve.Problems[0].Field != c.field) {
			t.Errorf("%s: %v, want a problem with %s", c.name, err, c.field)
		}
	}
	for _, c := range []struct {
		name, event, field string
	}{
		{"NUL in idempotency_key", `{"idempotency_key":"k\u0000"}`, "idempotency_key"},
		{"a control character in idempotency_key", `{"idempotency_key":"k\u0007"}`, "idempotency_key"},
		{"a repeated key", `{"event_id":"a","event_id":"b"}`, "event_id"},
		{"fired_at in 1970", `{"fired_at":"1970-01-01T00:00:00Z"}`, "fired_at"},
		{"run_at in 1970", `{"run_at":"1970-01-01T00:00:01Z"}`, "run_at"},
		{"run_at in year 1", `{"run_at":"0001-01-01T00:00:00+01:00"}`, "run_at"},
		{"fired_at in year 1", `{"fired_at":"0001-01-02T00:00:00Z"}`, "fired_at"},
	} {
		_, err := ParseTriggerEvent([]byte(c.event))
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) == 0 || ve.Problems[0].Field != c.field {
			t.Errorf("%s: %v, want a problem with %s", c.name, err, c.field)
		}
	}
	if _, err := ParseTriggerEvent([]byte(`{"fired_at":"2024-05-01T12:00:00Z","run_at":"2000-01-01T00:00:00Z","idempotency_key":"k-1"}`)); err != nil {
		t.Errorf("a firing of 2024 due in 2000: %v", err)
	}
}

func TestMaxNesting(t *testing.T) {
	t.Parallel()
	for data, want := range map[string]struct {
		depth int
		key   string
	}{
		`{"a":"{{[[","b":{"c":[1]}}`:  {3, "b"},
		`{"a\"{":{},"b":1}`:           {2, "a\\\"{"},
		`[[[]]]`:                      {3, ""},
		`{"x":[{"y":"\\"},{"z":[]}]}`: {4, "x"},
	} {
		if d, k := maxNesting([]byte(data)); d != want.depth || k != want.key {
			t.Errorf("maxNesting(%s) = %d, %q; want %d, %q", data, d, k, want.depth, want.key)
		}
	}
}
