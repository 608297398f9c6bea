package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/wire"
)

// The bad inputs every route is sent.
var (
	sqlName  = `x'; DROP TABLE tasks;--`
	hugeName = strings.Repeat("a", 10<<10)
	// deepArrays is 10,000 nested JSON arrays.
	deepArrays = strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
)

// badPathValues are, for each path parameter, values it must refuse.
var badPathValues = map[string][]string{
	"name": {"a.b", "a*", "a>", "a b", "Upper", sqlName, hugeName},
	"id":   {"abc", "-1", "0", "1.5", "99999999999999999999", sqlName, strings.Repeat("9", 10<<10)},
}

// goodPathValues stand for each path parameter while another is bad.
var goodPathValues = map[string]string{"name": "nightly-report", "id": "1", "event_id": "ev-1"}

// goodBodies are bodies a route takes, sent while a path parameter is bad.
var goodBodies = map[string]string{
	"PUT /v1/alert-rules/{name}": `{"kind": "backlog", "level": "P2"}`,
}

// badInput is one request the API must refuse.
type badInput struct {
	name        string
	method      string
	path        string
	contentType string
	body        string
	// chunked sends the body without a Content-Length.
	chunked bool
	// field is the field the answer must name (in its field, or else in
	// its message); "" when no one field is at fault.
	field string
	// allowOK accepts a 2xx answer, for a free-text query parameter that
	// may hold anything; it must still create nothing.
	allowOK bool
}

// bodyRoutes are the routes that take a body, with a body of the right
// shape but a field of the wrong type, and that field.
var bodyRoutes = []struct {
	method, path string
	wrongType    string
	field        string
}{
	{"POST", "/v1/tasks", `{"task_name": 42, "execution": {"handler": "h"}}`, "task_name"},
	{"POST", "/v1/tasks/nightly-report/runs", `{"payload_version": "two"}`, "payload_version"},
	{"POST", "/v1/instances/1/cancel", `{"reason": 5}`, "reason"},
	{"POST", "/v1/instances/1/rerun", `{"operator": 5}`, "operator"},
	{"PUT", "/v1/alert-rules/x", `{"kind": 5, "level": "P2"}`, "kind"},
	{"POST", "/v1/alert-channels", `{"kind": "slack", "url": 5}`, "url"},
	{"POST", "/v1/tokens", `{"name": 5, "role": "viewer"}`, "name"},
}

func badInputs() []badInput {
	var cases []badInput
	// Bad path parameters, one at a time, on every route that has one.
	for _, rt := range api.Routes() {
		for param, values := range badPathValues {
			if !strings.Contains(rt.Pattern, "{"+param+"}") {
				continue
			}
			for _, v := range values {
				path := rt.Pattern
				for p, good := range goodPathValues {
					if p == param {
						good = v
					}
					path = strings.ReplaceAll(path, "{"+p+"}", url.PathEscape(good))
				}
				body := goodBodies[rt.Method+" "+rt.Pattern]
				cases = append(cases, badInput{name: fmt.Sprintf("%s %s with %s=%.20q", rt.Method, rt.Pattern, param, v),
					method: rt.Method, path: path, contentType: "application/json", body: body, field: param})
			}
		}
	}
	// Bad bodies, on every route that takes one.
	oversize := `{"x": "` + strings.Repeat("a", api.DefaultMaxBodyBytes) + `"}`
	for _, rt := range bodyRoutes {
		add := func(what, body, field string, chunked bool) {
			cases = append(cases, badInput{name: rt.method + " " + rt.path + ": " + what, method: rt.method, path: rt.path,
				contentType: "application/json", body: body, field: field, chunked: chunked})
		}
		add("malformed JSON", `{"a": `, "", false)
		add("not an object", `[]`, "", false)
		add("a string", `"hello"`, "", false)
		add("wrong type", rt.wrongType, rt.field, false)
		add("unknown field", `{"zzz_unknown": 1}`, "zzz_unknown", false)
		add("oversize", oversize, "", false)
		add("oversize, chunked", oversize, "", true)
		add("deep nesting", deepArrays, "", false)
		add("deep nesting in a field", `{"zzz_deep": `+deepArrays+`}`, "", false)
	}
	// Bad task definitions.
	task := func(name, body, field string) {
		cases = append(cases, badInput{name: "apply: " + name, method: "POST", path: "/v1/tasks", contentType: "application/json", body: body, field: field})
	}
	for _, n := range []string{"a.b", "a*", "a>", "a b", sqlName, hugeName} {
		body, _ := json.Marshal(map[string]any{"task_name": n, "execution": map[string]any{"handler": "h"}})
		task(fmt.Sprintf("task_name %.20q", n), string(body), "task_name")
	}
	task("bad cron", `{"task_name": "t1", "execution": {"handler": "h"}, "triggers": [{"type": "cron", "schedule": "99 * * * *"}]}`, "schedule")
	task("bad cron zone", `{"task_name": "t1", "execution": {"handler": "h"}, "triggers": [{"type": "cron", "schedule": "0 2 * * *", "timezone": "Mars/Olympus"}]}`, "timezone")
	task("bad misfire", `{"task_name": "t1", "execution": {"handler": "h"}, "triggers": [{"type": "cron", "schedule": "0 2 * * *", "misfire": "sometimes"}]}`, "misfire")
	task("unknown trigger type", `{"task_name": "t1", "execution": {"handler": "h"}, "triggers": [{"type": "interval"}]}`, "type")
	task("bad after", `{"task_name": "t1", "execution": {"handler": "h"}, "after": [{"task": "a.b", "on": "sometimes"}]}`, "after")
	task("after itself", `{"task_name": "t1", "execution": {"handler": "h"}, "triggers": [{"type": "after", "tasks": ["t1"]}]}`, "")
	task("huge handler", `{"task_name": "t1", "execution": {"handler": "`+hugeName+`"}}`, "handler")
	task("deep payload schema", `{"task_name": "t1", "execution": {"handler": "h"}, "payload_schema": {"items": `+deepArrays+`}}`, "")
	// Text PostgreSQL refuses (a 500 before) or Go's decoder alters (issue
	// 24, hole 10): refused like a firing's, naming the field.
	task("payload_schema lone surrogate", `{"task_name": "t1", "execution": {"handler": "h"}, "payload_schema": {"description": "\ud800"}}`, "payload_schema.description")
	task("payload_schema not UTF-8", "{\"task_name\": \"t1\", \"execution\": {\"handler\": \"h\"}, \"payload_schema\": {\"title\": \"\xff\"}}", "payload_schema.title")
	task("owner not UTF-8", "{\"task_name\": \"t1\", \"execution\": {\"handler\": \"h\"}, \"owner\": \"\xc3\"}", "owner")
	task("mutex_key lone surrogate", `{"task_name": "t1", "execution": {"handler": "h"}, "concurrency": {"mutex_key": "k\udc00"}}`, "concurrency.mutex_key")
	cases = append(cases,
		badInput{name: "channel URL not UTF-8", method: "POST", path: "/v1/alert-channels", contentType: "application/json",
			body: "{\"kind\": \"slack\", \"url\": \"https://hooks.example/\xff\"}", field: "url"},
		badInput{name: "channel URL lone surrogate", method: "POST", path: "/v1/alert-channels", contentType: "application/json",
			body: `{"kind": "slack", "url": "https://hooks.example/\ud800"}`, field: "url"},
		badInput{name: "cancel reason not UTF-8", method: "POST", path: "/v1/instances/1/cancel", contentType: "application/json",
			body: "{\"reason\": \"\xff\"}", field: "reason"},
	)
	cases = append(cases,
		badInput{name: "apply: deep YAML", method: "POST", path: "/v1/tasks", contentType: "application/yaml",
			body: "task_name: t1\nexecution: {handler: h}\ndescription: " + deepArrays + "\n"},
		badInput{name: "apply: YAML sent as JSON", method: "POST", path: "/v1/tasks", contentType: "application/json",
			body: "task_name: t1\n"},
		badInput{name: "apply: wrong content type", method: "POST", path: "/v1/tasks", contentType: "text/plain",
			body: "{}"},
	)
	// Bad firings.
	fire := func(name, body, field string) {
		cases = append(cases, badInput{name: "fire: " + name, method: "POST", path: "/v1/tasks/nightly-report/runs",
			contentType: "application/json", body: body, field: field})
	}
	fire("event_id huge", `{"event_id": "`+hugeName+`"}`, "event_id")
	fire("idempotency_key huge", `{"idempotency_key": "`+hugeName+`"}`, "idempotency_key")
	fire("priority SQL", `{"priority": "`+sqlName+`"}`, "priority")
	fire("operator huge", `{"operator": "`+hugeName+`"}`, "operator")
	fire("delay", `{"delay": "soon"}`, "delay")
	fire("negative delay", `{"delay": "-5m"}`, "delay")
	fire("run_at", `{"run_at": "tomorrow"}`, "run_at")
	fire("delay and run_at", `{"delay": "5m", "run_at": "2099-01-01T00:00:00Z"}`, "")
	fire("deep payload", `{"payload": `+deepArrays+`}`, "")
	fire("two objects", `{} {}`, "")
	// Bad names in other bodies.
	// Token names are not subjects: "ci.deploy" is one.
	for _, n := range []string{"a b", "a*", sqlName, hugeName} {
		body, _ := json.Marshal(map[string]any{"name": n, "role": "viewer"})
		cases = append(cases, badInput{name: fmt.Sprintf("token name %.20q", n), method: "POST", path: "/v1/tokens",
			contentType: "application/json", body: string(body), field: "name"})
	}
	cases = append(cases,
		badInput{name: "token role SQL", method: "POST", path: "/v1/tokens", contentType: "application/json",
			body: `{"name": "ci", "role": "` + sqlName + `"}`, field: "role"},
		badInput{name: "channel kind SQL", method: "POST", path: "/v1/alert-channels", contentType: "application/json",
			body: `{"kind": "` + sqlName + `", "url": "https://hooks.example/x"}`, field: "kind"},
		badInput{name: "channel URL SQL", method: "POST", path: "/v1/alert-channels", contentType: "application/json",
			body: `{"kind": "slack", "url": "` + sqlName + `"}`, field: "url"},
		badInput{name: "cancel reason huge", method: "POST", path: "/v1/instances/1/cancel", contentType: "application/json",
			body: `{"reason": "` + hugeName + `"}`, field: "reason"},
	)
	// SQL metacharacters and huge values in query parameters.
	for _, q := range []struct {
		path, param string
		freeText    bool
	}{
		{"/v1/instances", "task", false}, {"/v1/instances", "state", false}, {"/v1/instances", "limit", false},
		{"/v1/instances", "before", false}, {"/v1/instances", "after", false},
		{"/v1/audit", "task", false}, {"/v1/audit", "instance", false}, {"/v1/audit", "operator", true},
		{"/v1/audit", "since", false}, {"/v1/audit", "limit", false}, {"/v1/audit", "before", false},
		{"/v1/alerts", "state", false}, {"/v1/alerts", "limit", false}, {"/v1/alerts", "before", false},
		{"/v1/instances/1/logs", "attempt", false}, {"/v1/instances/1/logs", "since", false},
		{"/v1/instances/1/logs", "after", false}, {"/v1/instances/1/logs", "limit", false},
		{"/v1/reports/health", "grace", false}, {"/v1/reports/health", "factor", false},
		{"/v1/reports/summary", "task", false}, {"/v1/reports/summary", "since", false},
		{"/v1/reports/summary", "until", false}, {"/v1/reports/summary", "step", false},
	} {
		for _, v := range []string{sqlName, hugeName} {
			cases = append(cases, badInput{name: fmt.Sprintf("GET %s?%s=%.20q", q.path, q.param, v), method: "GET",
				path: q.path + "?" + url.Values{q.param: {v}}.Encode(), field: q.param, allowOK: q.freeText})
		}
	}
	return cases
}

// rowCounts counts what a request could create: rows of the tables the API
// writes and the firings in AX_FIRINGS.
func (e *env) rowCounts() map[string]int64 {
	e.t.Helper()
	counts := map[string]int64{}
	for _, table := range []string{"tasks", "task_versions", "instances", "operator_actions", "alert_rules", "alert_channels", "api_tokens"} {
		var n int64
		if err := e.pool.QueryRow(e.t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			e.t.Fatalf("count %s: %v", table, err)
		}
		counts[table] = n
	}
	s, err := e.js.Stream(e.t.Context(), "AX_FIRINGS")
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	counts["AX_FIRINGS messages"] = int64(info.State.Msgs)
	return counts
}

// TestBadInput sends every kind of bad input to every route that takes a
// body, a path parameter or a query parameter: each answer is a 4xx with an
// error code and a message naming the field at fault, never a 5xx, and
// nothing is created.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	before := e.rowCounts()
	for _, tt := range badInputs() {
		var body io.Reader = strings.NewReader(tt.body)
		if tt.chunked {
			// Hide the length: the API learns the size only by reading.
			body = io.MultiReader(body)
		}
		req, err := http.NewRequestWithContext(t.Context(), tt.method, e.srv.URL+tt.path, body)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.contentType != "" {
			req.Header.Set("Content-Type", tt.contentType)
		}
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if after := e.rowCounts(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s: created something: counts went from %v to %v", tt.name, before, after)
			before = after
		}
		if tt.allowOK && resp.StatusCode < 300 {
			continue
		}
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("%s: answered %d %.300s; want a 4xx", tt.name, resp.StatusCode, data)
			continue
		}
		var answer struct {
			Error *wire.Error `json:"error"`
		}
		if err := json.Unmarshal(data, &answer); err != nil || answer.Error == nil || answer.Error.Code == "" || answer.Error.Message == "" {
			t.Errorf("%s: answered %d %.300s; want {\"error\": {\"code\": …, \"message\": …}}", tt.name, resp.StatusCode, data)
			continue
		}
		if tt.field != "" && !strings.Contains(answer.Error.Field, tt.field) && !strings.Contains(answer.Error.Message, tt.field) {
			t.Errorf("%s: answered %d %s (field %q): %.300s; want it to name %s", tt.name, resp.StatusCode, answer.Error.Code,
				answer.Error.Field, answer.Error.Message, tt.field)
		}
	}
	if after := e.rowCounts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("counts went from %v to %v", before, after)
	}
}

// TestApplyUnknownHandler: a task whose handler no live worker serves is
// applied (workers come and go), with a warning in the answer.
func TestApplyUnknownHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	res := e.apply("task_name: lonely\nexecution:\n  handler: nobody.serves.this\n")
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `no live worker serves handler "nobody.serves.this"`) {
		t.Errorf("apply warned %q, want that no live worker serves the handler", res.Warnings)
	}
	if !res.Changed || res.Version != 1 {
		t.Errorf("apply = %+v, want version 1 created", res)
	}
}
