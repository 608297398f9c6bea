package api

import (
	"net/http"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/store"
)

// defaultSummaryWindow is how far back GET /v1/reports/summary looks
// without since.
const defaultSummaryWindow = time.Hour

// instanceSummary answers GET /v1/reports/summary: the instances fired in
// a window (the last hour unless since and until say otherwise) summed up
// by PostgreSQL — their count by state, the success rate, the run time
// percentiles, and with step the same bucket by bucket.
func (s *Service) instanceSummary(w http.ResponseWriter, r *http.Request) error {
	f, e := s.summaryFilter(r)
	if e != nil {
		return e
	}
	sum, err := s.opts.Store.InstanceSummary(r.Context(), f)
	if err != nil {
		return internal("sum up the instances", err)
	}
	writeJSON(w, http.StatusOK, sum)
	return nil
}

// summaryFilter reads the query of GET /v1/reports/summary.
func (s *Service) summaryFilter(r *http.Request) (store.SummaryFilter, *wire.Error) {
	var f store.SummaryFilter
	q, e := s.readQuery(r, "task", "since", "until", "step")
	if e != nil {
		return f, e
	}
	if f.Task, e = q.task("task"); e != nil {
		return f, e
	}
	now := s.opts.NowFunc()
	if f.Since, e = q.time("since", now.Add(-defaultSummaryWindow)); e != nil {
		return f, e
	}
	if f.Until, e = q.time("until", now); e != nil {
		return f, e
	}
	if !f.Since.Before(f.Until) {
		return f, badRequest("invalid_parameter", "since", "since (%s) is not before until (%s); the window must not be empty",
			f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339))
	}
	if v := q.Get("step"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return f, badRequest("invalid_parameter", "step", "step=%q is not a duration of at least 1s, such as 1m or 1h", v)
		}
		window := f.Until.Sub(f.Since)
		if n := (window + d - 1) / d; n > store.MaxSummaryBuckets {
			return f, badRequest("invalid_parameter", "step", "step=%s cuts the window of %s into %d buckets, more than %d; take a longer step",
				d, window.Round(time.Second), n, store.MaxSummaryBuckets)
		}
		f.Step = d
	}
	return f, nil
}
