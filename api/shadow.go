package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ax-scheduler/ax/store"
)

// setShadow answers a request that puts a task in shadow mode (shadow) or
// takes it out, enabled or not (see store.Store.SetTaskShadow), and tells
// trigger services about the change: a task in shadow mode is enabled, so
// its schedules fire.
func (s *Service) setShadow(shadow, enabled bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, e := taskName(r)
		if e != nil {
			return e
		}
		rec, err := s.opts.Store.SetTaskShadow(r.Context(), name, shadow, enabled, operator(r))
		if errors.Is(err, store.ErrNotFound) {
			return taskNotFound(name)
		}
		if err != nil {
			return internal(fmt.Sprintf("set task %s shadow=%t", name, shadow), err)
		}
		s.announceTask(r.Context(), rec)
		s.opts.Logger.Info().Str("task", name).Bool("shadow", shadow).Bool("enabled", rec.Enabled).
			Str("operator", operator(r)).Msg("task shadow mode set")
		writeJSON(w, http.StatusOK, taskInfo(rec))
		return nil
	}
}
