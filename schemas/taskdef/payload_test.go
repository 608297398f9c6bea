package taskdef

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	const order = `{
		"type": "object",
		"required": ["order"],
		"properties": {
			"order": {
				"type": "object",
				"additionalProperties": false,
				"required": ["id"],
				"properties": {
					"id": {"type": "integer", "minimum": 1},
					"email": {"type": "string", "format": "email"},
					"lines": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/line"}},
					"ship by": {"type": "string", "format": "date"}
				}
			}
		},
		"$defs": {"line": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}}}}
	}`
	for _, tc := range []struct {
		name            string
		schema, payload string
		field, msg      string // empty: the payload is valid
	}{
		{"no schema", ``, `{"anything": true}`, "", ""},
		{"null schema", `null`, `1`, "", ""},
		{"valid", order, `{"order":{"id":1,"email":"a@example.com","lines":[{"sku":"ABC"}],"ship by":"2024-05-01"}}`, "", ""},
		{"true schema", `true`, `[1,2]`, "", ""},
		{"false schema", `false`, `{}`, "payload", "is not allowed here"},
		{"missing payload", order, ``, "payload", "must be an object, not null"},
		{"missing field", order, `{}`, "payload.order", "is required"},
		{"nested missing field", order, `{"order":{}}`, "payload.order.id", "is required"},
		{"nested type", order, `{"order":{"id":"x"}}`, "payload.order.id", "must be a whole number, not a string"},
		{"nested minimum", order, `{"order":{"id":0}}`, "payload.order.id", "must be at least 1"},
		{"format", order, `{"order":{"id":1,"email":"nope"}}`, "payload.order.email", "must be a valid email"},
		{"array item via ref", order, `{"order":{"id":1,"lines":[{"sku":"ABC"},{"sku":"abc"}]}}`, "payload.order.lines[1].sku", "must match ^[A-Z]{3}$"},
		{"array length", order, `{"order":{"id":1,"lines":[{"sku":"ABC"},{"sku":"ABD"},{"sku":"ABE"}]}}`, "payload.order.lines", "must have at most 2 items (it has 3)"},
		{"odd key", order, `{"order":{"id":1,"ship by":"soon"}}`, `payload.order["ship by"]`, "must be a date such as 2024-05-01"},
		{"unknown field", order, `{"order":{"id":1,"colour":"red"}}`, "payload.order", `unknown field "colour"; remove it (allowed: email, id, lines, ship by)`},
		{"malformed payload", order, `{"order":`, "payload", "is not valid JSON: it ends too early"},
		{"one of", `{"oneOf":[{"type":"integer"},{"type":"number"}]}`, `1`, "payload", "matches more than one of the allowed forms"},
		{"any of", `{"anyOf":[{"type":"integer"},{"type":"boolean"}]}`, `"x"`, "payload", "must be a whole number, not a string"},
		{"property names", `{"propertyNames":{"maxLength":2}}`, `{"abc":1}`, "payload", `has a field name "abc" that is not allowed: it must be at most 2 characters long`},
		{"dependent required", `{"dependentRequired":{"a":["b"]}}`, `{"a":1}`, "payload.b", `is required when "a" is set`},
		{"const", `{"const":"x"}`, `"y"`, "payload", "must be x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidatePayload(json.RawMessage(tc.schema), json.RawMessage(tc.payload))
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("ValidatePayload: %v", err)
				}
				return
			}
			requireProblem(t, err, "payload", tc.field, tc.msg)
		})
	}
}

func TestValidatePayloadBadSchema(t *testing.T) {
	t.Parallel()
	err := ValidatePayload(json.RawMessage(`{"type":`), json.RawMessage(`1`))
	var verr *schemas.ValidationError
	if err == nil || errors.As(err, &verr) {
		t.Fatalf("ValidatePayload with a broken schema = %v, want a plain error", err)
	}
	if !strings.HasPrefix(err.Error(), "compile payload schema: ") {
		t.Errorf("error %q does not name the operation", err)
	}
}
