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
	items, err := taskdef.SplitTriggerBatch(data)
	if err != nil {
		ve, _ := errors.AsType[*schemas.ValidationError](err)
		if ve == nil {
			return badRequest("invalid_batch", "", "%v", err)
		}
		return validationError("invalid_batch", ve)
	}
	if len(items) == 0 {
		return badRequest("invalid_batch", "", "the batch holds no firing; send an array of 1 to %d firings like [{\"payload\": {...}}]", schemas.MaxTriggerBatch)
	}
	for i, item := range items {
		if item[0] != '{' {
			return badRequest("invalid_batch", fmt.Sprintf("[%d]", i),
				"firing %d of the batch is not a JSON object; a batch is an array of firings like [{\"payload\": {...}}, ...]", i)
		}
	}
	rec, err := s.fireableTask(r, name)
	if err != nil {
		return err
	}
	results := make([]wire.FireBatchItem, len(items))
	refuse := func(i int, e *wire.Error) { results[i] = wire.FireBatchItem{Status: e.Status, Error: e} }
	var now []schemas.TriggerEvent
	var nowAt []int
	for i, item := range items {
		req, e := decodeFireRequest(item)
		if e != nil {
			refuse(i, e)
			continue
		}
		ev, e := firingOf(r, name, req, s.opts.NowFunc())
		if e != nil {
			refuse(i, e)
			continue
		}
		if ev.PayloadVersion == 0 {
			ev.PayloadVersion = schemas.DefaultSchemaVersion
		}
		if e := validateEvent(ev); e != nil {
			refuse(i, e)
			continue
		}
		ev, e, err := checkFiring(ev, rec)
		if err != nil {
			return internal("check the payload of task "+name, err)
		}
		if e != nil {
			refuse(i, e)
			continue
		}
		eventID := ev.EventID
		if ev.IdempotencyKey != "" {
			eventID = schemas.IdempotencyEventIDPrefix + ev.IdempotencyKey
			res, e, err := s.repeatOf(r.Context(), ev, eventID)
			switch {
			case err != nil:
				return internal("look for an earlier firing of task "+name+" event "+eventID, err)
			case e != nil:
				refuse(i, e)
				continue
			case res != nil:
				status := http.StatusOK
				if res.InstanceID == 0 {
					status = http.StatusAccepted
				}
				results[i] = wire.FireBatchItem{Status: status, FireResult: res}
				continue
			}
		}
		if ev.RunAt.After(ev.FiredAt) {
			if subject, err := s.publishDelayed(r.Context(), ev, eventID); err != nil {
				refuse(i, s.unpublished(subject, err))
				continue
			}
			results[i] = wire.FireBatchItem{Status: http.StatusAccepted, FireResult: &wire.FireResult{Task: name, EventID: eventID, RunAt: ev.RunAt}}
			continue
		}
		now = append(now, ev)
		nowAt = append(nowAt, i)
		results[i] = wire.FireBatchItem{Status: http.StatusAccepted, FireResult: &wire.FireResult{Task: name, EventID: eventID}}
	}
	if len(now) > 0 {
		subject := s.opts.Topology.APITrigger(name)
		err := s.publishBatch(r, subject, name, now)
		if err != nil {
			s.opts.Logger.Error().Err(err).Str("task", name).Int("firings", len(now)).Msg("publish batch of firings")
			for _, i := range nowAt {
				refuse(i, s.unpublished(subject, err))
			}
		} else {
			s.opts.Logger.Info().Str("task", name).Str("operator", operator(r)).Int("firings", len(now)).Msg("task fired in bulk")
		}
	}
	writeJSON(w, http.StatusAccepted, wire.FireBatchResult{Results: results})
	return nil
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
	_, err = s.js.PublishMsg(r.Context(), m)
	return err
}

// unpublished is the error of a firing that could not be published.
func (s *Service) unpublished(subject string, err error) *wire.Error {
	return &wire.Error{Status: http.StatusServiceUnavailable, Code: "trigger_unavailable",
		Message: fmt.Sprintf("cannot publish the firing to %s: %v; check that NATS and the %s stream are up, then fire again with the same event_id", subject, err, s.opts.Topology.FiringsStream())}
}
