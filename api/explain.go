package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ax-scheduler/ax/store"
)

// explainTick answers GET /v1/tasks/{name}/explain?at=INSTANT: why the
// task's tick at INSTANT did or did not run (see store.Store.ExplainTick).
func (s *Service) explainTick(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	q, e := s.readQuery(r, "at")
	if e != nil {
		return e
	}
	raw := q.Get("at")
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return badRequest("invalid_parameter", "at", "at=%q is not an RFC 3339 time such as 2026-03-29T02:30:00+02:00: give the tick to explain", raw)
	}
	x, err := s.opts.Store.ExplainTick(r.Context(), name, at, s.opts.NowFunc())
	if errors.Is(err, store.ErrNotFound) {
		return taskNotFound(name)
	}
	if err != nil {
		return internal("explain "+name, err)
	}
	writeJSON(w, http.StatusOK, x)
	return nil
}

// explainInstance answers GET /v1/instances/{id}/explain: the instance's
// decision timeline in words (see store.Store.ExplainInstance).
func (s *Service) explainInstance(w http.ResponseWriter, r *http.Request) error {
	id, e := instanceID(r)
	if e != nil {
		return e
	}
	x, err := s.opts.Store.ExplainInstance(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return instanceNotFound(id)
	}
	if err != nil {
		return internal(fmt.Sprintf("explain instance %d", id), err)
	}
	writeJSON(w, http.StatusOK, x)
	return nil
}
