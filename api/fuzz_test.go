package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// fuzzAPI is an API over a real store and NATS server, made once per fuzz
// function: the fuzzed bodies go to the real handlers.
type fuzzAPI struct {
	url  string
	http *http.Client
}

func newFuzzAPI(f *testing.F) *fuzzAPI {
	f.Helper()
	ns := streamstest.NewServer(f, streams.Config{})
	nc, _ := ns.Connect()
	st := store.New(storetest.NewDB(f))
	svc, err := api.New(api.Options{Store: st, Conn: nc, Logger: zerolog.Nop(), RunWait: time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	f.Cleanup(srv.Close)
	a := &fuzzAPI{url: srv.URL, http: apitest.HTTPClient(srv.Client(), apitest.Admin(f, st))}
	if status, answer := a.post(f, "/v1/tasks", "application/yaml", []byte(echoTask)); status != http.StatusCreated {
		f.Fatalf("apply %s: %d %s", echoTask, status, answer)
	}
	return a
}

// post sends body and returns the status and the answer, which must be a
// JSON error or value.
func (a *fuzzAPI) post(t testing.TB, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, a.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(answer) {
		t.Fatalf("POST %s answered %d with a body that is not JSON: %.300q", path, resp.StatusCode, answer)
	}
	return resp.StatusCode, answer
}

// contentTypes are the Content-Types the fuzzers pick from.
var contentTypes = []string{"", "application/json", "application/yaml", "text/plain"}

// FuzzApplyTask posts fuzzed task definitions to POST /v1/tasks: the API
// may take or refuse them, but never answers 5xx.
func FuzzApplyTask(f *testing.F) {
	for _, seed := range []string{
		echoTask,
		`{"task_name": "c", "execution": {"handler": "h"}, "triggers": [{"type": "cron", "schedule": "0 2 * * *", "timezone": "Europe/Paris"}]}`,
		`{"task_name": "c", "execution": {"handler": "h"}, "triggers": [{"type": "cron", "schedule": "99 * * * *"}]}`,
		`{"task_name": "d", "execution": {"handler": "h"}, "after": [{"task": "nightly-report", "on": "failure"}]}`,
		`{"task_name": "d", "execution": {"handler": "h"}, "after": [{"task": "d"}]}`,
		`{"task_name": "e", "execution": {"handler": "h", "timeout": "10m", "retry": {"max_attempts": 3}}, "payload_schema": {"type": "object"}}`,
		`{"task_name": "x'; DROP TABLE tasks;--", "execution": {"handler": "h"}}`,
		`{"task_name": "a.b.>", "execution": {"handler": "h"}}`,
		"task_name: y\nexecution: {handler: h}\ntriggers:\n  - type: cron\n    schedule: '@every 1h'\n",
		`[[[[[[[[[[]]]]]]]]]]`,
		`{"task_name": `,
	} {
		for i := range contentTypes {
			f.Add([]byte(seed), uint8(i))
		}
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte, ct uint8) {
		contentType := contentTypes[int(ct)%len(contentTypes)]
		if status, answer := a.post(t, "/v1/tasks", contentType, body); status >= 500 {
			t.Fatalf("POST /v1/tasks (%s) %q answered %d: %s", contentType, body, status, answer)
		}
	})
}

// FuzzFire posts fuzzed firings to POST /v1/tasks/{name}/runs, of the task
// the API has and of fuzzed names: never a 5xx.
func FuzzFire(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`{"payload": {"day": "2025-03-01"}, "priority": "urgent", "event_id": "ev-1"}`,
		`{"payload": [1, 2], "payload_version": 1, "operator": "alice"}`,
		`{"delay": "90s", "idempotency_key": "order-42"}`,
		`{"delay": "9999999999h"}`,
		`{"delay": "-5s"}`,
		`{"run_at": "2099-03-01T09:00:00+01:00"}`,
		`{"run_at": "2001-01-01T00:00:00Z"}`,
		`{"run_at": "2099-03-01T09:00:00Z", "delay": "1m"}`,
		`{"idempotency_key": "k", "event_id": "e"}`,
		`{"payload_version": 7}`,
		`{"payload_version": "two"}`,
		`{"run_id": "r-1"}`,
		`{} {}`,
		`{"payload": [[[[[[[[]]]]]]]]}`,
	} {
		f.Add([]byte(seed), "nightly-report")
	}
	f.Add([]byte(`{}`), "x'; DROP TABLE tasks;--")
	f.Add([]byte(`{}`), "a.b")
	f.Add([]byte(`{}`), "a b")
	f.Add([]byte(`{}`), "missing")
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		path := "/v1/tasks/" + url.PathEscape(name) + "/runs"
		if status, answer := a.post(t, path, "application/json", body); status >= 500 {
			t.Fatalf("POST %s %q answered %d: %s", path, body, status, answer)
		}
	})
}
