package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// cancel asks the dispatcher to cancel an instance: the API writes no
// instance itself, so it publishes the order on the task's trigger subject,
// which the dispatcher applies as a guarded transition (and tells a running
// attempt's worker to stop). It answers with the instance once it is
// CANCELLED, or 202 with the instance as it is when the dispatcher has not
// applied it within RunWait.
func (s *Service) cancel(w http.ResponseWriter, r *http.Request) error {
	var req wire.CancelRequest
	id, err := s.instanceRequest(w, r, &req, `{"reason": "wrong input"}`)
	if err != nil {
		return err
	}
	if len(req.Reason) > 1000 {
		return badRequest("invalid_request", "reason", "reason is %d characters; keep it under 1000", len(req.Reason))
	}
	if !storable(req.Reason) {
		return badRequest("invalid_request", "reason", "reason holds a NUL character or bytes that are not UTF-8; remove them")
	}
	inst, err := s.opts.Store.GetInstance(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return instanceNotFound(id)
	}
	if err != nil {
		return internal(fmt.Sprintf("get instance %d", id), err)
	}
	if inst.State.Terminal() {
		return &wire.Error{Status: http.StatusConflict, Code: "instance_ended", Field: "id",
			Message: fmt.Sprintf("instance %d already ended %s; only an instance that has not ended can be cancelled", id, inst.State)}
	}
	who := operator(r)
	if req.Reason == "" {
		req.Reason = "cancelled by " + who
	}
	ev := schemas.TriggerEvent{
		EventID:  fmt.Sprintf("%s%d", schemas.CancelEventIDPrefix, id),
		Task:     inst.Task,
		Source:   schemas.SourceManual,
		Operator: who,
		FiredAt:  s.opts.NowFunc().UTC(),
		Cancel:   &schemas.CancelOf{InstanceID: id, Reason: req.Reason},
	}
	if _, err := streams.Publish(r.Context(), s.js, s.opts.Topology.APITrigger(inst.Task), streams.TriggerMsgID(inst.Task, ev.EventID), ev); err != nil {
		return internal(fmt.Sprintf("publish the cancel of instance %d", id), err)
	}
	inst, ended, err := awaitDispatcher(r.Context(), s.opts.RunWait, func(ctx context.Context) (schemas.Instance, bool, error) {
		in, err := s.opts.Store.GetInstance(ctx, id)
		return in, err == nil && in.State.Terminal(), err
	})
	if err != nil {
		return internal(fmt.Sprintf("get instance %d", id), err)
	}
	if err := s.redactOne(r.Context(), &inst); err != nil {
		return internal(fmt.Sprintf("redact instance %d", id), err)
	}
	status := http.StatusOK
	if !ended {
		status = http.StatusAccepted
	}
	writeJSON(w, status, inst)
	return nil
}
