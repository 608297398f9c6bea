package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// listAudit answers GET /v1/audit from PostgreSQL: instance transitions and
// operator actions merged, newest first. The store holds a record from the
// moment its change commits; AX_AUDIT once the auditor relayed it.
func (s *Service) listAudit(w http.ResponseWriter, r *http.Request) error {
	f, e := s.auditFilter(r)
	if e != nil {
		return e
	}
	recs, err := s.opts.Store.ListAudit(r.Context(), f)
	if errors.Is(err, store.ErrNotFound) {
		return badRequest("invalid_parameter", "before",
			"before=%q names no audit record; pass the id of the last record of the previous page", f.Before)
	}
	if err != nil {
		return internal("list audit records", err)
	}
	if recs == nil {
		recs = []schemas.AuditRecord{}
	}
	writeJSON(w, http.StatusOK, wire.AuditList{Records: recs})
	return nil
}

// auditFilter reads the query of GET /v1/audit, refusing unknown
// parameters: a misspelt filter must not silently list everything.
func (s *Service) auditFilter(r *http.Request) (store.AuditFilter, *wire.Error) {
	var f store.AuditFilter
	q, e := s.readQuery(r, "task", "instance", "operator", "since", "limit", "before")
	if e != nil {
		return f, e
	}
	switch task := q.Get("task"); task {
	case schemas.AuditTaskTokens, schemas.AuditTaskAlerts:
		// The actions on no task: token and alert changes.
		f.Task = task
	default:
		if f.Task, e = q.task("task"); e != nil {
			return f, e
		}
	}
	if inst := q.Get("instance"); inst != "" {
		id, err := strconv.ParseInt(inst, 10, 64)
		if err != nil || id < 1 {
			return f, badRequest("invalid_parameter", "instance",
				"instance=%q is not an instance id; use the positive number that ax fire or ax instance list printed", inst)
		}
		f.InstanceID = id
	}
	if op := q.Get("operator"); op != "" {
		if len(op) > 256 {
			return f, badRequest("invalid_parameter", "operator", "operator is %d bytes long; an operator name has at most 256", len(op))
		}
		f.Operator = op
	}
	if f.Since, e = q.time("since", time.Time{}); e != nil {
		return f, e
	}
	if f.Limit, e = q.limit("limit", store.MaxAuditLimit); e != nil {
		return f, e
	}
	if before := q.Get("before"); before != "" {
		if _, _, ok := schemas.ParseAuditID(before); !ok {
			return f, badRequest("invalid_parameter", "before",
				"before=%q is not an audit record id (t-<id> or o-<id>); pass the id of the last record of the previous page", before)
		}
		f.Before = before
	}
	return f, nil
}

// parseSince reads an RFC 3339 time, or a positive Go duration that counts
// back from now.
func (s *Service) parseSince(v string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, false
	}
	return s.opts.NowFunc().Add(-d), true
}
