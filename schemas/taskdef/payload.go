package taskdef

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/ax-scheduler/ax/schemas"
)

// Bounds of a task's payload_schema. Compiling a schema and checking the
// metaschema against it take time and memory that grow faster than its
// nesting (5,000 nested "items" kept a core busy for minutes), so a schema
// deeper or larger than these is refused before it is compiled.
const (
	// MaxPayloadSchemaDepth is the deepest nesting of objects and arrays
	// inside payload_schema.
	MaxPayloadSchemaDepth = 64
	// MaxPayloadSchemaBytes is the largest payload_schema, compacted.
	MaxPayloadSchemaBytes = 64 << 10
)

// hasRefCycle reports whether a validation error's tree holds a $ref cycle.
func hasRefCycle(err error) bool {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return false
	}
	if _, ok := verr.ErrorKind.(*kind.RefCycle); ok {
		return true
	}
	return slices.ContainsFunc(verr.Causes, func(c *jsonschema.ValidationError) bool { return hasRefCycle(c) })
}

// ValidatePayload checks payload against a task's payload_schema. An empty
// (or null) schema accepts everything; an empty payload is checked as JSON
// null. A payload that does not satisfy the schema is a *[schemas.ValidationError]
// whose fields are paths inside the payload ("payload.order.id"); a schema
// that does not compile (ParseTask rejects those) is a plain error. Formats
// ("date-time", "email", …) are asserted, and a $ref may only point inside
// the schema. Compiled schemas are cached; it is safe for concurrent use.
func ValidatePayload(schema, payload json.RawMessage) error {
	const what = "payload"
	if s := bytes.TrimSpace(schema); len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return nil
	}
	sch, err := payloadSchemas.get(schema)
	if err != nil {
		return fmt.Errorf("compile payload schema: %w", err)
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	doc, problem := decodeJSON(payload)
	if problem != nil {
		problem.Field = strings.TrimSuffix("payload."+problem.Field, ".")
		return newValidationError(what, []schemas.Problem{*problem})
	}
	if err := sch.Validate(doc); err != nil {
		t := translator{docs: map[string]any{payloadSchemaURL: sch.doc}}
		return newValidationError(what, t.problems(err, doc, "payload"))
	}
	return nil
}

// compiledPayload is a compiled payload schema and its document, where the
// error messages look up x-message annotations.
type compiledPayload struct {
	*jsonschema.Schema
	doc any
}

// payloadCache holds compiled payload schemas by their bytes. A task has one
// schema per version, so the cache stays small; past maxEntries it restarts.
type payloadCache struct {
	mu      sync.Mutex
	entries map[string]compiledPayload
}

const payloadCacheMaxEntries = 512

var payloadSchemas payloadCache

func (c *payloadCache) get(schema []byte) (compiledPayload, error) {
	c.mu.Lock()
	p, ok := c.entries[string(schema)]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := compilePayloadSchema(schema)
	if err != nil {
		return compiledPayload{}, err
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= payloadCacheMaxEntries {
		c.entries = make(map[string]compiledPayload)
	}
	c.entries[string(schema)] = p
	c.mu.Unlock()
	return p, nil
}

// payloadSchemaBounds refuses a payload_schema deeper than
// MaxPayloadSchemaDepth or larger than MaxPayloadSchemaBytes. It takes
// time linear in the schema's size.
func payloadSchemaBounds(schema any) *schemas.Problem {
	if schema == nil {
		return nil
	}
	if jsonDepth(schema, 0) > MaxPayloadSchemaDepth {
		return &schemas.Problem{Field: "payload_schema", Message: fmt.Sprintf("nests objects and arrays more than %d deep; flatten it, or move repeated parts under $defs and $ref them", MaxPayloadSchemaDepth)}
	}
	b, err := json.Marshal(schema)
	if err == nil && len(b) > MaxPayloadSchemaBytes {
		return &schemas.Problem{Field: "payload_schema", Message: fmt.Sprintf("is %d bytes long; keep it to %d (64 KiB), e.g. by checking the details in the handler", len(b), MaxPayloadSchemaBytes)}
	}
	return nil
}

// jsonDepth returns the nesting of objects and arrays in v, a decoded JSON
// value, at most one past MaxPayloadSchemaDepth.
func jsonDepth(v any, d int) int {
	if d > MaxPayloadSchemaDepth {
		return d
	}
	deepest := d
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, d+1))
		}
	case []any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, d+1))
		}
	}
	return deepest
}

// compilePayloadSchema compiles a task's payload_schema without touching the
// file system or the network.
func compilePayloadSchema(schema []byte) (compiledPayload, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return compiledPayload{}, err
	}
	c := newCompiler()
	if err := c.AddResource(payloadSchemaURL, doc); err != nil {
		return compiledPayload{}, err
	}
	sch, err := c.Compile(payloadSchemaURL)
	if err != nil {
		return compiledPayload{}, err
	}
	return compiledPayload{Schema: sch, doc: doc}, nil
}

// payloadSchemaProblems explains why payload_schema (schema) does not compile.
func payloadSchemaProblems(err error, schema []byte) []schemas.Problem {
	const field = "payload_schema"
	var (
		verr *jsonschema.SchemaValidationError
		rerr *jsonschema.InvalidRegexError
		lerr *jsonschema.LoadURLError
		perr *jsonschema.JSONPointerNotFoundError
	)
	switch {
	case errors.As(err, &verr):
		var inner *jsonschema.ValidationError
		if errors.As(verr.Err, &inner) {
			// The metaschema rejected it: say where inside payload_schema.
			doc, _ := decodeJSON(schema)
			problems := translator{}.problems(inner, doc, field)
			for i := range problems {
				problems[i].Message = "is not valid in a JSON Schema: it " + problems[i].Message
			}
			return problems
		}
	case errors.As(err, &rerr):
		return []schemas.Problem{{Field: field, Message: fmt.Sprintf("has a pattern %q that is not a valid regular expression; use RE2 syntax (no look-around, no back-references)", rerr.Regex)}}
	case errors.As(err, &perr):
		ref := strings.TrimPrefix(perr.URL, payloadSchemaURL)
		return []schemas.Problem{{Field: field, Message: fmt.Sprintf("has a $ref to %q, which payload_schema does not define; add it under $defs or fix the $ref", ref)}}
	case errors.As(err, &lerr):
		return []schemas.Problem{{Field: field, Message: fmt.Sprintf("refers to %s, which AX does not load; keep every $ref inside payload_schema (e.g. \"#/$defs/order\") and leave $schema out or name a standard draft", lerr.URL)}}
	}
	return []schemas.Problem{{Field: field, Message: "is not a valid JSON Schema: " + err.Error()}}
}
