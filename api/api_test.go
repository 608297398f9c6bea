package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/logtest"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

func TestMain(m *testing.M) { waittest.VerifyTestMain(m) }

// fixedNow is the time the API stamps on the firings it publishes.
var fixedNow = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// env is an API over a real store and a real NATS server.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	store  *store.Store
	nc     *nats.Conn
	js     jetstream.JetStream
	svc    *api.Service
	srv    *httptest.Server
	client *apiclient.Client
	log    *logtest.Buffer
	// admin is the secret of an admin token called apitest.AdminName,
	// which client and http send.
	admin string
	// http sends requests made by hand, with the admin token.
	http *http.Client
}

func newEnv(t *testing.T, tune func(*api.Options)) *env {
	t.Helper()
	ns := streamstest.NewServer(t, streams.Config{})
	nc, js := ns.Connect()
	pool := storetest.NewDB(t)
	e := &env{t: t, pool: pool, store: store.New(pool), nc: nc, js: js, log: &logtest.Buffer{}}
	opts := api.Options{
		Store:   e.store,
		Conn:    nc,
		Logger:  zerolog.New(e.log),
		RunWait: 100 * time.Millisecond,
		NowFunc: func() time.Time { return fixedNow },
	}
	if tune != nil {
		tune(&opts)
	}
	svc, err := api.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	e.srv = httptest.NewServer(svc.Handler())
	t.Cleanup(e.srv.Close)
	e.admin = apitest.Admin(t, e.store)
	e.client = e.as(e.admin)
	e.http = apitest.HTTPClient(e.srv.Client(), e.admin)
	return e
}

// as returns a client of the API that sends the token secret.
func (e *env) as(secret string) *apiclient.Client {
	c := apiclient.NewClient(e.srv.URL, e.srv.Client())
	c.Token = secret
	return c
}

// do sends a request and decodes the JSON answer into a map.
func (e *env) do(method, path, contentType string, body io.Reader) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	want := "application/json"
	if resp.StatusCode >= 400 {
		want = wire.ProblemContentType
	}
	if ct := resp.Header.Get("Content-Type"); ct != want {
		e.t.Errorf("%s %s answered %d with Content-Type %q, want %s", method, path, resp.StatusCode, ct, want)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		e.t.Fatalf("%s %s: decode answer: %v", method, path, err)
	}
	return resp.StatusCode, out
}

func (e *env) apply(def string) wire.ApplyResult {
	e.t.Helper()
	res, err := e.client.ApplyTask(e.t.Context(), []byte(def), "application/yaml")
	if err != nil {
		e.t.Fatalf("apply task: %v", err)
	}
	return res
}

// count counts rows of a table.
func (e *env) count(table string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// triggers returns the number of messages in AX_FIRINGS.
func (e *env) triggers() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(e.t.Context(), "AX_FIRINGS")
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// lastTrigger returns the last firing published for task.
func (e *env) lastTrigger(task string) (schemas.TriggerEvent, nats.Header) {
	e.t.Helper()
	s, err := e.js.Stream(e.t.Context(), "AX_FIRINGS")
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(e.t.Context(), "ax.fire."+task+".api")
	if err != nil {
		e.t.Fatalf("read the firing of %s: %v", task, err)
	}
	ev, err := taskdef.ParseTriggerEvent(msg.Data)
	if err != nil {
		e.t.Fatalf("published firing does not parse: %v\n%s", err, msg.Data)
	}
	return ev, msg.Header
}

// insertInstance writes the instance the dispatcher would make for a firing.
func (e *env) insertInstance(task, eventID string, state schemas.State) int64 {
	e.t.Helper()
	ctx := context.WithoutCancel(e.t.Context())
	var id int64
	err := e.pool.QueryRow(ctx, `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, payload, output, error, worker_id, fired_at)
		VALUES ($1, 1, $2, 'manual', $3, 2, 'urgent', 'default', 'builtin.echo', 60000, '{"n":1}', '{"ok":true}', '', 'w-1', now())
		RETURNING id`, task, eventID, string(state)).Scan(&id)
	if err != nil {
		e.t.Fatalf("insert instance: %v", err)
	}
	_, err = e.pool.Exec(ctx, `
		INSERT INTO instance_transitions (instance_id, task, from_state, to_state, attempt, operator, reason)
		VALUES ($1, $2, NULL, 'CREATED', 1, 'alice', ''), ($1, $2, 'CREATED', $3, 1, 'dispatcher', 'routed')`,
		id, task, string(state))
	if err != nil {
		e.t.Fatalf("insert transitions: %v", err)
	}
	return id
}

// errorOf returns the error object of an answer.
func errorOf(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok {
		t.Fatalf("answer has no error object: %v", body)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("error without a message: %v", e)
	}
	return e
}

const echoTask = `
task_name: nightly-report
owner: data-team
execution:
  handler: builtin.echo
  timeout: 10m
`

func TestApplyTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	status, body := e.do("POST", "/v1/tasks", "application/json",
		strings.NewReader(`{"task_name": "nightly-report", "owner": "data-team", "execution": {"handler": "builtin.echo", "timeout": "10m"}}`))
	if status != http.StatusCreated {
		t.Fatalf("create: status %d %v, want 201", status, body)
	}
	if body["version"] != 1.0 || body["enabled"] != true || body["changed"] != true {
		t.Errorf("create answer = %v", body)
	}
	task := body["task"].(map[string]any)
	if task["priority"] != "normal" || task["schema_version"] != 1.0 || task["execution"].(map[string]any)["timeout"] != "10m" {
		t.Errorf("created task without its defaults: %v", task)
	}

	// The same definition in YAML: unchanged, still version 1.
	res := e.apply(echoTask)
	if res.Changed || res.Version != 1 || res.Task.Owner != "data-team" {
		t.Errorf("unchanged apply = %+v, want version 1 unchanged", res)
	}
	for _, ct := range []string{"text/yaml", "application/x-yaml; charset=utf-8"} {
		status, body := e.do("POST", "/v1/tasks", ct, strings.NewReader(echoTask))
		if status != http.StatusOK || body["changed"] != false {
			t.Errorf("apply as %s: status %d %v, want 200 unchanged", ct, status, body)
		}
	}

	// A change makes version 2, answered 200.
	status, body = e.do("POST", "/v1/tasks", "application/yaml", strings.NewReader(echoTask+"description: changed\n"))
	if status != http.StatusOK || body["version"] != 2.0 || body["changed"] != true {
		t.Errorf("changed apply: status %d %v, want 200 version 2 changed", status, body)
	}
	if n := e.count("task_versions"); n != 2 {
		t.Errorf("task_versions has %d rows, want 2", n)
	}

	// The name of the token is recorded with the version.
	e.client = e.as(apitest.Token(t, e.store, "alice", schemas.RoleAdmin))
	e.apply(echoTask + "description: third\n")
	var op string
	if err := e.pool.QueryRow(t.Context(), `SELECT operator FROM task_versions WHERE version = 3`).Scan(&op); err != nil || op != "alice" {
		t.Errorf("version 3 operator = %q, %v; want alice", op, err)
	}
}

func TestApplyTaskRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.MaxBodyBytes = 2048 })
	def := func(name string) string {
		return fmt.Sprintf(`{"task_name": %q, "execution": {"handler": "builtin.echo"}}`, name)
	}
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		field       string // the field of a problem, when the answer lists problems
	}{
		{"malformed JSON", "application/json", `{"task_name": "a",`, 400, "malformed_json", ""},
		{"malformed JSON, no content type", "", `{"task_name": "a" "x"}`, 400, "malformed_json", ""},
		{"YAML sent as JSON", "application/json", echoTask, 400, "malformed_json", ""},
		{"malformed YAML", "application/yaml", "task_name: [a\nexecution: {", 400, "invalid_task", ""},
		{"empty body", "application/json", "  ", 400, "empty_body", ""},
		{"unknown field", "application/json", `{"task_name": "a", "execution": {"handler": "h"}, "colour": "red"}`, 400, "invalid_task", ""},
		{"unknown nested field", "application/json", `{"task_name": "a", "execution": {"handler": "h", "retries": 3}}`, 400, "invalid_task", "execution"},
		{"unknown field deeper", "application/yaml", "task_name: a\nexecution:\n  handler: h\n  retry: {max_attempts: 2, wait: 3}\n", 400, "invalid_task", "execution.retry"},
		{"missing handler", "application/json", `{"task_name": "a", "execution": {}}`, 400, "invalid_task", "execution.handler"},
		{"wrong type", "application/json", `{"task_name": "a", "execution": {"handler": "h"}, "schema_version": "2"}`, 400, "invalid_task", "schema_version"},
		{"name upper case", "application/json", def("Nightly"), 400, "invalid_task", "task_name"},
		{"name with dot", "application/json", def("a.b"), 400, "invalid_task", "task_name"},
		{"name with star", "application/json", def("a*"), 400, "invalid_task", "task_name"},
		{"name with gt", "application/json", def("a>"), 400, "invalid_task", "task_name"},
		{"name with space", "application/json", def("a b"), 400, "invalid_task", "task_name"},
		{"name of 65 characters", "application/json", def(strings.Repeat("a", 65)), 400, "invalid_task", "task_name"},
		{"empty name", "application/json", def(""), 400, "invalid_task", "task_name"},
		{"wrong content type", "text/plain", def("a"), 415, "unsupported_media_type", ""},
		{"form content type", "application/x-www-form-urlencoded", def("a"), 415, "unsupported_media_type", ""},
		{"unparsable content type", "application/json; =", def("a"), 415, "unsupported_media_type", ""},
		{"too large", "application/json", `{"description": "` + strings.Repeat("x", 4096) + `"}`, 413, "body_too_large", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.do("POST", "/v1/tasks", tt.contentType, strings.NewReader(tt.body))
			if status != tt.status {
				t.Fatalf("status %d %v, want %d", status, body, tt.status)
			}
			er := errorOf(t, body)
			if er["code"] != tt.code {
				t.Errorf("code %v, want %s (%v)", er["code"], tt.code, er["message"])
			}
			if tt.code == "invalid_task" {
				problems, _ := er["problems"].([]any)
				if len(problems) == 0 {
					t.Fatalf("no problems listed: %v", er)
				}
				p := problems[0].(map[string]any)
				if p["field"] != tt.field || p["message"] == "" {
					t.Errorf("problem = %v, want field %q", p, tt.field)
				}
			}
		})
	}

	// A body streamed without a Content-Length is cut off at the limit too.
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte(" "), 512)
		for range 16 {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	status, body := e.do("POST", "/v1/tasks", "application/json", pr)
	pr.Close()
	if status != http.StatusRequestEntityTooLarge || errorOf(t, body)["code"] != "body_too_large" {
		t.Errorf("streamed oversize body: status %d %v, want 413", status, body)
	}

	if n := e.count("tasks") + e.count("task_versions"); n != 0 {
		t.Errorf("refused definitions left %d rows behind", n)
	}
}

func TestTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	e.apply(echoTask)
	e.apply("task_name: a-first\nexecution: {handler: h}\n")

	list, err := e.client.ListTasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Task.TaskName != "a-first" || list[1].Task.TaskName != "nightly-report" {
		t.Errorf("ListTasks = %+v, want a-first, nightly-report", list)
	}
	got, err := e.client.GetTask(ctx, "nightly-report")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || !got.Enabled || got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() || got.Task.Execution.Timeout != "10m" {
		t.Errorf("GetTask = %+v", got)
	}

	off, err := e.client.SetTaskEnabled(ctx, "nightly-report", false)
	if err != nil || off.Enabled {
		t.Errorf("disable = %+v, %v; want disabled", off, err)
	}
	if got, _ := e.client.GetTask(ctx, "nightly-report"); got.Enabled {
		t.Error("task still enabled after disable")
	}
	on, err := e.client.SetTaskEnabled(ctx, "nightly-report", true)
	if err != nil || !on.Enabled {
		t.Errorf("enable = %+v, %v; want enabled", on, err)
	}

	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/tasks/missing", 404, "task_not_found"},
		{"POST", "/v1/tasks/missing/enable", 404, "task_not_found"},
		{"POST", "/v1/tasks/missing/disable", 404, "task_not_found"},
		{"GET", "/v1/tasks/Nightly", 400, "invalid_task_name"},
		{"GET", "/v1/tasks/a.b", 400, "invalid_task_name"},
		{"POST", "/v1/tasks/a%20b/disable", 400, "invalid_task_name"},
		{"GET", "/v2/tasks", 404, "route_not_found"},
		{"PUT", "/v1/tasks/nightly-report", 405, "method_not_allowed"},
		{"DELETE", "/v1/tasks/missing", 404, "task_not_found"},
	} {
		status, body := e.do(tt.method, tt.path, "", nil)
		if status != tt.status || errorOf(t, body)["code"] != tt.code {
			t.Errorf("%s %s: status %d %v, want %d %s", tt.method, tt.path, status, body, tt.status, tt.code)
		}
	}

	_, err = e.client.GetTask(ctx, "missing")
	var apiErr *wire.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "task_not_found" || !apiclient.IsNotFound(err) {
		t.Errorf("GetTask(missing) error = %#v, want *wire.Error 404", err)
	}
	if !strings.Contains(err.Error(), `task "missing" does not exist`) {
		t.Errorf("error reads %q", err)
	}
}

func TestFire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	e.apply(echoTask)

	// No dispatcher runs: the instance never appears, so the answer is 202.
	res, err := e.client.Fire(ctx, "nightly-report", wire.FireRequest{
		Payload: json.RawMessage(`{"day": "2025-03-01"}`), EventID: "ev-1", Priority: schemas.PriorityUrgent, Operator: "alice",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.EventID != "ev-1" || res.InstanceID != 0 {
		t.Errorf("Fire = %+v, want event ev-1 without an instance", res)
	}
	ev, hdr := e.lastTrigger("nightly-report")
	// A body's operator makes the firing manual; the token names the operator.
	want := schemas.TriggerEvent{EventID: "ev-1", Task: "nightly-report", Source: schemas.SourceManual, Operator: apitest.AdminName,
		Payload: json.RawMessage(`{"day":"2025-03-01"}`), PayloadVersion: 1, Priority: schemas.PriorityUrgent, FiredAt: fixedNow}
	if fmt.Sprintf("%+v", ev) != fmt.Sprintf("%+v", want) {
		t.Errorf("published firing\n got %+v\nwant %+v", ev, want)
	}
	if hdr.Get("Nats-Msg-Id") != "nightly-report/ev-1" {
		t.Errorf("Nats-Msg-Id = %q, want nightly-report/ev-1 (scoped by the task)", hdr.Get("Nats-Msg-Id"))
	}

	// No body at all: an event firing with a fresh id.
	status, body := e.do("POST", "/v1/tasks/nightly-report/runs", "", nil)
	if status != http.StatusAccepted || body["event_id"] == "" || body["instance_id"] != nil {
		t.Fatalf("fire without a body: status %d %v, want 202 with an event id", status, body)
	}
	ev, hdr = e.lastTrigger("nightly-report")
	if ev.EventID != body["event_id"] || hdr.Get("Nats-Msg-Id") != "nightly-report/"+ev.EventID || ev.Source != schemas.SourceEvent ||
		ev.Operator != apitest.AdminName || ev.Payload != nil || ev.PayloadVersion != 1 || ev.Priority != "" {
		t.Errorf("published firing = %+v %v", ev, hdr)
	}
	if n := e.triggers(); n != 2 {
		t.Errorf("AX_FIRINGS holds %d messages, want 2", n)
	}
	if !strings.Contains(e.log.String(), `"message":"task fired"`) {
		t.Error("no log line for the firing")
	}
}

func TestFireWaitsForInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.RunWait = 30 * time.Second })
	e.apply(echoTask)

	// Play the dispatcher: once the firing is published, make its instance.
	sub, err := e.nc.SubscribeSync("ax.fire.nightly-report.api")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res wire.FireResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.client.Fire(context.WithoutCancel(t.Context()), "nightly-report", wire.FireRequest{EventID: "ev-wait"})
		done <- result{res, err}
	}()
	if _, err := sub.NextMsg(time.Minute); err != nil {
		t.Fatalf("the firing was never published: %v", err)
	}
	id := e.insertInstance("nightly-report", "ev-wait", schemas.StateDispatched)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.InstanceID != id || r.res.EventID != "ev-wait" || r.res.State != schemas.StateDispatched {
		t.Errorf("Fire = %+v, want instance %d DISPATCHED", r.res, id)
	}

	// Firing the same event again finds the same instance at once.
	status, body := e.do("POST", "/v1/tasks/nightly-report/runs", "application/json", strings.NewReader(`{"event_id": "ev-wait"}`))
	if status != http.StatusCreated || body["instance_id"] != float64(id) || body["state"] != "DISPATCHED" {
		t.Errorf("fire again: status %d %v, want 201 instance %d", status, body, id)
	}
	// The API only waits for what the dispatcher does: it created nothing.
	if n := e.count("instances"); n != 1 {
		t.Errorf("%d instances, want 1", n)
	}

	in, err := e.client.InstanceByEvent(t.Context(), "nightly-report", "ev-wait")
	if err != nil || in.ID != id {
		t.Errorf("InstanceByEvent = %+v, %v; want instance %d", in, err, id)
	}
	if _, err := e.client.InstanceByEvent(t.Context(), "nightly-report", "ev-none"); !apiclient.IsNotFound(err) {
		t.Errorf("InstanceByEvent(unknown event) error = %v, want 404", err)
	}
}

func TestFireRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.MaxBodyBytes = 1024 })
	e.apply(echoTask)
	e.apply("task_name: versioned\nschema_version: 3\nexecution: {handler: h}\n")
	e.apply("task_name: paused\nexecution: {handler: h}\n")
	e.apply("task_name: typed\nexecution: {handler: h}\npayload_schema: {type: object, required: [day], properties: {day: {type: string}}}\n")
	if _, err := e.client.SetTaskEnabled(t.Context(), "paused", false); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		task        string // escaped into the path
		contentType string
		body        string
		status      int
		code        string
		field       string
		message     string // part of the message
	}{
		{"unknown task", "missing", "", "", 404, "task_not_found", "name", `task "missing" does not exist`},
		{"disabled task", "paused", "", "", 409, "task_disabled", "name", "ax task enable paused"},
		{"payload version mismatch", "versioned", "application/json", `{"payload": {}}`, 422, "payload_version_mismatch", "payload_version",
			"payload_version 1 does not match the schema_version 3"},
		{"payload version mismatch, explicit", "nightly-report", "application/json", `{"payload_version": 2}`, 422, "payload_version_mismatch", "payload_version",
			"payload_version 2 does not match the schema_version 1"},
		{"payload against the task's schema", "typed", "application/json", `{"payload": {"day": 1}}`, 422, "invalid_payload", "payload.day",
			"must be a string"},
		{"no payload for a task's schema", "typed", "", "", 422, "invalid_payload", "payload", "payload_schema"},
		{"bad priority", "nightly-report", "application/json", `{"priority": "high"}`, 400, "invalid_request", "priority", "urgent, normal, low"},
		{"negative payload version", "nightly-report", "application/json", `{"payload_version": -1}`, 400, "invalid_request", "payload_version", "at least 1"},
		{"event id with a space", "nightly-report", "application/json", `{"event_id": "a b"}`, 400, "invalid_request", "event_id", "invalid firing: event_id: must not contain spaces"},
		{"NUL in the payload", "nightly-report", "application/json", `{"payload": {"note": "a\u0000b"}}`, 400, "invalid_request", "payload.note", "NUL character"},
		{"NUL in a payload key", "nightly-report", "application/json", `{"payload": {"a\u0000": 1}}`, 400, "invalid_request", "payload.a", "the key holds a NUL"},
		{"lone surrogate in the payload", "nightly-report", "application/json", `{"payload": ["ok", "\ud800"]}`, 400, "invalid_request", "payload[1]", "lone UTF-16 surrogate"},
		{"invalid UTF-8 in the payload", "nightly-report", "application/json", "{\"payload\": \"\xff\"}", 400, "invalid_request", "payload", "not valid UTF-8"},
		{"NUL in the event id", "nightly-report", "application/json", `{"event_id": "e\u0000"}`, 400, "invalid_request", "event_id", "NUL character"},
		{"lone surrogate in the event id", "nightly-report", "application/json", `{"event_id": "e\udc00"}`, 400, "invalid_request", "event_id", "lone UTF-16 surrogate"},
		{"invalid UTF-8 in the event id", "nightly-report", "application/json", "{\"event_id\": \"e\xc3\"}", 400, "invalid_request", "event_id", "not valid UTF-8"},
		{"NUL in the run id", "nightly-report", "application/json", `{"run_id": "r\u0000"}`, 400, "invalid_request", "run_id", "NUL character"},
		{"lone surrogate in the run id", "nightly-report", "application/json", `{"run_id": "\ud800x"}`, 400, "invalid_request", "run_id", "lone UTF-16 surrogate"},
		{"invalid UTF-8 in the run id", "nightly-report", "application/json", "{\"run_id\": \"r\xfe\"}", 400, "invalid_request", "run_id", "not valid UTF-8"},
		{"NUL in the idempotency key", "nightly-report", "application/json", `{"idempotency_key": "k\u0000"}`, 400, "invalid_request", "idempotency_key", "NUL character"},
		{"malformed JSON", "nightly-report", "application/json", `{"payload": `, 400, "malformed_json", "", "not valid JSON"},
		{"not an object", "nightly-report", "application/json", `1`, 400, "invalid_request", "", "JSON object"}, // an array is a batch (TestFireBatch)
		{"wrong field type", "nightly-report", "application/json", `{"payload_version": "1"}`, 400, "invalid_request", "payload_version", "whole number"},
		{"unknown field", "nightly-report", "application/json", `{"payload": {}, "retries": 5}`, 400, "unknown_field", "retries", "payload, payload_version"},
		{"two values", "nightly-report", "application/json", `{} {}`, 400, "malformed_json", "", "more than one JSON value"},
		{"wrong content type", "nightly-report", "text/plain", `{}`, 415, "unsupported_media_type", "", "application/json"},
		{"YAML content type", "nightly-report", "application/yaml", `{}`, 415, "unsupported_media_type", "", "application/json"},
		{"too large", "nightly-report", "application/json", `{"payload": "` + strings.Repeat("x", 2048) + `"}`, 413, "body_too_large", "", "1024 bytes"},
		{"name upper case", "Nightly", "", "", 400, "invalid_task_name", "name", "lower-case"},
		{"name with dot", "a.b", "", "", 400, "invalid_task_name", "name", ""},
		{"name with star", "*", "", "", 400, "invalid_task_name", "name", ""},
		{"name with gt", "a>", "", "", 400, "invalid_task_name", "name", ""},
		{"name with space", "a b", "", "", 400, "invalid_task_name", "name", ""},
		{"name of 65 characters", strings.Repeat("a", 65), "", "", 400, "invalid_task_name", "name", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.do("POST", "/v1/tasks/"+url.PathEscape(tt.task)+"/runs", tt.contentType, strings.NewReader(tt.body))
			if status != tt.status {
				t.Fatalf("status %d %v, want %d", status, body, tt.status)
			}
			er := errorOf(t, body)
			msg, _ := er["message"].(string)
			if er["code"] != tt.code || (er["field"] != nil && er["field"] != tt.field) || (er["field"] == nil && tt.field != "") ||
				!strings.Contains(msg, tt.message) {
				t.Errorf("error = %v, want code %s, field %q, message with %q", er, tt.code, tt.field, tt.message)
			}
		})
	}
	if n := e.triggers(); n != 0 {
		t.Errorf("refused firings published %d messages", n)
	}
}

func TestInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	e.apply(echoTask)
	e.apply("task_name: other\nexecution: {handler: h}\n")
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateDispatched)
	id2 := e.insertInstance("other", "ev-2", schemas.StateSkipped)
	id3 := e.insertInstance("nightly-report", "ev-3", schemas.StateSkipped)

	in, err := e.client.GetInstance(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.Task != "nightly-report" || in.State != schemas.StateDispatched || in.WorkerID != "w-1" ||
		in.Priority != schemas.PriorityUrgent || string(in.Output) != `{"ok":true}` || len(in.Transitions) != 2 {
		t.Errorf("GetInstance = %+v", in)
	}
	if tr := in.Transitions; len(tr) == 2 && (tr[0].From != "" || tr[0].To != schemas.StateCreated || tr[0].Operator != "alice" ||
		tr[1].From != schemas.StateCreated || tr[1].To != schemas.StateDispatched || tr[1].Reason != "routed") {
		t.Errorf("transitions = %+v", tr)
	}
	// The wire form names the fields as the CLI and the console read them.
	status, body := e.do("GET", fmt.Sprint("/v1/instances/", id), "", nil)
	tr0, _ := body["transitions"].([]any)
	if status != 200 || body["worker_id"] != "w-1" || body["attempt"] != 1.0 || len(tr0) != 2 || tr0[0].(map[string]any)["from"] != "" {
		t.Errorf("GET instance: status %d %v", status, body)
	}

	ids := func(list []schemas.Instance) string {
		var out []int64
		for _, in := range list {
			out = append(out, in.ID)
		}
		return fmt.Sprint(out)
	}
	for _, tt := range []struct {
		q    apiclient.InstanceQuery
		want []int64
	}{
		{apiclient.InstanceQuery{}, []int64{id3, id2, id}},
		{apiclient.InstanceQuery{Task: "nightly-report"}, []int64{id3, id}},
		{apiclient.InstanceQuery{State: schemas.StateSkipped}, []int64{id3, id2}},
		{apiclient.InstanceQuery{State: "skipped", Task: "other"}, []int64{id2}},
		{apiclient.InstanceQuery{Limit: 1}, []int64{id3}},
		{apiclient.InstanceQuery{Limit: 1, Before: id3}, []int64{id2}},
	} {
		list, err := e.client.ListInstances(ctx, tt.q)
		if err != nil {
			t.Fatal(err)
		}
		if ids(list) != fmt.Sprint(tt.want) {
			t.Errorf("ListInstances(%+v) = %s, want %v", tt.q, ids(list), tt.want)
		}
	}
	status, body = e.do("GET", "/v1/instances?task=missing", "", nil)
	if list, ok := body["instances"].([]any); status != 200 || !ok || len(list) != 0 {
		t.Errorf("empty list: status %d %v, want 200 with an empty list", status, body)
	}

	for _, tt := range []struct {
		path   string
		status int
		code   string
		field  string
	}{
		{fmt.Sprint("/v1/instances/", id3+100), 404, "instance_not_found", "id"},
		{"/v1/instances/abc", 400, "invalid_instance_id", "id"},
		{"/v1/instances/0", 400, "invalid_instance_id", "id"},
		{"/v1/instances?stat=FAILED", 400, "unknown_parameter", "stat"},
		{"/v1/instances?state=DONE", 400, "invalid_parameter", "state"},
		{"/v1/instances?task=A.B", 400, "invalid_parameter", "task"},
		{"/v1/instances?limit=0", 400, "invalid_parameter", "limit"},
		{"/v1/instances?limit=501", 400, "invalid_parameter", "limit"},
		{"/v1/instances?limit=ten", 400, "invalid_parameter", "limit"},
		{"/v1/instances?before=-1", 400, "invalid_parameter", "before"},
		{"/v1/tasks/nightly-report/runs/ev-2", 404, "instance_not_found", "event_id"},
	} {
		status, body := e.do("GET", tt.path, "", nil)
		er := errorOf(t, body)
		if status != tt.status || er["code"] != tt.code || er["field"] != tt.field {
			t.Errorf("GET %s: status %d %v, want %d %s field %s", tt.path, status, er, tt.status, tt.code, tt.field)
		}
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if err := e.client.Health(t.Context()); err != nil {
		t.Fatalf("Health = %v, want nil", err)
	}
	status, body := e.do("GET", "/healthz", "", nil)
	if status != 200 || body["status"] != "ok" {
		t.Errorf("healthz: status %d %v", status, body)
	}

	e.nc.Close()
	err := e.client.Health(t.Context())
	var apiErr *wire.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || !strings.Contains(apiErr.Message, "nats") ||
		strings.Contains(apiErr.Message, "postgres") {
		t.Errorf("Health with NATS closed = %v, want 503 naming nats only", err)
	}
	e.pool.Close()
	if err := e.client.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Errorf("Health with both down = %v, want one naming postgres", err)
	}
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.do("GET", "/v1/tasks/missing", "", nil)
	var line struct {
		Method, Path, Message string
		Status                int
		DurationMS            *float64 `json:"duration_ms"`
	}
	for l := range strings.Lines(e.log.String()) {
		if err := json.Unmarshal([]byte(l), &line); err == nil && line.Message == "http request" {
			break
		}
	}
	if line.Method != "GET" || line.Path != "/v1/tasks/missing" || line.Status != 404 || line.DurationMS == nil {
		t.Errorf("access log line = %+v; log:\n%s", line, e.log.String())
	}
}

func TestNewRequires(t *testing.T) {
	t.Parallel()
	if _, err := api.New(api.Options{}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without a store = %v", err)
	}
	if _, err := api.New(api.Options{Store: store.New(nil)}); err == nil || !strings.Contains(err.Error(), "Conn") {
		t.Errorf("New without a connection = %v", err)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	// Run listens on an address of its own choosing: a free port, noted and
	// closed, which another process on a busy machine may take before Run
	// listens on it again. Such a port is given up for another one.
	e := newEnv(t, nil)
	var (
		addr      string
		cancel    context.CancelFunc
		done      chan error
		transport = &http.Transport{}
	)
	defer transport.CloseIdleConnections()
	for try := 1; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
		svc, err := api.New(api.Options{Store: e.store, Conn: e.nc, Logger: zerolog.New(e.log), Addr: addr})
		if err != nil {
			t.Fatal(err)
		}
		var ctx context.Context
		ctx, cancel = context.WithCancel(t.Context())
		done = make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		if answers(t, apiclient.NewClient("http://"+addr, &http.Client{Transport: transport}), done) {
			break
		}
		cancel()
		if try == 5 {
			t.Fatalf("five free ports were taken before Run listened on them")
		}
	}
	defer cancel()
	client2 := apiclient.NewClient("http://"+addr+"/", nil)
	client2.Token = e.admin
	if _, err := client2.ListTasks(t.Context()); err != nil {
		t.Errorf("ListTasks through a base URL with a slash: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()

	// A second service cannot listen on the same address.
	other, err := api.New(api.Options{Store: e.store, Conn: e.nc, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "listen on "+addr) {
		t.Errorf("Run on a taken address = %v, want a listen error", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after a clean shutdown", err)
	}
}

// answers waits up to a minute for the API that Run serves to answer its
// health check, and reports whether it did. It reports false when Run
// could not listen because the address was taken meanwhile; any other end
// of Run, or a minute without an answer, fails the test.
func answers(t *testing.T, client *apiclient.Client, done <-chan error) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var lastErr error
	err := wait.Until(ctx, func() (bool, error) {
		select {
		case err := <-done:
			if errors.Is(err, syscall.EADDRINUSE) {
				return false, errTaken
			}
			return false, fmt.Errorf("Run returned %v before the API answered", err)
		default:
		}
		// One check at a time is bounded: a port taken by another
		// listener may accept and never answer.
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		lastErr = client.Health(hctx)
		return lastErr == nil, nil
	})
	switch {
	case errors.Is(err, errTaken):
		t.Logf("the free port was taken before Run listened on it: trying another")
		return false
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("the API never answered in a minute: %v", lastErr)
	case err != nil:
		t.Fatal(err)
	}
	return true
}

var errTaken = errors.New("address taken")

func TestClientErrors(t *testing.T) {
	t.Parallel()
	// An answer that does not come from the API still reads well.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, err := apiclient.NewClient(proxy.URL, proxy.Client()).ListTasks(t.Context())
	var apiErr *wire.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 502 || !strings.Contains(err.Error(), "upstream down") {
		t.Errorf("error = %v", err)
	}

	several := &wire.Error{Status: 400, Code: "invalid_task",
		Message:  "invalid task definition: execution.handler: is required; priority: must be one of urgent, normal, low",
		Problems: []schemas.Problem{{Field: "execution.handler", Message: "is required"}, {Field: "priority", Message: "must be one of urgent, normal, low"}}}
	want := "invalid task definition:\n  - execution.handler: is required\n  - priority: must be one of urgent, normal, low"
	if several.Error() != want {
		t.Errorf("Error() = %q, want %q", several.Error(), want)
	}
	one := &wire.Error{Status: 409, Message: "task \"x\" is disabled"}
	if one.Error() != one.Message {
		t.Errorf("Error() = %q", one.Error())
	}
	if got := (&wire.Error{Status: 503}).Error(); !strings.Contains(got, "503 Service Unavailable") {
		t.Errorf("Error() without a message = %q", got)
	}
}

func TestDeleteTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ApplyTask(ctx, []byte("task_name: doomed\nexecution:\n  handler: builtin.echo\n"), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DeleteTask(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.GetTask(ctx, "doomed"); !apiclient.IsNotFound(err) {
		t.Errorf("get after delete: %v, want not found", err)
	}
	if _, err := e.client.Fire(ctx, "doomed", wire.FireRequest{}); !apiclient.IsNotFound(err) {
		t.Errorf("fire after delete: %v, want not found", err)
	}
	if _, err := e.client.DeleteTask(ctx, "doomed"); !apiclient.IsNotFound(err) {
		t.Errorf("delete twice: %v, want not found", err)
	}
	list, err := e.client.ListTasks(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("list after delete: %d tasks (%v), want none", len(list), err)
	}
	// Applying the name again revives it as a new version.
	res, err := e.client.ApplyTask(ctx, []byte("task_name: doomed\nexecution:\n  handler: builtin.echo\n"), "application/yaml")
	if err != nil || res.Version != 2 || !res.Changed {
		t.Errorf("apply after delete: %+v, %v; want version 2, changed", res, err)
	}
	var actions int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM operator_actions WHERE action = 'delete' AND task = 'doomed'`).Scan(&actions); err != nil || actions != 1 {
		t.Errorf("%d delete actions audited (%v), want 1", actions, err)
	}
}

// TestFireRespondAsyncAnswersFromTheAck: with "Prefer: respond-async" the
// API answers a firing once it is published (202, its event id, the
// preference applied) instead of waiting up to RunWait for an instance no
// dispatcher makes here; the firing is on the stream all the same.
func TestFireRespondAsyncAnswersFromTheAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.RunWait = time.Minute })
	e.apply(echoTask)
	start := time.Now()
	res, err := e.client.FireAsync(t.Context(), "nightly-report", wire.FireRequest{EventID: "ev-async"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("FireAsync took %s: it waited for the instance", took)
	}
	if res.EventID != "ev-async" || res.InstanceID != 0 || res.Task != "nightly-report" {
		t.Errorf("FireAsync = %+v, want event ev-async without an instance", res)
	}
	if ev, _ := e.lastTrigger("nightly-report"); ev.EventID != "ev-async" {
		t.Errorf("published firing %+v, want ev-async", ev)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", e.srv.URL+"/v1/tasks/nightly-report/runs", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Prefer", "wait=10, respond-async")
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Preference-Applied") != "respond-async" {
		t.Errorf("status %d, Preference-Applied %q; want 202 and respond-async", resp.StatusCode, resp.Header.Get("Preference-Applied"))
	}
	if n := e.triggers(); n != 2 {
		t.Errorf("AX_FIRINGS holds %d messages, want 2", n)
	}
}
