package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// listLimits answers GET /v1/limits: every named limit with its use.
func (s *Service) listLimits(w http.ResponseWriter, r *http.Request) error {
	limits, err := s.opts.Store.ListLimits(r.Context())
	if err != nil {
		return internal("list limits", err)
	}
	if limits == nil {
		limits = []schemas.LimitUsage{}
	}
	writeJSON(w, http.StatusOK, wire.LimitList{Limits: limits})
	return nil
}

// getLimit answers GET /v1/limits/{name}.
func (s *Service) getLimit(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	u, err := s.opts.Store.GetLimit(r.Context(), name)
	if err != nil {
		return limitError("get", name, err)
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

// putLimit answers PUT /v1/limits/{name}: it creates the limit or
// replaces its bounds, key and overrides. It takes effect at the
// dispatchers' next admission.
func (s *Service) putLimit(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var l schemas.Limit
	if e := decodeStrict(data, &l, `a limit, such as {"name": "supplier-api", "rate": "50/s", "key": "{{.supplier}}"}`); e != nil {
		return e
	}
	if l.Name == "" {
		l.Name = name
	}
	if l.Name != name {
		return badRequest("invalid_limit", "name", "the body names limit %q but the path %q; make them equal", l.Name, name)
	}
	if problems := l.Problems(); len(problems) > 0 {
		return validationError("invalid_limit", &schemas.ValidationError{What: "limit", Problems: problems})
	}
	out, err := s.opts.Store.ApplyLimit(r.Context(), l)
	if err != nil {
		return internal("apply limit "+name, err)
	}
	s.opts.Logger.Info().Str("limit", name).Str("operator", operator(r)).Msg("limit applied")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteLimit answers DELETE /v1/limits/{name}.
func (s *Service) deleteLimit(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := s.opts.Store.DeleteLimit(r.Context(), name); err != nil {
		return limitError("delete", name, err)
	}
	s.opts.Logger.Info().Str("limit", name).Str("operator", operator(r)).Msg("limit deleted")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setLimitPaused answers POST /v1/limits/{name}/pause and /resume.
func (s *Service) setLimitPaused(paused bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		u, err := s.opts.Store.SetLimitPaused(r.Context(), name, paused)
		if err != nil {
			return limitError("pause", name, err)
		}
		s.opts.Logger.Info().Str("limit", name).Str("operator", operator(r)).Bool("paused", paused).Msg("limit paused or resumed")
		writeJSON(w, http.StatusOK, u)
		return nil
	}
}

func limitError(op, name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &wire.Error{Status: http.StatusNotFound, Code: "limit_not_found", Field: "name",
			Message: fmt.Sprintf("limit %q does not exist; list them with GET /v1/limits (ax limit list)", name)}
	}
	return internal(op+" limit "+name, err)
}
