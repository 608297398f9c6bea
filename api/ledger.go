package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/ax-scheduler/ax/store"
)

// defaultLedgerWindow is how far back GET /v1/tasks/{name}/ledger looks
// without from.
const defaultLedgerWindow = 24 * time.Hour

// ledger answers GET /v1/tasks/{name}/ledger: every instant the task's
// cron triggers say it should have fired in [from, to) — the last day by
// default — with what became of it, and a summary (see store.Store.Ledger).
func (s *Service) ledger(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	q, e := s.readQuery(r, "from", "to")
	if e != nil {
		return e
	}
	now := s.opts.NowFunc()
	to, e := q.time("to", now)
	if e != nil {
		return e
	}
	from, e := q.time("from", to.Add(-defaultLedgerWindow))
	if e != nil {
		return e
	}
	if !from.Before(to) {
		return badRequest("invalid_parameter", "from", "from (%s) is not before to (%s); the range must not be empty",
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	l, err := s.opts.Store.Ledger(r.Context(), name, from, to, now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return taskNotFound(name)
	case errors.Is(err, store.ErrTooManyTicks):
		return badRequest("invalid_parameter", "from", "%s", err.Error())
	case err != nil:
		return internal("compute the ledger", err)
	}
	writeJSON(w, http.StatusOK, l)
	return nil
}
