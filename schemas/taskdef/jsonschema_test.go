package taskdef

import (
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// TestSchemasMatchGoTypes walks each schema beside the Go type it mirrors:
// every object is closed, has exactly the type's JSON fields, and requires
// exactly those the type always writes (no omitempty or omitzero).
func TestSchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema string
		v      any
	}{
		{"task.schema.json", schemas.Task{}},
		{"trigger.schema.json", schemas.TriggerEvent{}},
		{"json/dispatch.schema.json", schemas.Dispatch{}},
		{"json/report.schema.json", schemas.Report{}},
		{"json/worker.schema.json", schemas.Worker{}},
		{"json/lease.schema.json", schemas.Lease{}},
		{"json/control.schema.json", schemas.Control{}},
		{"json/fence_question.schema.json", schemas.FenceQuestion{}},
		{"json/fence_answer.schema.json", schemas.FenceAnswer{}},
		{"json/transition.schema.json", schemas.Transition{}},
		{"json/instance.schema.json", schemas.Instance{}},
		{"json/task_entry.schema.json", schemas.TaskEntry{}},
	} {
		loc := schemaBaseURL + tc.schema + "#"
		matchType(t, s.translator, loc, reflect.TypeOf(tc.v), tc.schema)
	}
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawType      = reflect.TypeFor[json.RawMessage]()
	durationType = reflect.TypeFor[schemas.Duration]()
)

func matchType(t *testing.T, tr translator, loc string, typ reflect.Type, path string) {
	t.Helper()
	node, ok := tr.lookup(loc).(map[string]any)
	if !ok {
		t.Errorf("%s: no schema at %s", path, loc)
		return
	}
	if ref, ok := node["$ref"].(string); ok {
		matchType(t, tr, resolveRef(t, loc, ref), typ, path)
		return
	}
	types := schemaTypes(node)
	switch {
	case typ == rawType:
		// Any JSON value fits; the schema may narrow it (payload_schema is an object).
	case typ == durationType:
		if !slices.Equal(types, []string{"string", "number"}) {
			t.Errorf("%s: a Duration wants a string or a number of seconds, the schema has %v", path, types)
		}
	case typ == timeType:
		if !slices.Equal(types, []string{"string"}) || node["format"] != "date-time" {
			t.Errorf("%s: a time.Time wants a date-time string, the schema has %v %v", path, types, node["format"])
		}
	case typ.Kind() == reflect.Pointer:
		matchType(t, tr, loc, typ.Elem(), path)
	case typ.Kind() == reflect.Slice:
		if !slices.Contains(types, "array") {
			t.Errorf("%s: a slice wants an array, the schema has %v", path, types)
		}
		matchType(t, tr, loc+"/items", typ.Elem(), path+"[]")
	case typ.Kind() == reflect.String:
		if _, isEnum := node["enum"]; !isEnum && !slices.Equal(types, []string{"string"}) {
			t.Errorf("%s: a string wants a string or an enum, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Int || typ.Kind() == reflect.Int64:
		if !slices.Equal(types, []string{"integer"}) {
			t.Errorf("%s: an integer wants an integer, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Float64:
		if !slices.Equal(types, []string{"number"}) {
			t.Errorf("%s: a float wants a number, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Bool:
		if !slices.Equal(types, []string{"boolean"}) {
			t.Errorf("%s: a bool wants a boolean, the schema has %v", path, types)
		}
	case typ.Kind() == reflect.Struct:
		matchStruct(t, tr, loc, node, typ, path)
	case typ.Kind() == reflect.Map && typ.Key().Kind() == reflect.String:
		if !slices.Equal(types, []string{"object"}) {
			t.Errorf("%s: a map wants an object, the schema has %v", path, types)
		}
		if _, ok := node["additionalProperties"].(map[string]any); !ok {
			t.Errorf("%s: a map wants additionalProperties to be the schema of its values", path)
			return
		}
		matchType(t, tr, loc+"/additionalProperties", typ.Elem(), path+"{}")
	default:
		t.Errorf("%s: no rule for %v", path, typ)
	}
}

func matchStruct(t *testing.T, tr translator, loc string, node map[string]any, typ reflect.Type, path string) {
	t.Helper()
	if !slices.Equal(schemaTypes(node), []string{"object"}) {
		t.Errorf("%s: a struct wants an object, the schema has %v", path, schemaTypes(node))
	}
	if node["additionalProperties"] != false {
		t.Errorf("%s: the object is not closed (additionalProperties: false)", path)
	}
	props, _ := node["properties"].(map[string]any)
	var names, required []string
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
		if _, ok := props[name]; !ok {
			t.Errorf("%s: the schema lacks %s", path, name)
			continue
		}
		matchType(t, tr, loc+"/properties/"+name, f.Type, path+"."+name)
	}
	for name, p := range props {
		// A property with x-alias-of is another name of a property the
		// type has, which ParseTask reads as that one.
		if alias, ok := p.(map[string]any)["x-alias-of"].(string); ok {
			if !slices.Contains(names, alias) {
				t.Errorf("%s: the schema's %s is an alias of %s, which %v lacks", path, name, alias, typ)
			}
			continue
		}
		if !slices.Contains(names, name) {
			t.Errorf("%s: the schema has %s, which %v lacks", path, name, typ)
		}
	}
	var schemaRequired []string
	if r, ok := node["required"].([]any); ok {
		for _, v := range r {
			schemaRequired = append(schemaRequired, v.(string))
		}
	}
	slices.Sort(required)
	slices.Sort(schemaRequired)
	if !slices.Equal(required, schemaRequired) {
		t.Errorf("%s: the schema requires %v, the Go type always writes %v", path, schemaRequired, required)
	}
}

func schemaTypes(node map[string]any) []string {
	switch v := node["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, s := range v {
			if s != "null" { // a nil slice encodes as null
				out = append(out, s.(string))
			}
		}
		return out
	}
	return nil
}

// resolveRef resolves a $ref found at loc, against the document's URL.
func resolveRef(t *testing.T, loc, ref string) string {
	t.Helper()
	base, _, _ := strings.Cut(loc, "#")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("schema location %s: %v", loc, err)
	}
	r, err := u.Parse(ref)
	if err != nil {
		t.Fatalf("$ref %q at %s: %v", ref, loc, err)
	}
	r.Fragment, r.RawFragment = "", ""
	_, frag, _ := strings.Cut(ref, "#")
	return r.String() + "#" + frag
}

func TestSchemaAnnotations(t *testing.T) {
	t.Parallel()
	// An x-message sits beside a pattern or inside a not: nowhere else is it shown.
	s, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for url, doc := range s.docs {
		var walk func(v any, parentKey string, path string)
		walk = func(v any, parentKey, path string) {
			switch n := v.(type) {
			case map[string]any:
				if msg, ok := n["x-message"].(string); ok {
					_, hasPattern := n["pattern"]
					if !hasPattern && parentKey != "not" {
						t.Errorf("%s%s: x-message %q is never shown", url, path, msg)
					}
					if !strings.HasPrefix(msg, "must ") {
						t.Errorf("%s%s: x-message %q does not say what the value must be", url, path, msg)
					}
				}
				for k, c := range n {
					walk(c, k, path+"/"+k)
				}
			case []any:
				for _, c := range n {
					walk(c, "", path+"/[]")
				}
			}
		}
		walk(doc, "", "#")
	}
}
