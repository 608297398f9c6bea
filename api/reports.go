package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/metrics"
	"github.com/ax-scheduler/ax/store"
)

// healthReport answers GET /v1/reports/health with the fleet's health
// report (see schemas.HealthReport); the query may move its thresholds.
func (s *Service) healthReport(w http.ResponseWriter, r *http.Request) error {
	o, e := s.healthOptions(r)
	if e != nil {
		return e
	}
	o.Now = s.opts.NowFunc()
	rep, err := s.opts.Store.HealthReport(r.Context(), o)
	if err != nil {
		return internal("make the health report", err)
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// healthOptions reads the query of GET /v1/reports/health.
func (s *Service) healthOptions(r *http.Request) (store.HealthOptions, *wire.Error) {
	var o store.HealthOptions
	q, e := s.readQuery(r, "min_failures", "grace", "runs", "min_runs", "factor")
	if e != nil {
		return o, e
	}
	intParam := func(name string, lo, hi int, dst *int) *wire.Error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return badRequest("invalid_parameter", name, "%s=%q is not a whole number from %d to %d", name, v, lo, hi)
		}
		*dst = n
		return nil
	}
	for _, e := range []*wire.Error{
		intParam("min_failures", 1, 1000, &o.MinFailures),
		intParam("runs", 2, 1000, &o.Runs),
		intParam("min_runs", 2, 1000, &o.MinRuns),
	} {
		if e != nil {
			return o, e
		}
	}
	if v := q.Get("grace"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, badRequest("invalid_parameter", "grace", "grace=%q is not a positive duration, such as 1m or 1h", v)
		}
		o.Grace = d
	}
	if v := q.Get("factor"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		// Written so that NaN, which fails every comparison, is refused.
		if err != nil || !(f > 1 && f <= 1000) {
			return o, badRequest("invalid_parameter", "factor", "factor=%q is not a number above 1 and at most 1000", v)
		}
		o.Factor = f
	}
	if o.MinRuns > 0 && o.Runs > 0 && o.MinRuns > o.Runs {
		return o, badRequest("invalid_parameter", "min_runs", "min_runs=%d is more than runs=%d; it must be at most runs", o.MinRuns, o.Runs)
	}
	return o, nil
}

// metrics answers GET /metrics with Options.Metrics in the Prometheus
// exposition format.
func (s *Service) metrics(w http.ResponseWriter, r *http.Request) error {
	metrics.Handler(s.opts.Metrics).ServeHTTP(w, r)
	return nil
}
