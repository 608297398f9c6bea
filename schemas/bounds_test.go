package schemas

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
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
		start := time.Now()
		_, err := ParseTask([]byte(def))
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: refused after %s", name, took)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "payload_schema" {
			t.Errorf("%s: %v, want one problem with payload_schema", name, err)
		}
	}
	// At the bounds it compiles.
	if _, err := ParseTask([]byte(task(nested(MaxPayloadSchemaDepth - 1)))); err != nil {
		t.Errorf("a schema %d deep: %v", MaxPayloadSchemaDepth, err)
	}
}
