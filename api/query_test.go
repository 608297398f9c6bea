package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestQueryParametersReadAlike holds every list endpoint to one reading of
// its query: an unknown parameter is refused naming it, the path and what
// the path takes, and a bad limit or time is refused in the same words.
func TestQueryParametersReadAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply("task_name: etl\nexecution: {handler: h}\n")
	id := e.insertInstance("etl", "q-1", "RUNNING")
	logs := "/v1/instances/" + strconv.FormatInt(id, 10) + "/logs"
	for _, tt := range []struct {
		url, field, msg string
	}{
		{"/v1/instances?bogus=1", "bogus", `unknown query parameter "bogus"; /v1/instances takes task, state, since, until, limit, before, after and archived`},
		{"/v1/audit?bogus=1", "bogus", `unknown query parameter "bogus"; /v1/audit takes task, instance, operator, since, limit and before`},
		{"/v1/alerts?bogus=1", "bogus", `unknown query parameter "bogus"; /v1/alerts takes state, limit and before`},
		{"/v1/reports/summary?bogus=1", "bogus", `unknown query parameter "bogus"; /v1/reports/summary takes task, since, until and step`},
		{"/v1/reports/health?bogus=1", "bogus", `unknown query parameter "bogus"; /v1/reports/health takes min_failures, grace, runs, min_runs and factor`},
		{logs + "?bogus=1", "bogus", `unknown query parameter "bogus"; ` + logs + ` takes attempt, since, limit, after and follow`},
		{"/v1/instances?limit=0", "limit", `limit="0" is not a number from 1 to 500`},
		{"/v1/audit?limit=x", "limit", `limit="x" is not a number from 1 to 1000`},
		{"/v1/alerts?limit=1001", "limit", `limit="1001" is not a number from 1 to 1000`},
		{logs + "?limit=0", "limit", `limit="0" is not a number from 1 to 10000`},
		{"/v1/instances?until=soon", "until", `until="soon" is neither an RFC 3339 time (2026-11-29T08:00:00Z) nor a positive duration back from now (90m, 24h)`},
		{"/v1/instances?task=Bad!", "task", `task="Bad!" is not a task name: use 1-64 lower-case letters`},
		{"/v1/audit?task=Bad!", "task", `task="Bad!" is not a task name`},
		{"/v1/reports/summary?task=Bad!", "task", `task="Bad!" is not a task name`},
		{"/v1/audit?since=soon", "since", `since="soon" is neither an RFC 3339 time`},
		{"/v1/reports/summary?since=soon", "since", `since="soon" is neither an RFC 3339 time`},
		{logs + "?since=soon", "since", `since="soon" is neither an RFC 3339 time`},
	} {
		status, body := e.do(http.MethodGet, tt.url, "", nil)
		if status != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", tt.url, status)
			continue
		}
		got := errorOf(t, body)
		if got["field"] != tt.field || !strings.Contains(got["message"].(string), tt.msg) {
			t.Errorf("GET %s: field %v, message %q; want field %s and %q", tt.url, got["field"], got["message"], tt.field, tt.msg)
		}
	}
}
