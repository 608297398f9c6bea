package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Scheduled firings (issue 27). A delayed firing (run_at, delay) waits for
// its due time as a one-shot message schedule on ax.sched.<task>.<event>
// in the firings stream, published by the API or, for a far due time, the
// dispatcher: no instance exists until then. The API reads them from the
// stream (the last message of each such subject that is still a
// schedule), cancels one by publishing a plain message on its subject,
// which replaces the schedule so that the server never fires it (and
// pendingFiring no longer finds it), and fires one now by cancelling it
// and publishing the firing, due at once, under the same event id.

// maxFiringScan bounds how many messages of the firings stream one
// listing reads.
const maxFiringScan = 20000

// cancelledHeader marks the message that cancelled a pending firing; its
// value names the operator.
const cancelledHeader = "Ax-Cancelled-By"

// listFirings answers GET /v1/firings: the pending delayed firings, of
// one task with ?task=, soonest due first, at most ?limit= (default 100).
func (s *Service) listFirings(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("invalid_parameter", "limit", "limit=%q must be a whole number from 1 to 1000", v)
		}
		limit = n
	}
	task := q.Get("task")
	if task != "" && !taskNameRE.MatchString(task) {
		return badRequest("invalid_parameter", "task", "task=%q is not a task name: use 1-64 lower-case letters, digits, '_' and '-'", task)
	}
	list, truncated, err := s.pendingFirings(r.Context(), task)
	if err != nil {
		return internal("list the pending firings", err)
	}
	slices.SortFunc(list, func(a, b wire.PendingFiring) int { return a.RunAt.Compare(b.RunAt) })
	if len(list) > limit {
		list, truncated = list[:limit], true
	}
	if err := s.redactPending(r.Context(), list); err != nil {
		return internal("redact the pending firings", err)
	}
	writeJSON(w, http.StatusOK, wire.FiringList{Firings: list, Truncated: truncated})
	return nil
}

// pendingFirings reads the pending firings of task ("" for every task)
// from the firings stream: the last message of each schedule subject,
// kept when it is still a schedule.
func (s *Service) pendingFirings(ctx context.Context, task string) ([]wire.PendingFiring, bool, error) {
	stream, err := s.js.Stream(ctx, s.opts.Topology.FiringsStream())
	if err != nil {
		return nil, false, err
	}
	filter := s.opts.Topology.SchedFiring("*", "x")
	filter = filter[:len(filter)-1] + ">"
	if task != "" {
		filter = s.opts.Topology.SchedFiring(task, "x")
		filter = filter[:len(filter)-1] + ">"
	}
	last := map[string]*jetstream.RawStreamMsg{}
	truncated := false
	for seq, n := uint64(1), 0; ; n++ {
		if n == maxFiringScan {
			truncated = true
			break
		}
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s at %d: %w", filter, seq, err)
		}
		last[m.Subject] = m
		seq = m.Sequence + 1
	}
	var out []wire.PendingFiring
	for _, m := range last {
		if m.Header.Get(streams.HeaderSchedule) == "" {
			continue
		}
		ev, err := taskdef.ParseTriggerEvent(m.Data)
		if err != nil {
			continue // not a firing AX wrote; nothing to show
		}
		out = append(out, pendingOf(ev))
	}
	return out, truncated, nil
}

func pendingOf(ev schemas.TriggerEvent) wire.PendingFiring {
	eventID := ev.EventID
	if eventID == "" && ev.IdempotencyKey != "" {
		eventID = schemas.IdempotencyEventIDPrefix + ev.IdempotencyKey
	}
	return wire.PendingFiring{Pending: true, Task: ev.Task, EventID: eventID, RunAt: ev.RunAt, FiredAt: ev.FiredAt,
		Source: ev.Source, Operator: ev.Operator, Payload: ev.Payload}
}

// redactPending hides the redacted fields of the firings' payloads, as
// [Service.redact] does an instance's.
func (s *Service) redactPending(ctx context.Context, list []wire.PendingFiring) error {
	ins := make([]schemas.Instance, len(list))
	for i, f := range list {
		ins[i] = schemas.Instance{Task: f.Task, Payload: f.Payload}
	}
	if err := s.redact(ctx, ins); err != nil {
		return err
	}
	for i := range list {
		list[i].Payload = ins[i].Payload
	}
	return nil
}

// firingNotPending is the 404 of an action on a firing that does not wait.
func firingNotPending(task, eventID string) *wire.Error {
	return &wire.Error{Status: http.StatusNotFound, Code: "firing_not_pending", Field: "event_id",
		Message: fmt.Sprintf("task %q has no pending delayed firing %q: it fired (see GET /v1/tasks/%s/runs/%s), was cancelled, or never was; list the pending ones with GET /v1/firings (ax fire list)",
			task, eventID, task, eventID)}
}

// cancelFiring answers POST /v1/tasks/{name}/runs/{event_id}/cancel: the
// pending firing's schedule is replaced, so it never fires, and the
// action is recorded in the audit trail. A firing due within the next
// second may already be in the dispatcher's hands: it is no longer
// pending and the answer is 404.
func (s *Service) cancelFiring(w http.ResponseWriter, r *http.Request) error {
	ev, e, err := s.takeFiring(r, schemas.ActionCancelFiring)
	if err != nil || e != nil {
		return errOr(e, err)
	}
	out := []wire.PendingFiring{pendingOf(ev)}
	if err := s.redactPending(r.Context(), out); err != nil {
		return internal("redact the firing", err)
	}
	writeJSON(w, http.StatusOK, out[0])
	return nil
}

// fireFiringNow answers POST /v1/tasks/{name}/runs/{event_id}/fire: the
// pending firing is cancelled and fired at once under its event id, so
// the instance it makes is the one GET /v1/tasks/{name}/runs/{event_id}
// then shows. It answers like POST /v1/tasks/{name}/runs.
func (s *Service) fireFiringNow(w http.ResponseWriter, r *http.Request) error {
	ev, e, err := s.takeFiring(r, schemas.ActionFireNow)
	if err != nil || e != nil {
		return errOr(e, err)
	}
	ev.FiredAt = s.opts.NowFunc().UTC()
	ev.RunAt = ev.FiredAt
	return s.publishFiring(w, r, ev)
}

// takeFiring cancels the pending firing the request names and records
// action; it returns the firing.
func (s *Service) takeFiring(r *http.Request, action schemas.OperatorAction) (schemas.TriggerEvent, *wire.Error, error) {
	name, e := taskName(r)
	if e != nil {
		return schemas.TriggerEvent{}, e, nil
	}
	eventID := r.PathValue("event_id")
	ev, ok, err := s.pendingFiring(r.Context(), name, eventID)
	if err != nil {
		return ev, nil, internal("read the pending firing "+eventID+" of task "+name, err)
	}
	if !ok {
		return ev, firingNotPending(name, eventID), nil
	}
	subject := s.opts.Topology.SchedFiring(name, eventID)
	m := nats.NewMsg(subject)
	m.Header.Set(cancelledHeader, operator(r))
	m.Data = []byte("{}")
	streams.InjectTrace(r.Context(), m.Header)
	if _, err := s.js.PublishMsg(r.Context(), m); err != nil {
		return ev, nil, internal("cancel the schedule "+subject, err)
	}
	_, err = s.opts.Store.RecordAction(r.Context(), store.Action{Action: action, Task: name, Operator: operator(r),
		Reason: fmt.Sprintf("delayed firing %s due at %s", eventID, ev.RunAt.Format("2006-01-02T15:04:05.000Z07:00"))})
	if err != nil {
		return ev, nil, internal("record the action on firing "+eventID, err)
	}
	return ev, nil, nil
}

// errOr returns e when it is set, else err.
func errOr(e *wire.Error, err error) error {
	if e != nil {
		return e
	}
	return err
}
