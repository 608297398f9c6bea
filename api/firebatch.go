package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// fireBatch answers POST /v1/tasks/{name}/runs whose body is a JSON array
// of firings (up to schemas.MaxTriggerBatch): each is checked as a single
// firing is, and refused alone with the error a single firing so bad gets;
// the firings due now travel in one trigger message (a batch of firings,
// see docs/protocol.md), those due later each as a single firing does. The
// answer is 202 with a result a firing; the API does not wait for the
// instances (GET /v1/tasks/{name}/runs/{event_id} reads each). What the
// whole batch cannot be (not an array of at most MaxTriggerBatch objects, a task
// that does not exist, is disabled or paused) is answered as for a single
// firing.
func (s *Service) fireBatch(w http.ResponseWriter, r *http.Request, name string, data []byte) error {
	items, err := splitFireBatch(data)
	if err != nil {
		return err
	}
	rec, err := s.fireableTask(r, name)
	if err != nil {
		return err
	}
	results := make([]wire.FireBatchItem, len(items))
	var now []schemas.TriggerEvent
	var nowAt []int
	for i, item := range items {
		res, due, err := s.batchFiring(r, name, rec, item)
		if err != nil {
			return err
		}
		results[i] = res
		if due != nil {
			now = append(now, *due)
			nowAt = append(nowAt, i)
		}
	}
	if len(now) > 0 {
		s.publishDue(r, name, now, nowAt, results)
	}
	writeJSON(w, http.StatusAccepted, wire.FireBatchResult{Results: results})
	return nil
}

// splitFireBatch splits a batch's body into its firings, or returns why
// it is no batch: not an array of 1 to MaxTriggerBatch objects.
func splitFireBatch(data []byte) ([][]byte, error) {
	items, err := taskdef.SplitTriggerBatch(data)
	if err != nil {
		ve, _ := errors.AsType[*schemas.ValidationError](err)
		if ve == nil {
			return nil, badRequest("invalid_batch", "", "%v", err)
		}
		return nil, validationError("invalid_batch", ve)
	}
	if len(items) == 0 {
		return nil, badRequest("invalid_batch", "", "the batch holds no firing; send an array of 1 to %d firings like [{\"payload\": {...}}]", schemas.MaxTriggerBatch)
	}
	for i, item := range items {
		if item[0] != '{' {
			return nil, badRequest("invalid_batch", fmt.Sprintf("[%d]", i),
				"firing %d of the batch is not a JSON object; a batch is an array of firings like [{\"payload\": {...}}, ...]", i)
		}
	}
	return items, nil
}

// batchFiring checks one firing of a batch of task name: refused, answered
// as a repeat, or published as a delayed firing, it returns its result;
// due now, it returns the firing as due, and res its result once the batch
// is published. An error fails the whole batch.
func (s *Service) batchFiring(r *http.Request, name string, rec store.TaskRecord, item []byte) (res wire.FireBatchItem, due *schemas.TriggerEvent, err error) {
	refused := func(e *wire.Error) wire.FireBatchItem { return wire.FireBatchItem{Status: e.Status, Error: e} }
	req, e := decodeFireRequest(item)
	if e != nil {
		return refused(e), nil, nil
	}
	ev, e := firingOf(r, name, req, s.opts.NowFunc())
	if e != nil {
		return refused(e), nil, nil
	}
	if ev.PayloadVersion == 0 {
		ev.PayloadVersion = schemas.DefaultSchemaVersion
	}
	if e := validateEvent(ev); e != nil {
		return refused(e), nil, nil
	}
	ev, e, err = checkFiring(ev, rec)
	if err != nil {
		return res, nil, internal("check the payload of task "+name, err)
	}
	if e != nil {
		return refused(e), nil, nil
	}
	eventID := ev.EventID
	if ev.IdempotencyKey != "" {
		eventID = schemas.IdempotencyEventIDPrefix + ev.IdempotencyKey
		rep, e, err := s.repeatOf(r.Context(), ev, eventID)
		switch {
		case err != nil:
			return res, nil, internal("look for an earlier firing of task "+name+" event "+eventID, err)
		case e != nil:
			return refused(e), nil, nil
		case rep != nil:
			status := http.StatusOK
			if rep.InstanceID == 0 {
				status = http.StatusAccepted
			}
			return wire.FireBatchItem{Status: status, FireResult: rep}, nil, nil
		}
	}
	if ev.RunAt.After(ev.FiredAt) {
		if subject, err := s.publishDelayed(r.Context(), ev, eventID); err != nil {
			return refused(s.unpublished(subject, err)), nil, nil
		}
		return wire.FireBatchItem{Status: http.StatusAccepted, FireResult: &wire.FireResult{Task: name, EventID: eventID, RunAt: ev.RunAt}}, nil, nil
	}
	return wire.FireBatchItem{Status: http.StatusAccepted, FireResult: &wire.FireResult{Task: name, EventID: eventID}}, &ev, nil
}

// publishDue publishes the firings of task name due now, at the positions
// nowAt of the batch, as one message; if it fails, their results become
// the refusal.
func (s *Service) publishDue(r *http.Request, name string, now []schemas.TriggerEvent, nowAt []int, results []wire.FireBatchItem) {
	subject := s.opts.Topology.APITrigger(name)
	err := s.publishBatch(r, subject, name, now)
	if err != nil {
		s.opts.Logger.Error().Err(err).Str("task", name).Int("firings", len(now)).Msg("publish batch of firings")
		for _, i := range nowAt {
			e := s.unpublished(subject, err)
			results[i] = wire.FireBatchItem{Status: e.Status, Error: e}
		}
	} else {
		s.opts.Logger.Info().Str("task", name).Str("operator", operator(r)).Int("firings", len(now)).Msg("task fired in bulk")
	}
}

// publishBatch publishes firings of task as one batch message to subject.
func (s *Service) publishBatch(r *http.Request, subject, task string, firings []schemas.TriggerEvent) error {
	data, err := schemas.MarshalTriggerBatch(firings)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, streams.TriggerMsgID(task, "batch-"+nuid.Next()))
	streams.InjectTrace(r.Context(), m.Header)
	_, err = s.js.PublishMsg(r.Context(), m)
	return err
}

// unpublished is the error of a firing that could not be published.
func (s *Service) unpublished(subject string, err error) *wire.Error {
	return &wire.Error{Status: http.StatusServiceUnavailable, Code: "trigger_unavailable",
		Message: fmt.Sprintf("cannot publish the firing to %s: %v; check that NATS and the %s stream are up, then fire again with the same event_id", subject, err, s.opts.Topology.FiringsStream())}
}
