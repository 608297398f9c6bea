package taskdef

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/ax-scheduler/ax/schemas"
)

// newValidationError sorts and de-duplicates problems into a ValidationError.
func newValidationError(what string, problems []schemas.Problem) *schemas.ValidationError {
	slices.SortFunc(problems, func(a, b schemas.Problem) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return &schemas.ValidationError{What: what, Problems: slices.Compact(problems)}
}

// decodeJSON decodes one JSON value (numbers as json.Number, as the
// validator wants them), or explains where the syntax is broken.
func decodeJSON(data []byte) (any, *schemas.Problem) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		var serr *json.SyntaxError
		switch {
		case errors.As(err, &serr):
			return nil, &schemas.Problem{Message: fmt.Sprintf("is not valid JSON: %s, at %s", serr.Error(), position(data, serr.Offset))}
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return nil, &schemas.Problem{Message: fmt.Sprintf("is not valid JSON: it ends too early, at %s; close every string, { and [", position(data, int64(len(data))+1))}
		}
		return nil, &schemas.Problem{Message: "is not valid JSON: " + err.Error()}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &schemas.Problem{Message: fmt.Sprintf("is not valid JSON: unexpected data after the top-level value, at %s; send one value only", position(data, dec.InputOffset()+1))}
	}
	if path, ok := schemas.DuplicateKey(data); ok {
		return nil, &schemas.Problem{Field: path, Message: "appears twice in the same object; keep one (JSON parsers disagree on which wins, and YAML refuses it)"}
	}
	return doc, nil
}

// position describes the byte at offset-1 (json.SyntaxError's Offset counts
// the bytes read, the bad one included) as "line L, column C".
func position(data []byte, offset int64) string {
	pos := int(min(max(offset-1, 0), int64(len(data))))
	line := 1 + bytes.Count(data[:pos], []byte("\n"))
	col := pos - bytes.LastIndexByte(data[:pos], '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// yamlMessage rewords a sigs.k8s.io/yaml error, which names the line, on
// one line.
func yamlMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:")
	msg = strings.Join(strings.Fields(msg), " ")
	return "is not valid YAML: " + msg + "; fix it there (or write JSON starting with '{')"
}

// decodeProblem explains an error of decoding a document the schema accepted
// into its Go type: a number out of the Go type's range, a time Go cannot
// parse, or a field the schema and the type disagree on.
func decodeProblem(err error) schemas.Problem {
	var terr *json.UnmarshalTypeError
	if errors.As(err, &terr) {
		return schemas.Problem{Field: terr.Field, Message: fmt.Sprintf("cannot hold %s; use a %s", terr.Value, goTypeName(terr.Type.Kind().String()))}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return schemas.Problem{Field: "", Message: fmt.Sprintf("unknown field %s; remove it", name)}
	}
	return schemas.Problem{Field: "", Message: "cannot be read: " + err.Error()}
}

func goTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "whole number in range"
	case strings.HasPrefix(kind, "float"):
		return "number"
	}
	return kind
}

// translator turns jsonschema's error tree into flat problems. docs holds
// the schema documents by URL, where x-message annotations and the allowed
// properties of an object are looked up.
type translator struct {
	docs map[string]any
}

// problems returns a problem for each leaf of err's tree; doc is the
// validated instance (to tell array indices from keys) and prefix the path of
// its root.
func (t translator) problems(err error, doc any, prefix string) []schemas.Problem {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []schemas.Problem{{Field: prefix, Message: err.Error()}}
	}
	var out []schemas.Problem
	t.walk(verr, doc, prefix, &out)
	return out
}

func (t translator) walk(e *jsonschema.ValidationError, doc any, prefix string, out *[]schemas.Problem) {
	if _, ok := e.ErrorKind.(*kind.PropertyNames); !ok && len(e.Causes) > 0 {
		for _, c := range e.Causes {
			t.walk(c, doc, prefix, out)
		}
		return
	}
	field := fieldPath(prefix, doc, e.InstanceLocation)
	add := func(f, msg string) { *out = append(*out, schemas.Problem{Field: f, Message: msg}) }
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			add(joinField(field, m), "is required")
		}
	case *kind.AdditionalProperties:
		allowed := t.propertyNames(e.SchemaURL)
		for _, p := range k.Properties {
			msg := fmt.Sprintf("unknown field %q; remove it", p)
			if len(allowed) > 0 {
				msg += " (allowed: " + strings.Join(allowed, ", ") + ")"
			}
			add(field, msg)
		}
	case *kind.Dependency:
		for _, m := range k.Missing {
			add(joinField(field, m), fmt.Sprintf("is required when %q is set", k.Prop))
		}
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			add(joinField(field, m), fmt.Sprintf("is required when %q is set", k.Prop))
		}
	case *kind.PropertyNames:
		msg := fmt.Sprintf("has a field name %q that is not allowed", k.Property)
		var inner []schemas.Problem
		for _, c := range e.Causes {
			t.walk(c, k.Property, "", &inner)
		}
		if len(inner) > 0 {
			msg += ": it " + inner[0].Message
		}
		add(field, msg)
	default:
		add(field, t.message(e))
	}
}

// message says in plain words what a leaf error wants.
func (t translator) message(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = typeName(w)
		}
		msg := fmt.Sprintf("must be %s, not %s", strings.Join(want, " or "), typeName(k.Got))
		if slices.Contains(k.Want, "string") && (k.Got == "number" || k.Got == "integer" || k.Got == "boolean") {
			msg += "; put it in quotes"
		}
		return msg
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		if len(want) == 1 {
			return "must be " + want[0]
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "must be " + display(k.Want)
	case *kind.Pattern:
		if msg := t.annotation(e.SchemaURL); msg != "" {
			return msg
		}
		return "must match " + k.Want
	case *kind.Not:
		if msg := t.annotation(e.SchemaURL + "/not"); msg != "" {
			return msg
		}
		return "is a value that is not allowed here"
	case *kind.FalseSchema:
		return "is not allowed here; remove it"
	case *kind.Format:
		switch k.Want {
		case "date-time":
			return "must be an RFC 3339 time such as 2024-05-01T12:00:00Z"
		case "date":
			return "must be a date such as 2024-05-01"
		case "time":
			return "must be a time such as 12:00:00Z"
		case "duration":
			return "must be an ISO 8601 duration such as P1DT2H"
		case "regex":
			return "must be a valid regular expression in RE2 syntax (no look-around, no back-references)"
		}
		return "must be a valid " + k.Want
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (it has %d)", k.Want, k.Got)
	case *kind.Minimum:
		return "must be at least " + ratString(k.Want)
	case *kind.Maximum:
		return "must be at most " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be greater than " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + ratString(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratString(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d %s", k.Want, plural(k.Want, "item"))
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d %s (it has %d)", k.Want, plural(k.Want, "item"), k.Got)
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d more %s than allowed; remove them", k.Count, plural(k.Count, "item"))
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat a value: items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "must contain at least one item that matches"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %d matching %s", k.Want, plural(k.Want, "item"))
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %d matching %s", k.Want, plural(k.Want, "item"))
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d %s", k.Want, plural(k.Want, "field"))
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d %s (it has %d)", k.Want, plural(k.Want, "field"), k.Got)
	case *kind.OneOf:
		return "matches more than one of the allowed forms; it must match exactly one"
	case *kind.AnyOf, *kind.AllOf:
		return "does not match the allowed forms"
	case *kind.ContentEncoding:
		return "must be encoded as " + k.Want
	case *kind.ContentMediaType:
		return "must be a valid " + k.Want + " document"
	case *kind.RefCycle:
		return "cannot be checked: the schema has a $ref cycle"
	}
	return "is invalid (" + e.ErrorKind.LocalizedString(nil) + ")"
}

// annotation returns the x-message annotation of the schema at loc (an
// absolute schema location, "<document URL>#<JSON pointer>"), or "".
func (t translator) annotation(loc string) string {
	node, _ := t.lookup(loc).(map[string]any)
	msg, _ := node["x-message"].(string)
	return msg
}

// propertyNames returns the sorted names in the "properties" of the schema at loc.
func (t translator) propertyNames(loc string) []string {
	node, _ := t.lookup(loc).(map[string]any)
	props, _ := node["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookup resolves an absolute schema location in t.docs, or returns nil.
func (t translator) lookup(loc string) any {
	base, frag, _ := strings.Cut(loc, "#")
	node := t.docs[base]
	if frag == "" {
		return node
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok, err := url.PathUnescape(tok)
		if err != nil {
			return nil
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch n := node.(type) {
		case map[string]any:
			node = n[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n) {
				return nil
			}
			node = n[i]
		default:
			return nil
		}
	}
	return node
}

// plainKey matches the object keys written as ".key" in a field path; others
// are written as ["key"].
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_$-]+$`)

// fieldPath writes the instance location tokens as a dotted path after
// prefix: keys as ".key", array indices as "[i]". doc tells which is which.
func fieldPath(prefix string, doc any, tokens []string) string {
	var sb strings.Builder
	sb.WriteString(prefix)
	v := doc
	for _, tok := range tokens {
		if arr, ok := v.([]any); ok {
			sb.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(arr) {
				v = arr[i]
			} else {
				v = nil
			}
			continue
		}
		if m, ok := v.(map[string]any); ok {
			v = m[tok]
		} else {
			v = nil
		}
		switch {
		case !plainKey.MatchString(tok):
			sb.WriteString("[" + strconv.Quote(tok) + "]")
		case sb.Len() > 0:
			sb.WriteString("." + tok)
		default:
			sb.WriteString(tok)
		}
	}
	return sb.String()
}

// joinField appends an object key to a field path.
func joinField(field, key string) string {
	switch {
	case !plainKey.MatchString(key):
		return field + "[" + strconv.Quote(key) + "]"
	case field == "":
		return key
	}
	return field + "." + key
}

func typeName(t string) string {
	switch t {
	case "object":
		return "an object"
	case "array":
		return "a list"
	case "string":
		return "a string"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "boolean":
		return "true or false"
	}
	return t
}

// display writes an enum or const value: strings bare, others as JSON.
func display(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return formatFloat(f)
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
