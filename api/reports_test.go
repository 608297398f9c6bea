package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/schemas"
)

func TestHealthReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.NowFunc = time.Now })
	ctx := t.Context()
	e.apply("task_name: orphan\nexecution: {handler: builtin.echo}\n")
	e.apply(echoTask)
	for range 2 {
		e.insertEnded("orphan", "FAILED")
	}
	rep, err := e.client.HealthReport(ctx, apiclient.HealthQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.WithoutOwner) != 1 || rep.WithoutOwner[0] != "orphan" || len(rep.ConsecutiveFailures) != 1 ||
		rep.ConsecutiveFailures[0].Failures != 2 || rep.MissedSchedules == nil || rep.DurationOutliers == nil ||
		!strings.Contains(rep.Rules.ConsecutiveFailures, "latest 2 or more") {
		t.Errorf("report = %+v", rep)
	}
	rep, err = e.client.HealthReport(ctx, apiclient.HealthQuery{MinFailures: 3, Grace: time.Hour, Runs: 10, MinRuns: 3, Factor: 3})
	if err != nil || len(rep.ConsecutiveFailures) != 0 || !strings.Contains(rep.Rules.DurationOutliers, "3 × the p95 of the 10") {
		t.Errorf("report with thresholds = %+v, %v", rep, err)
	}
	for _, tt := range []struct{ query, want string }{
		{"min_failures=0", `min_failures="0" is not a whole number from 1 to 1000`},
		{"grace=soon", `grace="soon" is not a positive duration`},
		{"factor=1", `factor="1" is not a number above 1`},
		{"runs=5&min_runs=6", `min_runs=6 is more than runs=5`},
		{"owner=x", `unknown query parameter "owner"`},
	} {
		status, body := e.do("GET", "/v1/reports/health?"+tt.query, "", nil)
		if msg, _ := body["error"].(map[string]any)["message"].(string); status != 400 || !strings.HasPrefix(msg, tt.want) {
			t.Errorf("GET ?%s: %d %v, want 400 %q", tt.query, status, body, tt.want)
		}
	}
}

// insertEnded writes an ended instance of task.
func (e *env) insertEnded(task, state string) {
	e.t.Helper()
	_, err := e.pool.Exec(e.t.Context(), `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler,
			timeout_ms, fired_at, started_at, finished_at)
		VALUES ($1, 1, gen_random_uuid()::text, 'event', $2, 1, 'normal', 'default', 'builtin.echo', 1000, now(), now(), now())`,
		task, state)
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestMetricsRoute(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ax_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	e := newEnv(t, func(o *api.Options) { o.Metrics = reg })
	viewer := apitest.HTTPClient(e.srv.Client(), apitest.Token(t, e.store, "prometheus", schemas.RoleViewer))
	resp, err := viewer.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ax_test_total 3") {
		t.Errorf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}

	// By default: the process's Go runtime metrics.
	d := newEnv(t, nil)
	resp, err = d.http.Get(d.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("GET /metrics by default: %d\n%.500s", resp.StatusCode, body)
	}
}
