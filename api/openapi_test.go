package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/schemas"
)

var update = flag.Bool("update", false, "rewrite api/openapi.json: copy in the contract schemas of schemas/ and format it")

// contractSchemas are the components of the OpenAPI document that are
// copies of AX's JSON Schemas, by component name.
var contractSchemas = []struct{ component, file string }{
	{"Task", "task.schema.json"},
	{"TriggerEvent", "trigger.schema.json"},
	{"Instance", "json/instance.schema.json"},
	{"Transition", "json/transition.schema.json"},
	{"AuditRecord", "json/audit.schema.json"},
	{"LogLine", "json/log_line.schema.json"},
	{"Worker", "json/worker.schema.json"},
}

// node is a JSON value whose objects keep the order of their keys, so that
// the hand-written document can be rewritten without reordering it.
type node struct {
	object bool
	array  bool
	keys   []string
	vals   []*node
	scalar any
}

func decodeNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		n := &node{object: true}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeNode(dec)
			if err != nil {
				return nil, err
			}
			n.keys, n.vals = append(n.keys, k.(string)), append(n.vals, v)
		}
		_, err := dec.Token()
		return n, err
	case json.Delim('['):
		n := &node{array: true}
		for dec.More() {
			v, err := decodeNode(dec)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
		}
		_, err := dec.Token()
		return n, err
	}
	return &node{scalar: tok}, nil
}

func parseNode(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return decodeNode(dec)
}

func (n *node) get(key string) *node {
	if i := slices.Index(n.keys, key); i >= 0 {
		return n.vals[i]
	}
	return nil
}

func (n *node) set(key string, v *node) {
	if i := slices.Index(n.keys, key); i >= 0 {
		n.vals[i] = v
		return
	}
	n.keys, n.vals = append(n.keys, key), append(n.vals, v)
}

func (n *node) del(key string) {
	if i := slices.Index(n.keys, key); i >= 0 {
		n.keys, n.vals = slices.Delete(n.keys, i, i+1), slices.Delete(n.vals, i, i+1)
	}
}

// encode writes n as json.MarshalIndent with two spaces would, without
// escaping HTML characters.
func (n *node) encode(b *bytes.Buffer, indent string) {
	scalar := func(v any) {
		var s bytes.Buffer
		enc := json.NewEncoder(&s)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		b.Write(bytes.TrimSuffix(s.Bytes(), []byte("\n")))
	}
	switch {
	case n.object && len(n.keys) == 0:
		b.WriteString("{}")
	case n.array && len(n.vals) == 0:
		b.WriteString("[]")
	case n.object:
		b.WriteString("{\n")
		for i, k := range n.keys {
			b.WriteString(indent + "  ")
			scalar(k)
			b.WriteString(": ")
			n.vals[i].encode(b, indent+"  ")
			if i < len(n.keys)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "}")
	case n.array:
		b.WriteString("[\n")
		for i, v := range n.vals {
			b.WriteString(indent + "  ")
			v.encode(b, indent+"  ")
			if i < len(n.vals)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "]")
	default:
		scalar(n.scalar)
	}
}

// regenerate returns the document with the contract schemas copied in from
// schemas/ and formatted the one way.
func regenerate(t *testing.T, data []byte) []byte {
	t.Helper()
	doc, err := parseNode(data)
	if err != nil {
		t.Fatalf("api/openapi.json is not JSON: %v", err)
	}
	comps := doc.get("components").get("schemas")
	for _, c := range contractSchemas {
		src, err := schemas.JSONSchemas.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseNode(src)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		s.del("$schema")
		comps.set(c.component, s)
	}
	var b bytes.Buffer
	doc.encode(&b, "")
	b.WriteString("\n")
	return b.Bytes()
}

// TestOpenAPIIsCurrent checks that the contract schemas in the document are
// those of schemas/; -update copies them in.
func TestOpenAPIIsCurrent(t *testing.T) {
	data, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	want := regenerate(t, data)
	if *update {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(data, want) {
		t.Error("api/openapi.json is stale: a schema of schemas/ changed, or the file is not formatted; run go test ./api -run TestOpenAPIIsCurrent -update")
	}
	if !bytes.Equal(api.OpenAPI, data) {
		t.Error("api.OpenAPI differs from api/openapi.json")
	}
}

// openAPIDoc is the document, decoded.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas    map[string]any       `json:"schemas"`
		Responses  map[string]operResp  `json:"responses"`
		Parameters map[string]parameter `json:"parameters"`
	} `json:"components"`
}

type operation struct {
	OperationID string      `json:"operationId"`
	Summary     string      `json:"summary"`
	Description string      `json:"description"`
	Role        string      `json:"x-ax-role"`
	Security    *[]any      `json:"security"`
	Parameters  []parameter `json:"parameters"`
	Responses   map[string]operResp
}

type parameter struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type operResp struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema any `json:"schema"`
	} `json:"content"`
}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	return &doc
}

// operation returns the operation of method on pattern, and the
// parameters it takes (the path's and its own, resolved).
func (d *openAPIDoc) operation(t *testing.T, method, pattern string) (operation, []parameter, bool) {
	t.Helper()
	item, ok := d.Paths[pattern]
	if !ok {
		return operation{}, nil, false
	}
	raw, ok := item[strings.ToLower(method)]
	if !ok {
		return operation{}, nil, false
	}
	var op operation
	if err := json.Unmarshal(raw, &op); err != nil {
		t.Fatalf("%s %s: %v", method, pattern, err)
	}
	var params []parameter
	if shared, ok := item["parameters"]; ok {
		if err := json.Unmarshal(shared, &params); err != nil {
			t.Fatal(err)
		}
	}
	params = append(params, op.Parameters...)
	for i, p := range params {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			params[i] = d.Components.Parameters[name]
		}
	}
	return op, params, true
}

var pathParamRE = regexp.MustCompile(`\{([a-z_]+)\}`)

// TestOpenAPIDescribesEveryRoute checks the document against the route
// table: each route is there with its summary, role, path parameters and
// refusals, and nothing else is.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	described := map[string]bool{}
	for pattern, item := range doc.Paths {
		for method := range item {
			if method != "parameters" {
				described[strings.ToUpper(method)+" "+pattern] = true
			}
		}
	}
	ids := map[string]bool{}
	for _, rt := range api.Routes() {
		name := rt.Method + " " + rt.Pattern
		op, params, ok := doc.operation(t, rt.Method, rt.Pattern)
		if !ok {
			t.Errorf("%s is not in api/openapi.json", name)
			continue
		}
		delete(described, name)
		if op.Summary != rt.Summary {
			t.Errorf("%s: summary %q, want the route table's %q", name, op.Summary, rt.Summary)
		}
		if op.OperationID == "" || ids[op.OperationID] {
			t.Errorf("%s: operationId %q is empty or used twice", name, op.OperationID)
		}
		ids[op.OperationID] = true
		if op.Description == "" {
			t.Errorf("%s has no description", name)
		}
		if op.Role != string(rt.Role) {
			t.Errorf("%s: x-ax-role %q, want %q", name, op.Role, rt.Role)
		}
		if rt.Role == "" && (op.Security == nil || len(*op.Security) != 0) {
			t.Errorf("%s needs no token, so its security must be []", name)
		}
		if rt.Role != "" && op.Security != nil {
			t.Errorf("%s takes a token, so it must not override the document's security", name)
		}
		if _, ok := op.Responses["401"]; (rt.Role != "") != ok {
			t.Errorf("%s: a 401 answer is described: %t; want %t", name, ok, rt.Role != "")
		}
		if _, ok := op.Responses["403"]; (rt.Role != "" && rt.Role != schemas.RoleViewer) != ok {
			t.Errorf("%s: a 403 answer is described: %t", name, ok)
		}
		hasSuccess := false
		for status := range op.Responses {
			hasSuccess = hasSuccess || strings.HasPrefix(status, "2")
		}
		if !hasSuccess {
			t.Errorf("%s describes no successful answer", name)
		}
		var want, got []string
		for _, m := range pathParamRE.FindAllStringSubmatch(rt.Pattern, -1) {
			want = append(want, m[1])
		}
		for _, p := range params {
			if p.In == "path" {
				if !p.Required {
					t.Errorf("%s: path parameter %s is not required", name, p.Name)
				}
				got = append(got, p.Name)
			}
		}
		if !slices.Equal(want, got) {
			t.Errorf("%s: path parameters %v, want %v", name, got, want)
		}
	}
	for name := range described {
		t.Errorf("api/openapi.json describes %s, which is not a route", name)
	}
}

// TestOpenAPIRefsResolve follows every $ref of the document.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	var doc any
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[string]any{}
	var collect func(v any)
	collect = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if id, ok := v["$id"].(string); ok {
				ids[id] = v
			}
			for _, c := range v {
				collect(c)
			}
		case []any:
			for _, c := range v {
				collect(c)
			}
		}
	}
	collect(doc)
	pointer := func(root any, ptr string) bool {
		cur := root
		for tok := range strings.SplitSeq(strings.TrimPrefix(ptr, "/"), "/") {
			if tok == "" {
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = m[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]; !ok {
				return false
			}
		}
		return true
	}
	refs := 0
	var walk func(v any, base string)
	walk = func(v any, base string) {
		switch v := v.(type) {
		case map[string]any:
			if id, ok := v["$id"].(string); ok {
				base = id
			}
			if ref, ok := v["$ref"].(string); ok {
				refs++
				target, frag, _ := strings.Cut(ref, "#")
				root := doc
				if target != "" || base != "" {
					// Relative to the schema resource it is in.
					resolved := target
					if target == "" {
						resolved = base
					} else if i := strings.LastIndex(base, "/"); i >= 0 && !strings.Contains(target, "://") {
						resolved = base[:i+1] + target
					}
					for strings.Contains(resolved, "/../") {
						resolved = regexp.MustCompile(`[^/]+/\.\./`).ReplaceAllString(resolved, "")
					}
					if root, ok = ids[resolved]; !ok {
						t.Errorf("$ref %q (in %s) names no schema of the document", ref, base)
						return
					}
				}
				if !pointer(root, frag) {
					t.Errorf("$ref %q (in %q) does not resolve", ref, base)
				}
			}
			for _, c := range v {
				walk(c, base)
			}
		case []any:
			for _, c := range v {
				walk(c, base)
			}
		}
	}
	walk(doc, "")
	if refs < 50 {
		t.Errorf("followed %d $refs; the walk looks broken", refs)
	}
}

// answerChecker validates the API's answers against the schemas the
// document gives them.
type answerChecker struct {
	t       *testing.T
	e       *env
	doc     *openAPIDoc
	schemas map[string]any
	n       int
}

func newAnswerChecker(t *testing.T, e *env) *answerChecker {
	doc := loadOpenAPI(t)
	// The document's schemas as one JSON Schema document.
	var raw struct {
		Components struct {
			Schemas json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	defs, err := jsonschema.UnmarshalJSON(bytes.NewReader(bytes.ReplaceAll(raw.Components.Schemas,
		[]byte(`"#/components/schemas/`), []byte(`"#/$defs/`))))
	if err != nil {
		t.Fatal(err)
	}
	return &answerChecker{t: t, e: e, doc: doc, schemas: map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs}}
}

// check sends method path (the route pattern filled in) with body and
// validates the answer against the schema of its status, and returns the
// status and the answer.
func (c *answerChecker) check(method, pattern, path, body string) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.e.srv.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.e.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	name := fmt.Sprintf("%s %s (%d)", method, path, resp.StatusCode)
	op, _, ok := c.doc.operation(c.t, method, pattern)
	if !ok {
		c.t.Fatalf("%s: %s %s is not in the document", name, method, pattern)
	}
	r, ok := op.Responses[fmt.Sprint(resp.StatusCode)]
	if !ok {
		c.t.Errorf("%s: the document does not describe this status", name)
		return resp.StatusCode, nil
	}
	if ref, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
		r = c.doc.Components.Responses[ref]
	}
	// The answer's media type is the document's: JSON, and RFC 9457
	// problem documents for errors.
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if want := "application/problem+json"; (resp.StatusCode >= 400) != (ct == want) && resp.StatusCode != http.StatusServiceUnavailable {
		c.t.Errorf("%s: answered Content-Type %q (errors are %s)", name, ct, want)
	}
	media, ok := r.Content[ct]
	if !ok {
		c.t.Errorf("%s: the document gives no schema for its %s answer", name, ct)
		return resp.StatusCode, nil
	}
	c.n++
	key := fmt.Sprintf("answer%d", c.n)
	schemaData, err := json.Marshal(media.Schema)
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := jsonschema.UnmarshalJSON(bytes.NewReader(bytes.ReplaceAll(schemaData, []byte(`"#/components/schemas/`), []byte(`"#/$defs/`))))
	if err != nil {
		c.t.Fatal(err)
	}
	c.schemas["$defs"].(map[string]any)[key] = s
	comp := jsonschema.NewCompiler()
	comp.AssertFormat()
	if err := comp.AddResource("mem://openapi.json", c.schemas); err != nil {
		c.t.Fatal(err)
	}
	sch, err := comp.Compile("mem://openapi.json#/$defs/" + key)
	if err != nil {
		c.t.Fatalf("%s: compile the documented schema: %v", name, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		c.t.Fatalf("%s: the answer is not JSON: %v\n%s", name, err, data)
	}
	if err := sch.Validate(inst); err != nil {
		c.t.Errorf("%s: the answer does not fit the document: %v\n%s", name, err, data)
	}
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// TestOpenAPIDescribesTheAnswers validates real answers of every kind
// against the document.
func TestOpenAPIDescribesTheAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := newAnswerChecker(t, e)
	data, _ := json.Marshal(map[string]any{"task_name": "nightly", "execution": map[string]any{"handler": "builtin.echo"},
		"triggers": []any{map[string]any{"type": "cron", "schedule": "0 2 * * *", "timezone": "Europe/Paris"}}})
	c.check("GET", "/healthz", "/healthz", "")
	c.check("GET", "/v1/openapi.json", "/v1/openapi.json", "")
	c.check("POST", "/v1/tasks", "/v1/tasks", string(data))
	c.check("POST", "/v1/tasks", "/v1/tasks", string(data))
	c.check("POST", "/v1/tasks", "/v1/tasks", `{"task_name": "x"}`)
	c.check("GET", "/v1/tasks", "/v1/tasks", "")
	c.check("GET", "/v1/tasks/{name}", "/v1/tasks/nightly", "")
	c.check("GET", "/v1/tasks/{name}", "/v1/tasks/missing", "")
	for _, action := range []string{"disable", "enable", "pause", "resume"} {
		c.check("POST", "/v1/tasks/{name}/"+action, "/v1/tasks/nightly/"+action, "")
	}
	_, fired := c.check("POST", "/v1/tasks/{name}/runs", "/v1/tasks/nightly/runs", `{"payload": {"n": 1}, "event_id": "ev-1"}`)
	c.check("POST", "/v1/tasks/{name}/runs", "/v1/tasks/nightly/runs", `{"delay": "1h", "idempotency_key": "k"}`)
	c.check("POST", "/v1/tasks/{name}/runs", "/v1/tasks/nightly/runs", `{"delay": "1h", "idempotency_key": "k"}`)
	c.check("POST", "/v1/tasks/{name}/runs", "/v1/tasks/nightly/runs", `{"payload_version": 2}`)
	c.check("GET", "/v1/tasks/{name}/runs/{event_id}", "/v1/tasks/nightly/runs/ev-1", "")
	c.check("GET", "/v1/tasks/{name}/ledger", "/v1/tasks/nightly/ledger?from=72h", "")
	c.check("GET", "/v1/tasks/{name}/ledger", "/v1/tasks/missing/ledger", "")
	c.check("GET", "/v1/tasks/{name}/ledger", "/v1/tasks/nightly/ledger?from=1h&to=2h", "")
	c.check("GET", "/v1/tasks/{name}/explain", "/v1/tasks/nightly/explain?at=2026-01-01T02:00:00%2B01:00", "")
	c.check("GET", "/v1/tasks/{name}/explain", "/v1/tasks/nightly/explain?at=2026-01-01T02:30:00Z", "")
	c.check("GET", "/v1/tasks/{name}/explain", "/v1/tasks/nightly/explain?at=yesterday", "")
	if fired["event_id"] != "ev-1" {
		t.Errorf("fire answered %v", fired)
	}
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-2", schemas.StateSucceeded)
	c.check("GET", "/v1/tasks/{name}/runs/{event_id}", "/v1/tasks/nightly-report/runs/ev-2", "")
	c.check("GET", "/v1/instances", "/v1/instances", "")
	c.check("GET", "/v1/instances", "/v1/instances?state=bogus", "")
	c.check("GET", "/v1/instances", "/v1/instances?after=1&limit=5", "")
	c.check("GET", "/v1/instances/{id}", fmt.Sprint("/v1/instances/", id), "")
	c.check("GET", "/v1/instances/{id}/logs", fmt.Sprint("/v1/instances/", id, "/logs"), "")
	c.check("GET", "/v1/instances/{id}/explain", fmt.Sprint("/v1/instances/", id, "/explain"), "")
	c.check("GET", "/v1/instances/{id}/explain", "/v1/instances/999999/explain", "")
	c.check("POST", "/v1/instances/{id}/rerun", fmt.Sprint("/v1/instances/", id, "/rerun"), "")
	c.check("POST", "/v1/instances/{id}/cancel", fmt.Sprint("/v1/instances/", id, "/cancel"), "")
	c.check("POST", "/v1/instances/{id}/cancel", "/v1/instances/999999/cancel", `{"reason": "no"}`)
	running := e.insertInstance("nightly-report", "ev-3", schemas.StateRunning)
	c.check("POST", "/v1/instances/{id}/cancel", fmt.Sprint("/v1/instances/", running, "/cancel"), `{"reason": "wrong input"}`)
	c.check("GET", "/v1/audit", "/v1/audit", "")
	kv, err := e.js.KeyValue(t.Context(), "ax-workers")
	if err != nil {
		t.Fatal(err)
	}
	w, _ := json.Marshal(schemas.Worker{ID: "w-1", Version: "1.0.0", Pools: []string{"default"}, Handlers: []string{"builtin.echo"},
		Slots: 2, StartedAt: time.Now(), HeartbeatAt: time.Now()})
	if _, err := kv.Put(t.Context(), "w-1", w); err != nil {
		t.Fatal(err)
	}
	c.check("GET", "/v1/workers", "/v1/workers", "")
	c.check("GET", "/v1/streams", "/v1/streams", "")
	_, made := c.check("POST", "/v1/tokens", "/v1/tokens", `{"name": "ci", "role": "viewer"}`)
	c.check("POST", "/v1/tokens", "/v1/tokens", `{"name": "ci", "role": "viewer"}`)
	c.check("GET", "/v1/tokens", "/v1/tokens", "")
	tok, _ := made["token"].(map[string]any)
	c.check("DELETE", "/v1/tokens/{id}", fmt.Sprint("/v1/tokens/", tok["id"]), "")
	c.check("DELETE", "/v1/tokens/{id}", fmt.Sprint("/v1/tokens/", tok["id"]), "")
	c.check("GET", "/v1/alerts", "/v1/alerts", "")
	c.check("GET", "/v1/alerts", "/v1/alerts?state=bogus", "")
	c.check("POST", "/v1/alerts/{id}/ack", "/v1/alerts/999/ack", "")
	c.check("GET", "/v1/alert-rules", "/v1/alert-rules", "")
	c.check("PUT", "/v1/alert-rules/{name}", "/v1/alert-rules/slow", `{"kind": "backlog", "level": "P2", "params": {"age": "10m"}}`)
	c.check("PUT", "/v1/alert-rules/{name}", "/v1/alert-rules/slow", `{"kind": "backlog", "level": "P9"}`)
	_, ch := c.check("POST", "/v1/alert-channels", "/v1/alert-channels", `{"kind": "slack", "url": "https://hooks.example.com/x"}`)
	c.check("GET", "/v1/alert-channels", "/v1/alert-channels", "")
	c.check("DELETE", "/v1/alert-channels/{id}", fmt.Sprint("/v1/alert-channels/", ch["id"]), "")
	c.check("GET", "/v1/reports/health", "/v1/reports/health", "")
	c.check("GET", "/v1/reports/health", "/v1/reports/health?factor=0", "")
	c.check("GET", "/v1/reports/summary", "/v1/reports/summary", "")
	c.check("GET", "/v1/reports/summary", "/v1/reports/summary?since=2h&step=10m&task=nightly-report", "")
	c.check("GET", "/v1/reports/summary", "/v1/reports/summary?step=1s&since=24h", "")
	if c.n < 30 {
		t.Errorf("checked %d answers", c.n)
	}

	// The document is served as it is checked in.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+"/v1/openapi.json", nil)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(served, api.OpenAPI) {
		t.Error("GET /v1/openapi.json does not serve api/openapi.json")
	}
}
