package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/schemas"
)

// TestSummary: GET /v1/reports/summary counts the instances of the last
// hour by default, of one task or a given window on request, and refuses a
// query it cannot answer with what to send instead.
func TestSummary(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.NowFunc = time.Now })
	ctx := t.Context()
	e.apply("task_name: other\nexecution: {handler: builtin.echo}\n")
	e.apply(echoTask)
	for _, st := range []string{"SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED"} {
		e.insertEnded("nightly-report", st)
	}
	e.insertEnded("other", "CANCELLED")

	sum, err := e.client.Summary(ctx, apiclient.SummaryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Total != 5 || sum.States[schemas.StateSucceeded] != 3 || sum.States[schemas.StateCancelled] != 1 ||
		sum.SuccessRate == nil || *sum.SuccessRate != 0.75 || sum.RunTime.Count != 5 || sum.Series != nil {
		t.Errorf("summary = %+v", sum)
	}
	if w := sum.Until.Sub(sum.Since); w != time.Hour {
		t.Errorf("the default window is %v long, want 1h", w)
	}
	one, err := e.client.Summary(ctx, apiclient.SummaryQuery{Task: "other", Since: time.Now().Add(-10 * time.Minute), Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if one.Total != 1 || one.SuccessRate != nil || one.StepSeconds != 60 || len(one.Series) < 10 || len(one.Series) > 11 {
		t.Errorf("summary of other = total %d rate %v step %v, %d buckets", one.Total, one.SuccessRate, one.StepSeconds, len(one.Series))
	}
	past, err := e.client.Summary(ctx, apiclient.SummaryQuery{Since: time.Now().Add(-3 * time.Hour), Until: time.Now().Add(-2 * time.Hour)})
	if err != nil || past.Total != 0 {
		t.Errorf("summary of an hour without instances = %+v, %v", past, err)
	}

	for _, tt := range []struct{ query, want string }{
		{"since=yesterday", `since="yesterday" is neither an RFC 3339 time`},
		{"since=1h&until=2h", `since (`},
		{"step=10ms", `step="10ms" is not a duration of at least 1s`},
		{"since=48h&step=1s", `step=1s cuts the window of 48h0m0s into 172800 buckets, more than 1440`},
		{"task=A*", `task="A*" is not a task name`},
		{"limit=5", `unknown query parameter "limit"`},
	} {
		status, body := e.do("GET", "/v1/reports/summary?"+tt.query, "", nil)
		if msg, _ := body["error"].(map[string]any)["message"].(string); status != 400 || !strings.HasPrefix(msg, tt.want) {
			t.Errorf("GET ?%s: %d %v, want 400 %q", tt.query, status, body, tt.want)
		}
	}
}
