package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// Alerts: the auditor raises and resolves them; the API lists them, lets an
// operator acknowledge one, and keeps the rules and the channels.

// listAlerts answers GET /v1/alerts?state=&limit=&before=, newest first.
func (s *Service) listAlerts(w http.ResponseWriter, r *http.Request) error {
	var f store.AlertFilter
	q, e := s.readQuery(r, "state", "limit", "before")
	if e != nil {
		return e
	}
	if st := q.Get("state"); st != "" {
		if !schemas.AlertState(st).Valid() {
			return badRequest("invalid_parameter", "state", "state=%q is not an alert state; use firing, acked or resolved", st)
		}
		f.State = schemas.AlertState(st)
	}
	if f.Limit, e = q.limit("limit", store.MaxAlertLimit); e != nil {
		return e
	}
	if before := q.Get("before"); before != "" {
		id, err := strconv.ParseInt(before, 10, 64)
		if err != nil || id < 1 {
			return badRequest("invalid_parameter", "before",
				"before=%q is not an alert id; pass the id of the last alert of the previous page", before)
		}
		f.BeforeID = id
	}
	alerts, err := s.opts.Store.ListAlerts(r.Context(), f)
	if err != nil {
		return internal("list alerts", err)
	}
	if alerts == nil {
		alerts = []schemas.Alert{}
	}
	writeJSON(w, http.StatusOK, wire.AlertList{Alerts: alerts})
	return nil
}

// pathID returns the positive number {id} of the path, or an answer
// saying it does not name a thing of kind (listed by list).
func pathID(r *http.Request, kind, list string) (int64, *wire.Error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("invalid_"+kind+"_id", "id", "%q is not an %s id: use the number %s shows", raw, kind, list)
	}
	return id, nil
}

// ackAlert answers POST /v1/alerts/{id}/ack: the alert stays open, without
// further notifications, until it resolves.
func (s *Service) ackAlert(w http.ResponseWriter, r *http.Request) error {
	id, e := pathID(r, "alert", "GET /v1/alerts (ax alert list)")
	if e != nil {
		return e
	}
	a, err := s.opts.Store.AckAlert(r.Context(), id, operator(r), s.opts.NowFunc())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &wire.Error{Status: http.StatusNotFound, Code: "alert_not_found", Field: "id",
			Message: fmt.Sprintf("alert %d does not exist; list alerts with GET /v1/alerts (ax alert list)", id)}
	case errors.Is(err, store.ErrAlertResolved):
		return &wire.Error{Status: http.StatusConflict, Code: "alert_resolved", Field: "id",
			Message: fmt.Sprintf("alert %d has resolved, so there is nothing to acknowledge; a new occurrence opens a new alert", id)}
	case err != nil:
		return internal(fmt.Sprintf("acknowledge alert %d", id), err)
	default:
		s.opts.Logger.Info().Int64("alert_id", id).Str("operator", operator(r)).Msg("alert acknowledged")
		writeJSON(w, http.StatusOK, a)
	}
	return nil
}

func (s *Service) listAlertRules(w http.ResponseWriter, r *http.Request) error {
	rules, err := s.opts.Store.ListAlertRules(r.Context())
	if err != nil {
		return internal("list alert rules", err)
	}
	if rules == nil {
		rules = []schemas.AlertRule{}
	}
	writeJSON(w, http.StatusOK, wire.AlertRuleList{Rules: rules})
	return nil
}

// putAlertRule answers PUT /v1/alert-rules/{name}: it creates the rule or
// replaces its level, params and enabled flag.
func (s *Service) putAlertRule(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.AlertRuleRequest
	if e := decodeStrict(data, &req, "an alert rule, such as {\"kind\": \"backlog\", \"level\": \"P2\", \"params\": {\"age\": \"10m\"}}"); e != nil {
		return e
	}
	rule := schemas.AlertRule{Name: name, Kind: req.Kind, Level: req.Level, Params: req.Params, Enabled: req.Enabled == nil || *req.Enabled}
	out, err := s.opts.Store.PutAlertRule(r.Context(), rule, operator(r))
	if ce, ok := errors.AsType[*schemas.AlertConfigError](err); ok {
		return badRequest("invalid_alert_rule", ce.Field, "alert rule %s: %s", name, ce.Error())
	}
	if err != nil {
		return internal("put alert rule "+name, err)
	}
	s.opts.Logger.Info().Str("rule", name).Str("operator", operator(r)).Bool("enabled", out.Enabled).Msg("alert rule put")
	writeJSON(w, http.StatusOK, out)
	return nil
}

// decodeStrict decodes a JSON body into v, refusing unknown fields; what
// says what the body should be.
func decodeStrict(data []byte, v any, what string) *wire.Error {
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("empty_body", "", "the body is empty; send %s", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*json.SyntaxError](err); ok {
			return jsonSyntaxError(data, err)
		}
		return badRequest("invalid_body", decodeErrorField(err), "the body is not %s: %v", what, err)
	}
	return unstorableText(data)
}

// unstorableText refuses a JSON body whose strings PostgreSQL cannot store
// or Go's decoder altered (a NUL, a lone surrogate escape, bytes that are
// not UTF-8), naming the field, as a firing's body is refused.
func unstorableText(data []byte) *wire.Error {
	if problems := schemas.TextProblems(data); len(problems) > 0 {
		return validationError("invalid_request", &schemas.ValidationError{What: "request", Problems: problems})
	}
	return nil
}

func (s *Service) listAlertChannels(w http.ResponseWriter, r *http.Request) error {
	chs, err := s.opts.Store.ListAlertChannels(r.Context())
	if err != nil {
		return internal("list alert channels", err)
	}
	if chs == nil {
		chs = []schemas.AlertChannel{}
	}
	writeJSON(w, http.StatusOK, wire.AlertChannelList{Channels: chs})
	return nil
}

// addAlertChannel answers POST /v1/alert-channels with 201 and the channel.
func (s *Service) addAlertChannel(w http.ResponseWriter, r *http.Request) error {
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.AlertChannelRequest
	if e := decodeStrict(data, &req, `an alert channel, such as {"kind": "slack", "url": "https://hooks.slack.com/services/…"}`); e != nil {
		return e
	}
	ch, err := s.opts.Store.AddAlertChannel(r.Context(), req.Kind, req.URL, operator(r))
	if ce, ok := errors.AsType[*schemas.AlertConfigError](err); ok {
		return badRequest("invalid_alert_channel", ce.Field, "alert channel: %s", ce.Error())
	}
	if err != nil {
		return internal("add alert channel", err)
	}
	s.opts.Logger.Info().Int64("channel_id", ch.ID).Str("kind", string(ch.Kind)).Str("operator", operator(r)).Msg("alert channel added")
	writeJSON(w, http.StatusCreated, ch)
	return nil
}

// deleteAlertChannel answers DELETE /v1/alert-channels/{id} with the
// channel it deleted.
func (s *Service) deleteAlertChannel(w http.ResponseWriter, r *http.Request) error {
	id, e := pathID(r, "alert channel", "GET /v1/alert-channels (ax alert channel list)")
	if e != nil {
		return e
	}
	ch, err := s.opts.Store.DeleteAlertChannel(r.Context(), id, operator(r))
	if errors.Is(err, store.ErrNotFound) {
		return &wire.Error{Status: http.StatusNotFound, Code: "alert_channel_not_found", Field: "id",
			Message: fmt.Sprintf("alert channel %d does not exist; list them with GET /v1/alert-channels (ax alert channel list)", id)}
	}
	if err != nil {
		return internal(fmt.Sprintf("delete alert channel %d", id), err)
	}
	s.opts.Logger.Info().Int64("channel_id", id).Str("operator", operator(r)).Msg("alert channel deleted")
	writeJSON(w, http.StatusOK, ch)
	return nil
}
