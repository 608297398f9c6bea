package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// maxBackfillTicks bounds the ticks of one backfill.
const maxBackfillTicks = 100_000

// createBackfill stores a backfill of a task's cron trigger over a past
// range; the trigger service fires its ticks (trigger/backfill.go). The
// API writes no instance and fires nothing itself: the trigger service
// holds the schedules and the key of the cron firings' ids, so a
// backfilled tick is the tick's own firing.
func (s *Service) createBackfill(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.BackfillRequest
	if e := decodeOptionalBody(data, &req, `{"from": "2026-03-01T00:00:00Z", "to": "2026-03-31T23:59:59Z"}`); e != nil {
		return e
	}
	rec, err := s.fireableTask(r, name)
	if err != nil {
		return err
	}
	b, err := s.backfillOf(r, name, req)
	if err != nil {
		return err
	}
	if b, err = countBackfill(b, rec.Definition.Triggers, req.Trigger); err != nil {
		return err
	}
	out, err := s.opts.Store.CreateBackfill(r.Context(), b)
	if err != nil {
		return internal("create backfill of "+name, err)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// backfillOf is the backfill req asks of task name, defaults filled in,
// or why it cannot be.
func (s *Service) backfillOf(r *http.Request, name string, req wire.BackfillRequest) (schemas.Backfill, error) {
	b := schemas.Backfill{Task: name, From: req.From.UTC(), To: req.To.UTC(), Priority: req.Priority,
		MaxRunning: req.MaxRunning, Overlap: req.Overlap, Rate: req.Rate, Operator: operator(r)}
	if b.Priority == "" {
		b.Priority = string(schemas.PriorityLow)
	}
	if b.MaxRunning == 0 {
		b.MaxRunning = 1
	}
	if b.Overlap == "" {
		b.Overlap = store.OverlapAllow
	}
	if b.Rate == 0 {
		b.Rate = 10
	}
	switch {
	case req.From.IsZero() || req.To.IsZero():
		return b, badRequest("invalid_request", "from", "give from and to, RFC 3339 times like 2026-03-01T00:00:00Z")
	case b.To.Before(b.From):
		return b, badRequest("invalid_request", "to", "to (%s) is before from (%s)", b.To.Format(time.RFC3339), b.From.Format(time.RFC3339))
	case b.To.After(s.opts.NowFunc()):
		return b, badRequest("invalid_request", "to", "to (%s) is in the future; a backfill fires past ticks only, the schedule fires the rest", b.To.Format(time.RFC3339))
	case !schemas.Priority(b.Priority).Valid():
		return b, badRequest("invalid_request", "priority", "priority %q is not urgent, normal or low", b.Priority)
	case b.Overlap != store.OverlapAllow && b.Overlap != store.OverlapSkip:
		return b, badRequest("invalid_request", "overlap", "overlap %q is not allow or skip", b.Overlap)
	case b.MaxRunning < 1 || b.MaxRunning > 1000:
		return b, badRequest("invalid_request", "max_running", "max_running %d is not from 1 to 1000", b.MaxRunning)
	case b.Rate <= 0 || b.Rate > 1000:
		return b, badRequest("invalid_request", "rate", "rate %g is not above 0 and at most 1000 ticks a second", b.Rate)
	}
	return b, nil
}

// countBackfill sets the backfill's trigger, the cron trigger of triggers
// at trigger or the first, and counts the ticks of its range.
func countBackfill(b schemas.Backfill, triggers []schemas.Trigger, trigger *int) (schemas.Backfill, error) {
	name := b.Task
	index := -1
	for i, tr := range triggers {
		if tr.Type == schemas.TriggerTypeCron && (trigger == nil || *trigger == i) {
			index = i
			break
		}
	}
	if index < 0 {
		return b, badRequest("invalid_request", "trigger", "task %s has no cron trigger%s to backfill", name, triggerWord(trigger))
	}
	b.TriggerIndex = index
	tr := triggers[index].WithDefaults()
	sched, err := taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone)
	if err != nil {
		return b, internal("parse the schedule of task "+name, err)
	}
	for t := sched.Next(b.From.Add(-time.Nanosecond)); !t.IsZero() && !t.After(b.To); t = sched.Next(t) {
		if b.Total++; b.Total > maxBackfillTicks {
			return b, badRequest("invalid_request", "to", "the range holds more than %d ticks of %s; backfill a shorter range", maxBackfillTicks, tr.Schedule)
		}
	}
	return b, nil
}

func triggerWord(i *int) string {
	if i == nil {
		return ""
	}
	return " at index " + strconv.Itoa(*i)
}

// backfillID reads the path's id.
func backfillID(r *http.Request) (int64, *wire.Error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("invalid_backfill_id", "id", "%q is not a backfill id: use the number ax backfill printed", raw)
	}
	return id, nil
}

func backfillNotFound(id int64) *wire.Error {
	return &wire.Error{Status: http.StatusNotFound, Code: "backfill_not_found", Field: "id",
		Message: fmt.Sprintf("backfill %d does not exist; list backfills with GET /v1/backfills (ax backfill list)", id)}
}

// withProgress fills b's instance counts.
func (s *Service) withProgress(r *http.Request, b *schemas.Backfill) error {
	return s.opts.Store.BackfillProgress(r.Context(), b, schemas.CronEventID(b.Task, b.TriggerIndex, b.From),
		schemas.CronEventID(b.Task, b.TriggerIndex, b.To))
}

func (s *Service) listBackfills(w http.ResponseWriter, r *http.Request) error {
	q, e := s.readQuery(r, "task", "limit")
	if e != nil {
		return e
	}
	task, e := q.task("task")
	if e != nil {
		return e
	}
	limit, e := q.limit("limit", 1000)
	if e != nil {
		return e
	}
	list, err := s.opts.Store.ListBackfills(r.Context(), task, limit)
	if err != nil {
		return internal("list backfills", err)
	}
	for i := range list {
		if err := s.withProgress(r, &list[i]); err != nil {
			return internal("list backfills", err)
		}
	}
	if list == nil {
		list = []schemas.Backfill{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"backfills": list})
	return nil
}

func (s *Service) getBackfill(w http.ResponseWriter, r *http.Request) error {
	id, e := backfillID(r)
	if e != nil {
		return e
	}
	b, err := s.opts.Store.GetBackfill(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return backfillNotFound(id)
	}
	if err != nil {
		return internal("get backfill", err)
	}
	if err := s.withProgress(r, &b); err != nil {
		return internal("get backfill", err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// setBackfill returns the handler that moves a backfill to state to.
func setBackfill(to schemas.BackfillState) func(s *Service, w http.ResponseWriter, r *http.Request) error {
	return func(s *Service, w http.ResponseWriter, r *http.Request) error {
		id, e := backfillID(r)
		if e != nil {
			return e
		}
		b, err := s.opts.Store.SetBackfillState(r.Context(), id, to, operator(r))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return backfillNotFound(id)
		case errors.Is(err, store.ErrBackfillState):
			return &wire.Error{Status: http.StatusConflict, Code: "backfill_state", Field: "id",
				Message: fmt.Sprintf("backfill %d is %s, so it cannot become %s", id, b.State, to)}
		case err != nil:
			return internal("set backfill state", err)
		}
		if err := s.withProgress(r, &b); err != nil {
			return internal("get backfill", err)
		}
		writeJSON(w, http.StatusOK, b)
		return nil
	}
}
