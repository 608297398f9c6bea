package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
)

// health answers 200 when PostgreSQL answers a ping and the NATS connection
// is up, 503 naming what is down otherwise.
func (s *Service) health(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var down []string
	if err := s.opts.Store.Pool().Ping(ctx); err != nil {
		down = append(down, "postgres: "+err.Error())
	}
	if !s.opts.Conn.IsConnected() {
		down = append(down, "nats: connection "+strings.ToLower(s.opts.Conn.Status().String()))
	}
	if len(down) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, wire.HealthBody{Status: "down", Error: &wire.Error{
			Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "down: " + strings.Join(down, "; ")}})
		return nil
	}
	writeJSON(w, http.StatusOK, wire.HealthBody{Status: "ok"})
	return nil
}
