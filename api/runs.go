package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// FireRequest is the body of POST /v1/tasks/{name}/runs. Every field may be
// left out, and so may the body.
type FireRequest struct {
	// Payload is handed to the handler as it is (any JSON value).
	Payload json.RawMessage `json:"payload,omitempty"`
	// PayloadVersion must equal the task's schema_version; 0 means 1.
	PayloadVersion int `json:"payload_version,omitempty"`
	// EventID identifies the firing: firing again with the same id makes no
	// second instance. Empty means a new random id.
	EventID string `json:"event_id,omitempty"`
	// Priority overrides the task's priority for this firing.
	Priority schemas.Priority `json:"priority,omitempty"`
	// Operator names who fires the task; when set, the firing is a manual one.
	Operator string `json:"operator,omitempty"`
}

// FireResult is the answer to POST /v1/tasks/{name}/runs: 201 with the
// instance when the dispatcher created it within the API's RunWait, 202 with
// only the event id (InstanceID 0) when it had not yet.
type FireResult struct {
	InstanceID int64         `json:"instance_id,omitempty"`
	EventID    string        `json:"event_id"`
	State      schemas.State `json:"state,omitempty"`
}

// fireFields lists the fields of FireRequest for the unknown-field message.
const fireFields = "payload, payload_version, event_id, priority, operator"

func (s *Service) fire(w http.ResponseWriter, r *http.Request) {
	name, e := taskName(r)
	if e != nil {
		writeError(w, e)
		return
	}
	req, e := s.readFireRequest(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	ev := schemas.TriggerEvent{
		EventID:        req.EventID,
		Task:           name,
		Source:         schemas.SourceEvent,
		Operator:       req.Operator,
		Payload:        req.Payload,
		PayloadVersion: req.PayloadVersion,
		Priority:       req.Priority,
		FiredAt:        s.opts.NowFunc().UTC(),
	}
	if ev.EventID == "" {
		ev.EventID = nuid.Next()
	}
	if ev.Operator != "" {
		ev.Source = schemas.SourceManual
	}
	if ev.PayloadVersion == 0 {
		ev.PayloadVersion = schemas.DefaultSchemaVersion
	}
	if e := validateEvent(ev); e != nil {
		writeError(w, e)
		return
	}

	rec, err := s.opts.Store.GetTask(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, taskNotFound(name))
		return
	}
	if err != nil {
		s.internalError(w, r, "get task "+name, err)
		return
	}
	if !rec.Enabled {
		writeError(w, &Error{Status: http.StatusConflict, Code: "task_disabled", Field: "name",
			Message: fmt.Sprintf("task %q is disabled, so it cannot be fired; enable it with POST /v1/tasks/%s/enable (ax task enable %s)", name, name, name)})
		return
	}
	if want := max(rec.Definition.SchemaVersion, schemas.DefaultSchemaVersion); ev.PayloadVersion != want {
		writeError(w, &Error{Status: http.StatusUnprocessableEntity, Code: "payload_version_mismatch", Field: "payload_version",
			Message: fmt.Sprintf("payload_version %d does not match the schema_version %d of task %q (version %d); send a payload of version %d with payload_version %d",
				ev.PayloadVersion, want, name, rec.Version, want, want)})
		return
	}

	if err := schemas.ValidatePayload(rec.Definition.PayloadSchema, ev.Payload); err != nil {
		ve, ok := errors.AsType[*schemas.ValidationError](err)
		if !ok {
			s.internalError(w, r, "check the payload of task "+name, err)
			return
		}
		e := validationError("invalid_payload", ve)
		e.Status = http.StatusUnprocessableEntity
		e.Message += fmt.Sprintf("; task %q (version %d) declares a payload_schema that the payload must satisfy", name, rec.Version)
		writeError(w, e)
		return
	}

	subject := s.opts.Topology.Trigger(name)
	if _, err := streams.Publish(r.Context(), s.js, subject, ev.EventID, ev); err != nil {
		s.opts.Logger.Error().Err(err).Str("task", name).Str("event_id", ev.EventID).Msg("publish trigger event")
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: "trigger_unavailable",
			Message: fmt.Sprintf("cannot publish the firing to %s: %v; check that NATS and the %s stream are up, then fire again with the same event_id", subject, err, s.opts.Topology.TriggersStream())})
		return
	}
	s.opts.Logger.Info().Str("task", name).Str("event_id", ev.EventID).Str("operator", ev.Operator).Msg("task fired")

	in, ok, err := s.awaitInstance(r.Context(), name, ev.EventID)
	if err != nil {
		// The firing is in the stream: the instance will come. Say so.
		s.opts.Logger.Warn().Err(err).Str("task", name).Str("event_id", ev.EventID).Msg("await instance")
	}
	if !ok {
		writeJSON(w, http.StatusAccepted, FireResult{EventID: ev.EventID})
		return
	}
	writeJSON(w, http.StatusCreated, FireResult{InstanceID: in.ID, EventID: ev.EventID, State: in.State})
}

// readFireRequest decodes the optional body of a firing, refusing unknown
// fields and anything after the JSON object.
func (s *Service) readFireRequest(w http.ResponseWriter, r *http.Request) (FireRequest, *Error) {
	var req FireRequest
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return req, e
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return req, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fireDecodeError(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, badRequest("malformed_json", "", "the body holds more than one JSON value; send one object like {\"payload\": {...}}")
	}
	return req, nil
}

func fireDecodeError(data []byte, err error) *Error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return badRequest("invalid_request", "", "the body must be a JSON object like {\"payload\": {...}}, not a JSON %s", te.Value)
		}
		return badRequest("invalid_request", te.Field, "field %s must be a %s, not a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field = strings.Trim(field, `"`)
		return badRequest("unknown_field", field, "unknown field %q; a firing takes only %s", field, fireFields)
	}
	return jsonSyntaxError(data, err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32":
		return "whole number"
	case "string":
		return "string"
	}
	return goKind
}

// validateEvent checks a firing against trigger.schema.json, the rules the
// dispatcher applies, so that the API never publishes what it would refuse.
// The event is built from the request, so the problems name its fields.
func validateEvent(ev schemas.TriggerEvent) *Error {
	data, err := json.Marshal(ev)
	if err != nil {
		return badRequest("invalid_request", "payload", "cannot encode the firing: %v", err)
	}
	if _, err = schemas.ParseTriggerEvent(data); err != nil {
		if ve, ok := errors.AsType[*schemas.ValidationError](err); ok {
			return validationError("invalid_request", &schemas.ValidationError{What: "firing", Problems: ve.Problems})
		}
		return badRequest("invalid_request", "", "%v", err)
	}
	return nil
}

// awaitInstance polls for the instance of (task, eventID), at a growing
// interval, for up to Options.RunWait. ok is false when it did not appear.
func (s *Service) awaitInstance(ctx context.Context, task, eventID string) (schemas.Instance, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RunWait)
	defer cancel()
	interval := 5 * time.Millisecond
	for {
		in, err := s.opts.Store.InstanceByEvent(ctx, task, eventID)
		if err == nil {
			return in, true, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			if ctx.Err() != nil {
				return schemas.Instance{}, false, nil
			}
			return schemas.Instance{}, false, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return schemas.Instance{}, false, nil
		case <-t.C:
		}
		interval = min(interval*2, 250*time.Millisecond)
	}
}

func (s *Service) instanceByEvent(w http.ResponseWriter, r *http.Request) {
	name, e := taskName(r)
	if e != nil {
		writeError(w, e)
		return
	}
	eventID := r.PathValue("event_id")
	in, err := s.opts.Store.InstanceByEvent(r.Context(), name, eventID)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, &Error{Status: http.StatusNotFound, Code: "instance_not_found", Field: "event_id",
			Message: fmt.Sprintf("task %q has no instance for event %q (yet): the dispatcher creates it when it reads the firing; check the task name and event id, and that the dispatcher runs", name, eventID)})
		return
	}
	if err != nil {
		s.internalError(w, r, "get instance of task "+name+" event "+eventID, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}
