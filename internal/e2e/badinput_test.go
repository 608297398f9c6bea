package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/apitest"
)

func TestBadInputIsRefusedAndCreatesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.apply(`
task_name: strict
schema_version: 2
execution:
  handler: builtin.echo
`)
	cases := []struct {
		name, method, path, contentType, body string
		status                                int
		mention                               string // the message must name what to fix
	}{
		{"malformed task JSON", "POST", "/v1/tasks", "application/json", `{"task_name": "x",`, 400, "JSON"},
		{"unknown task field", "POST", "/v1/tasks", "application/json",
			`{"task_name": "x", "execution": {"handler": "builtin.echo"}, "colour": "red"}`, 400, "colour"},
		{"unknown nested field", "POST", "/v1/tasks", "application/json",
			`{"task_name": "x", "execution": {"handler": "builtin.echo", "retries": 3}}`, 400, "retries"},
		{"bad task name", "POST", "/v1/tasks", "application/json",
			`{"task_name": "Bad.Name*", "execution": {"handler": "builtin.echo"}}`, 400, "task_name"},
		{"malformed run JSON", "POST", "/v1/tasks/strict/runs", "application/json", `{"payload": `, 400, "JSON"},
		{"unknown run field", "POST", "/v1/tasks/strict/runs", "application/json",
			`{"payload": {}, "payload_version": 2, "urgent": true}`, 400, "urgent"},
		{"unknown task", "POST", "/v1/tasks/nosuch/runs", "application/json", `{}`, 404, "nosuch"},
		{"payload version mismatch", "POST", "/v1/tasks/strict/runs", "application/json",
			`{"payload": {}, "payload_version": 1}`, 422, "schema_version"},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, s.apiURL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", c.contentType)
		resp, err := apitest.HTTPClient(nil, s.admin).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.status, body)
			continue
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
			t.Errorf("%s: want a JSON error with a code, got %s", c.name, body)
		}
		if !strings.Contains(string(body), c.mention) {
			t.Errorf("%s: the error should mention %q: %s", c.name, c.mention, body)
		}
	}

	var tasks, instances int
	ctx := context.Background()
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM instances)`).
		Scan(&tasks, &instances); err != nil {
		t.Fatal(err)
	}
	if tasks != 1 || instances != 0 {
		t.Errorf("bad input left %d tasks and %d instances, want only the task applied first and no instance", tasks, instances)
	}
	stream, err := s.js.Stream(ctx, s.srv.Topology.TriggersStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("bad input published %d trigger messages, want none", info.State.Msgs)
	}
}
