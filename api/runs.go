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

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// maxOperatorLen is the maxLength of a firing's operator in
// trigger.schema.json.
const maxOperatorLen = 256

// fireFields lists the fields of FireRequest for the unknown-field message.
const fireFields = "payload, payload_version, event_id, idempotency_key, priority, operator, run_at, delay, run_id"

// Delayed firings: the API publishes one due within directWindow to
// ax.fire.<task>.api at once, with its run_at, and the dispatcher holds it
// until then (it holds firings due within 2 s). One due later becomes a
// one-shot message schedule set scheduleLead before run_at, since the server
// publishes a schedule up to 250 ms late; the dispatcher holds the remainder.
const (
	directWindow = time.Second
	scheduleLead = 500 * time.Millisecond
)

func (s *Service) fire(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	if schemas.IsTriggerBatch(data) {
		return s.fireBatch(w, r, name, data)
	}
	req, e := decodeFireRequest(data)
	if e != nil {
		return e
	}
	ev, e := firingOf(r, name, req, s.opts.NowFunc())
	if e != nil {
		return e
	}
	return s.publishFiring(w, r, ev)
}

// firingOf makes the trigger event of a firing request of task name.
func firingOf(r *http.Request, name string, req wire.FireRequest, now time.Time) (schemas.TriggerEvent, *wire.Error) {
	// The operator is not recorded, but a value the firing's own operator
	// could not hold is a mistake worth telling.
	if len(req.Operator) > maxOperatorLen {
		return schemas.TriggerEvent{}, badRequest("invalid_request", "operator", "operator is %d bytes long; keep it to %d (any non-empty value makes the firing manual)",
			len(req.Operator), maxOperatorLen)
	}
	ev := schemas.TriggerEvent{
		EventID:        req.EventID,
		IdempotencyKey: req.IdempotencyKey,
		Task:           name,
		Source:         schemas.SourceEvent,
		Operator:       operator(r),
		Payload:        req.Payload,
		PayloadVersion: req.PayloadVersion,
		Priority:       req.Priority,
		FiredAt:        now.UTC(),
		RunAt:          req.RunAt.UTC(),
		Delay:          req.Delay,
		RunID:          req.RunID,
	}
	if problems := ev.UserIDProblems(); len(problems) > 0 {
		return ev, validationError("invalid_request", &schemas.ValidationError{What: "firing", Problems: problems})
	}
	if ev.EventID == "" && ev.IdempotencyKey == "" {
		ev.EventID = nuid.Next()
	}
	if req.Operator != "" {
		ev.Source = schemas.SourceManual
	}
	return ev, nil
}

// publishFiring checks a firing of ev.Task against the task and publishes
// it: at once, delayed (a direct publish or a message schedule), or not at
// all when its idempotency key was used before. It answers the request with
// a FireResult, or returns the error.
func (s *Service) publishFiring(w http.ResponseWriter, r *http.Request, ev schemas.TriggerEvent) error {
	name := ev.Task
	if ev.PayloadVersion == 0 {
		ev.PayloadVersion = schemas.DefaultSchemaVersion
	}
	if e := validateEvent(ev); e != nil {
		return e
	}
	rec, err := s.fireableTask(r, name)
	if err != nil {
		return err
	}
	ev, e, err := checkFiring(ev, rec)
	if err != nil {
		return internal("check the payload of task "+name, err)
	}
	if e != nil {
		return e
	}
	eventID := ev.EventID
	if ev.IdempotencyKey != "" {
		eventID = schemas.IdempotencyEventIDPrefix + ev.IdempotencyKey
		if answered, err := s.answerRepeat(w, r, ev, eventID); answered {
			return err
		}
	}
	log := s.opts.Logger.With().Str("task", name).Str("event_id", eventID).Str("operator", ev.Operator).Logger()

	if ev.RunAt.After(ev.FiredAt) {
		return s.fireLater(w, r, ev, eventID, log)
	}
	return s.fireNow(w, r, ev, eventID, log)
}

// fireLater publishes ev, due later, as a delayed firing and answers 202.
func (s *Service) fireLater(w http.ResponseWriter, r *http.Request, ev schemas.TriggerEvent, eventID string, log zerolog.Logger) error {
	name := ev.Task
	subject, err := s.publishDelayed(r.Context(), ev, eventID)
	if err != nil {
		log.Error().Err(err).Msg("publish delayed firing")
		return &wire.Error{Status: http.StatusServiceUnavailable, Code: "trigger_unavailable",
			Message: fmt.Sprintf("cannot publish the delayed firing to %s: %v; check that NATS and the %s stream are up, then fire again with the same idempotency_key or event_id", subject, err, s.opts.Topology.FiringsStream())}
	}
	log.Info().Time("run_at", ev.RunAt).Msg("task fired with a delay")
	writeJSON(w, http.StatusAccepted, wire.FireResult{Task: name, EventID: eventID, RunAt: ev.RunAt})
	return nil
}

// fireNow publishes ev, due now, and answers with its instance once the
// dispatcher created it (201), or 202 when the request asked not to wait
// or the instance did not come in time.
func (s *Service) fireNow(w http.ResponseWriter, r *http.Request, ev schemas.TriggerEvent, eventID string, log zerolog.Logger) error {
	name := ev.Task
	subject := s.opts.Topology.APITrigger(name)
	if _, err := streams.Publish(r.Context(), s.js, subject, streams.TriggerMsgID(name, eventID), ev); err != nil {
		log.Error().Err(err).Msg("publish trigger event")
		return &wire.Error{Status: http.StatusServiceUnavailable, Code: "trigger_unavailable",
			Message: fmt.Sprintf("cannot publish the firing to %s: %v; check that NATS and the %s stream are up, then fire again with the same event_id", subject, err, s.opts.Topology.FiringsStream())}
	}
	// A line per run: debug (the CREATED transition names the operator).
	log.Debug().Msg("task fired")
	if respondAsync(w, r) {
		writeJSON(w, http.StatusAccepted, wire.FireResult{Task: name, EventID: eventID})
		return nil
	}

	in, ok, err := s.awaitInstance(r.Context(), name, eventID)
	if err != nil {
		// The firing is in the stream: the instance will come. Say so.
		log.Warn().Err(err).Msg("await instance")
	}
	if !ok {
		writeJSON(w, http.StatusAccepted, wire.FireResult{Task: name, EventID: eventID})
		return nil
	}
	if ev.IdempotencyKey != "" && !wire.SameJSON(in.Payload, ev.Payload) {
		// Another request with the key won the race to the dispatcher.
		return idempotencyConflict(ev, in.ID)
	}
	writeJSON(w, http.StatusCreated, wire.FireResult{InstanceID: in.ID, Task: name, EventID: eventID, State: in.State})
	return nil
}

// fireableTask reads task name for a firing, or returns why it cannot be
// fired (it does not exist, is disabled or paused).
func (s *Service) fireableTask(r *http.Request, name string) (store.TaskRecord, error) {
	rec, err := s.opts.Store.GetTask(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return rec, taskNotFound(name)
	}
	if err != nil {
		return rec, internal("get task "+name, err)
	}
	if !rec.Enabled {
		return rec, &wire.Error{Status: http.StatusConflict, Code: "task_disabled", Field: "name",
			Message: fmt.Sprintf("task %q is disabled, so it cannot be fired; enable it with POST /v1/tasks/%s/enable (ax task enable %s)", name, name, name)}
	}
	if rec.Paused {
		return rec, &wire.Error{Status: http.StatusConflict, Code: "task_paused", Field: "name",
			Message: fmt.Sprintf("task %q is paused, so it cannot be fired; resume it with POST /v1/tasks/%s/resume (ax task resume %s)", name, name, name)}
	}
	return rec, nil
}

// checkFiring checks a firing ev, which validateEvent took, against its
// task rec (its payload version and payload_schema), and returns it with
// its delay resolved to run_at. The *Error is the firing's fault; the
// error is not (a payload_schema that does not compile).
func checkFiring(ev schemas.TriggerEvent, rec store.TaskRecord) (schemas.TriggerEvent, *wire.Error, error) {
	name := ev.Task
	if want := max(rec.Definition.SchemaVersion, schemas.DefaultSchemaVersion); ev.PayloadVersion != want {
		return ev, &wire.Error{Status: http.StatusUnprocessableEntity, Code: "payload_version_mismatch", Field: "payload_version",
			Message: fmt.Sprintf("payload_version %d does not match the schema_version %d of task %q (version %d); send a payload of version %d with payload_version %d",
				ev.PayloadVersion, want, name, rec.Version, want, want)}, nil
	}
	if problems := schemas.EncodedPayloadProblems(rec.Definition, ev.Payload); len(problems) > 0 {
		e := validationError("encoded_payload", &schemas.ValidationError{What: "payload", Problems: problems})
		e.Status = http.StatusUnprocessableEntity
		return ev, e, nil
	}
	if err := taskdef.ValidatePayload(rec.Definition.PayloadSchema, ev.Payload); err != nil {
		ve, ok := errors.AsType[*schemas.ValidationError](err)
		if !ok {
			return ev, nil, err
		}
		e := validationError("invalid_payload", ve)
		e.Status = http.StatusUnprocessableEntity
		e.Message += fmt.Sprintf("; task %q (version %d) declares a payload_schema that the payload must satisfy", name, rec.Version)
		return ev, e, nil
	}
	// The delay counts from now; what travels is the due time.
	if ev.Delay != "" {
		d, _ := time.ParseDuration(ev.Delay) // validateEvent checked it
		ev.RunAt, ev.Delay = ev.FiredAt.Add(d), ""
	}
	return ev, nil, nil
}

// answerRepeat answers a firing whose idempotency key was used before and
// reports whether it did: with the instance that key made (200) or the
// delayed firing still waiting for its time (202) when the payload is the
// same, or it returns the 409 when it is not, or the failure to look.
func (s *Service) answerRepeat(w http.ResponseWriter, r *http.Request, ev schemas.TriggerEvent, eventID string) (bool, error) {
	res, e, err := s.repeatOf(r.Context(), ev, eventID)
	switch {
	case err != nil:
		return true, internal("look for an earlier firing of task "+ev.Task+" event "+eventID, err)
	case e != nil:
		return true, e
	case res != nil:
		status := http.StatusOK
		if res.InstanceID == 0 {
			status = http.StatusAccepted
		}
		writeJSON(w, status, res)
		return true, nil
	}
	return false, nil
}

// repeatOf looks for an earlier firing with ev's idempotency key (its event
// id eventID): it returns its instance (or its delayed firing, still
// waiting) when the payload is the same, a 409 when it is not, and neither
// when there is none.
func (s *Service) repeatOf(ctx context.Context, ev schemas.TriggerEvent, eventID string) (*wire.FireResult, *wire.Error, error) {
	in, err := s.opts.Store.InstanceByEvent(ctx, ev.Task, eventID)
	switch {
	case err == nil:
		if !wire.SameJSON(in.Payload, ev.Payload) {
			return nil, idempotencyConflict(ev, in.ID), nil
		}
		return &wire.FireResult{InstanceID: in.ID, Task: ev.Task, EventID: eventID, State: in.State, Existing: true}, nil, nil
	case !errors.Is(err, store.ErrNotFound):
		return nil, nil, err
	}
	pending, ok, err := s.pendingFiring(ctx, ev.Task, eventID)
	if err != nil || !ok {
		return nil, nil, err
	}
	if !wire.SameJSON(pending.Payload, ev.Payload) {
		return nil, &wire.Error{Status: http.StatusConflict, Code: "idempotency_conflict", Field: "idempotency_key",
			Message: fmt.Sprintf("idempotency_key %q of task %q belongs to a firing due at %s with another payload; send the same payload to get that firing back, or use a new key for a new firing",
				ev.IdempotencyKey, ev.Task, pending.RunAt.Format(time.RFC3339Nano))}, nil
	}
	return &wire.FireResult{Task: ev.Task, EventID: eventID, RunAt: pending.RunAt, Existing: true}, nil, nil
}

func idempotencyConflict(ev schemas.TriggerEvent, instanceID int64) *wire.Error {
	return &wire.Error{Status: http.StatusConflict, Code: "idempotency_conflict", Field: "idempotency_key",
		Message: fmt.Sprintf("idempotency_key %q of task %q was used by instance %d with another payload; send the same payload to get instance %d back, or use a new key for a new firing",
			ev.IdempotencyKey, ev.Task, instanceID, instanceID)}
}

// pendingFiring returns the delayed firing eventID of task whose schedule
// waits in the triggers stream; ok is false when there is none.
func (s *Service) pendingFiring(ctx context.Context, task, eventID string) (schemas.TriggerEvent, bool, error) {
	stream, err := s.js.Stream(ctx, s.opts.Topology.FiringsStream())
	if err != nil {
		return schemas.TriggerEvent{}, false, err
	}
	m, err := stream.GetLastMsgForSubject(ctx, s.opts.Topology.SchedFiring(task, eventID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schemas.TriggerEvent{}, false, nil
	}
	if err != nil {
		return schemas.TriggerEvent{}, false, err
	}
	if m.Header.Get(streams.HeaderSchedule) == "" {
		return schemas.TriggerEvent{}, false, nil
	}
	ev, err := taskdef.ParseTriggerEvent(m.Data)
	if err != nil {
		return schemas.TriggerEvent{}, false, fmt.Errorf("decode schedule %s: %w", m.Subject, err)
	}
	return ev, true, nil
}

// publishDelayed publishes a firing that is due later: at once, to be held
// by the dispatcher, when it is due within directWindow; otherwise as a
// one-shot message schedule on its own subject, which the server publishes
// to ax.fire.<task>.api scheduleLead before the due time — or, when that is
// further off than half the triggers stream's MaxAge (which would drop the
// schedule), then: the dispatcher schedules the rest. It returns the
// subject it published to.
func (s *Service) publishDelayed(ctx context.Context, ev schemas.TriggerEvent, eventID string) (string, error) {
	if ev.RunAt.Sub(ev.FiredAt) <= directWindow {
		subject := s.opts.Topology.APITrigger(ev.Task)
		_, err := streams.Publish(ctx, s.js, subject, streams.TriggerMsgID(ev.Task, eventID), ev)
		return subject, err
	}
	subject := s.opts.Topology.SchedFiring(ev.Task, eventID)
	stream, err := s.js.Stream(ctx, s.opts.Topology.FiringsStream())
	if err != nil {
		return subject, fmt.Errorf("stream %s: %w", s.opts.Topology.FiringsStream(), err)
	}
	at := ev.RunAt.Add(-scheduleLead)
	if maxAge := stream.CachedInfo().Config.MaxAge; maxAge > 0 && at.After(ev.FiredAt.Add(maxAge/2)) {
		at = ev.FiredAt.Add(maxAge / 2)
	}
	// The message id dedupes a repeated request; a schedule that comes again
	// later replaces itself on its subject.
	m, err := streams.NewScheduleMsg(subject, s.opts.Topology.APITrigger(ev.Task), subject, at, ev)
	if err != nil {
		return subject, err
	}
	streams.InjectTrace(ctx, m.Header)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return subject, fmt.Errorf("publish to %s: %w", subject, err)
	}
	return subject, nil
}

// decodeFireRequest decodes the optional body of a firing, refusing
// unknown fields and anything after the JSON object.
func decodeFireRequest(data []byte) (wire.FireRequest, *wire.Error) {
	var req wire.FireRequest
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
	// Decoding replaced what is not UTF-8 already: the bytes tell.
	if problems := schemas.TextProblems(data); len(problems) > 0 {
		return req, validationError("invalid_request", &schemas.ValidationError{What: "firing", Problems: problems})
	}
	return req, nil
}

func fireDecodeError(data []byte, err error) *wire.Error {
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
	if _, ok := errors.AsType[*time.ParseError](err); ok || strings.Contains(err.Error(), "Time.UnmarshalJSON") {
		// run_at is the only time of a firing.
		return badRequest("invalid_request", "run_at", "run_at must be an RFC 3339 time in quotes, such as \"2025-03-01T12:00:00Z\" or \"2025-03-01T13:00:00.5+01:00\"")
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

// validateEvent checks a firing against trigger.schema.json and the rules
// ParseTriggerEvent adds, the rules the dispatcher applies, so that the API
// never publishes what it would refuse. The event is built from the request,
// so the problems name its fields.
func validateEvent(ev schemas.TriggerEvent) *wire.Error {
	data, err := json.Marshal(ev)
	if err != nil {
		return badRequest("invalid_request", "payload", "cannot encode the firing: %v", err)
	}
	if _, err = taskdef.ParseTriggerEvent(data); err != nil {
		if ve, ok := errors.AsType[*schemas.ValidationError](err); ok {
			return validationError("invalid_request", &schemas.ValidationError{What: "firing", Problems: ve.Problems})
		}
		return badRequest("invalid_request", "", "%v", err)
	}
	return nil
}

// awaitInstance polls for the instance of (task, eventID) for up to
// Options.RunWait. ok is false when it did not appear.
func (s *Service) awaitInstance(ctx context.Context, task, eventID string) (schemas.Instance, bool, error) {
	return awaitDispatcher(ctx, s.opts.RunWait, func(ctx context.Context) (schemas.Instance, bool, error) {
		in, err := s.opts.Store.InstanceByEvent(ctx, task, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return in, false, nil
		}
		return in, err == nil, err
	})
}

// awaitDispatcher waits up to wait for the dispatcher to apply what the API
// published: it calls check, backing off from 5 ms to 250 ms, until check
// says done or fails. When the wait ends first, which is not an error, it
// calls check once more on ctx itself and returns what that read, with done
// as it says: a read the wait's deadline cut short is never an answer (it
// once answered a cancel with a zeroed instance), and the answer is the
// state as it is when the wait ends. Only ctx's own end fails that last read.
func awaitDispatcher[T any](ctx context.Context, wait time.Duration, check func(context.Context) (v T, done bool, err error)) (T, bool, error) {
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for interval := 5 * time.Millisecond; ; interval = min(interval*2, 250*time.Millisecond) {
		v, done, err := check(waitCtx)
		if err == nil && done {
			return v, true, nil
		}
		if waitCtx.Err() != nil {
			break
		}
		if err != nil {
			return v, false, err
		}
		t := time.NewTimer(interval)
		select {
		case <-waitCtx.Done():
			t.Stop()
		case <-t.C:
		}
		if waitCtx.Err() != nil {
			break
		}
	}
	return check(ctx)
}

func (s *Service) instanceByEvent(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	eventID := r.PathValue("event_id")
	in, err := s.opts.Store.InstanceByEvent(r.Context(), name, eventID)
	if errors.Is(err, store.ErrNotFound) {
		if ev, ok, perr := s.pendingFiring(r.Context(), name, eventID); perr == nil && ok {
			out := []wire.PendingFiring{pendingOf(ev)}
			if err := s.redactPending(r.Context(), out); err != nil {
				return internal("redact the firing", err)
			}
			writeJSON(w, http.StatusAccepted, out[0])
			return nil
		}
		return &wire.Error{Status: http.StatusNotFound, Code: "instance_not_found", Field: "event_id",
			Message: fmt.Sprintf("task %q has no instance for event %q (yet): the dispatcher creates it when it reads the firing, or at its run_at for a delayed one; check the task name and event id, and that the dispatcher runs", name, eventID)}
	}
	if err != nil {
		return internal("get instance of task "+name+" event "+eventID, err)
	}
	if err := s.redactOne(r.Context(), &in); err != nil {
		return internal("redact instance of task "+name+" event "+eventID, err)
	}
	writeJSON(w, http.StatusOK, in)
	return nil
}
