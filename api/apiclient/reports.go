package apiclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// HealthQuery moves the thresholds of [Client.HealthReport]; zero fields
// keep the API's defaults.
type HealthQuery struct {
	MinFailures int
	Grace       time.Duration
	Runs        int
	MinRuns     int
	Factor      float64
}

// HealthReport returns the fleet's health report.
func (c *Client) HealthReport(ctx context.Context, q HealthQuery) (schemas.HealthReport, error) {
	v := url.Values{}
	if q.MinFailures != 0 {
		v.Set("min_failures", strconv.Itoa(q.MinFailures))
	}
	if q.Grace != 0 {
		v.Set("grace", q.Grace.String())
	}
	if q.Runs != 0 {
		v.Set("runs", strconv.Itoa(q.Runs))
	}
	if q.MinRuns != 0 {
		v.Set("min_runs", strconv.Itoa(q.MinRuns))
	}
	if q.Factor != 0 {
		v.Set("factor", strconv.FormatFloat(q.Factor, 'g', -1, 64))
	}
	path := "/v1/reports/health"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out schemas.HealthReport
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// SummaryQuery selects what [Client.Summary] sums up; zero fields keep the
// API's defaults (every task, the last hour, no series).
type SummaryQuery struct {
	Task         string
	Since, Until time.Time
	Step         time.Duration
}

// Summary sums up the instances fired in a window: counts by state, the
// success rate and the run time percentiles (GET /v1/reports/summary).
func (c *Client) Summary(ctx context.Context, q SummaryQuery) (schemas.Summary, error) {
	v := url.Values{}
	if q.Task != "" {
		v.Set("task", q.Task)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Step != 0 {
		v.Set("step", q.Step.String())
	}
	path := "/v1/reports/summary"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out schemas.Summary
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// Ledger returns the ledger of task over [from, to): every tick its cron
// triggers scheduled, with what became of it (GET /v1/tasks/{name}/ledger).
// A zero from or to takes the server's default (the last day up to now).
func (c *Client) Ledger(ctx context.Context, task string, from, to time.Time) (schemas.Ledger, error) {
	v := url.Values{}
	if !from.IsZero() {
		v.Set("from", from.UTC().Format(time.RFC3339Nano))
	}
	if !to.IsZero() {
		v.Set("to", to.UTC().Format(time.RFC3339Nano))
	}
	path := "/v1/tasks/" + url.PathEscape(task) + "/ledger"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out schemas.Ledger
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// ExplainTick explains why the tick at of task did or did not run (GET
// /v1/tasks/{name}/explain).
func (c *Client) ExplainTick(ctx context.Context, task string, at time.Time) (schemas.Explanation, error) {
	var out schemas.Explanation
	path := "/v1/tasks/" + url.PathEscape(task) + "/explain?" + url.Values{"at": {at.Format(time.RFC3339Nano)}}.Encode()
	err := c.do(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// ExplainInstance returns the instance's decision timeline (GET
// /v1/instances/{id}/explain).
func (c *Client) ExplainInstance(ctx context.Context, id int64) (schemas.Explanation, error) {
	var out schemas.Explanation
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/instances/%d/explain", id), "", nil, &out)
	return out, err
}
