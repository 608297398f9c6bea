package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nats-io/nuid"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// Bulk operations act on the instances a query matches: a rerun fires
// each again (as POST /v1/instances/{id}/rerun does, with an optional JSON
// merge patch on its payload), a cancel orders each cancelled. The API
// writes no instance: it publishes the firings, many to a trigger message
// (a batch of firings), and the cancel orders asynchronously, all awaited
// together; the dispatcher applies them in its batches, one statement per
// batch. Each operation is audited once, as one operator action whose
// details hold the query, the count and the ids.

const (
	// defaultBulkLimit is the most instances a bulk operation acts on
	// when the request names no limit.
	defaultBulkLimit = 100
	// maxBulkLimit is the most instances one bulk operation acts on.
	maxBulkLimit = 10_000
)

// bulkQuery reads a request's query: its states written in capitals.
func bulkQuery(w schemas.InstanceQuery) (schemas.InstanceQuery, *wire.Error) {
	q := schemas.InstanceQuery{Task: w.Task, Since: w.Since, Until: w.Until, Error: w.Error, Worker: w.Worker, ErrorClass: w.ErrorClass}
	if w.Task == "" {
		return q, badRequest("invalid_request", "where.task", "a bulk operation acts on one task: set where.task (and state, since, until, error, worker as needed)")
	}
	if !taskNameRE.MatchString(w.Task) {
		return q, badRequest("invalid_request", "where.task", "%q is not a task name", w.Task)
	}
	for _, st := range w.State {
		s := schemas.State(strings.ToUpper(string(st)))
		if !s.Valid() {
			return q, badRequest("invalid_request", "where.state", "state %q is not one of AX's states (CREATED, WAITING, DISPATCHED, RUNNING, RETRYING, SUCCEEDED, FAILED, SKIPPED, CANCELLED)", st)
		}
		q.State = append(q.State, s)
	}
	return q, nil
}

func (s *Service) bulkRerun(w http.ResponseWriter, r *http.Request) error {
	return s.bulk(w, r, schemas.ActionBulkRerun)
}

func (s *Service) bulkCancel(w http.ResponseWriter, r *http.Request) error {
	return s.bulk(w, r, schemas.ActionBulkCancel)
}

// bulk reads a wire.BulkRequest and runs it.
func (s *Service) bulk(w http.ResponseWriter, r *http.Request, action schemas.OperatorAction) error {
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.BulkRequest
	if e := decodeOptionalBody(data, &req, `{"where": {"task": "nightly", "state": ["FAILED"], "since": "2026-03-01T00:00:00Z"}, "dry_run": true}`); e != nil {
		return e
	}
	q, e := bulkQuery(req.Where)
	if e != nil {
		return e
	}
	res, err := s.runBulk(r, action, q, false, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// runBulk matches q (the instances not rerun yet only, when notRerun)
// and, unless req is a dry run, acts on the matches.
func (s *Service) runBulk(r *http.Request, action schemas.OperatorAction, q schemas.InstanceQuery, notRerun bool, req wire.BulkRequest) (wire.BulkResult, error) {
	limit := req.Limit
	if limit == 0 {
		limit = defaultBulkLimit
	}
	if limit < 0 || limit > maxBulkLimit {
		return wire.BulkResult{}, badRequest("invalid_request", "limit", "limit %d is not from 1 to %d", limit, maxBulkLimit)
	}
	if len(req.PayloadPatch) > 0 && (action != schemas.ActionBulkRerun || !json.Valid(req.PayloadPatch)) {
		return wire.BulkResult{}, badRequest("invalid_request", "payload_patch", "payload_patch is a JSON merge patch (RFC 7396) for a rerun, such as {\"day\": \"2026-03-02\"}")
	}
	total, matches, err := s.opts.Store.MatchInstances(r.Context(), q, notRerun, limit)
	if err != nil {
		return wire.BulkResult{}, internal("match instances", err)
	}
	res := wire.BulkResult{Action: string(action), DryRun: req.DryRun, Matched: total, Instances: make([]wire.BulkMatch, len(matches))}
	for i, m := range matches {
		res.Instances[i] = wire.BulkMatch{ID: m.ID, Task: m.Task, State: string(m.State), FiredAt: m.FiredAt, Error: m.Error, Worker: m.Worker}
	}
	if req.DryRun || len(matches) == 0 {
		return res, nil
	}
	if total > limit && !req.Confirm {
		return res, &wire.Error{Status: http.StatusConflict, Code: "confirm_needed", Field: "limit",
			Message: fmt.Sprintf("the query matches %d instances, more than the limit %d; raise limit, or set confirm (ax: --yes) to act on the first %d", total, limit, limit)}
	}
	who := operator(r)
	ids := make([]int64, len(matches))
	for i, m := range matches {
		ids[i] = m.ID
	}
	details, _ := json.Marshal(map[string]any{"where": auditWhere(q, notRerun), "matched": total, "acted": len(ids), "ids": ids, "payload_patch": req.PayloadPatch})
	auditID, err := s.opts.Store.RecordAction(r.Context(), store.Action{Action: action, Task: q.Task, Operator: who,
		Reason: fmt.Sprintf("%s of %d instances matching a query", action, len(ids)), Details: details})
	if err != nil {
		return res, internal("record the bulk action", err)
	}
	res.AuditID = auditID
	if action == schemas.ActionBulkRerun {
		err = s.publishReruns(r, who, auditID, matches, req.PayloadPatch)
	} else {
		err = s.publishCancels(r.Context(), who, auditID, matches, req.Reason)
	}
	if err != nil {
		return res, s.unpublished(s.opts.Topology.APITrigger(q.Task), err)
	}
	res.Acted = len(matches)
	s.opts.Logger.Info().Str("task", q.Task).Str("operator", who).Str("action", string(action)).Int("instances", len(ids)).Msg("bulk action")
	return res, nil
}

// auditWhere is q as a bulk action's audit details record it: with
// "not_rerun": true for a replay, which leaves out the instances rerun
// already.
func auditWhere(q schemas.InstanceQuery, notRerun bool) any {
	if !notRerun {
		return q
	}
	return struct {
		schemas.InstanceQuery
		NotRerun bool `json:"not_rerun"`
	}{q, true}
}

// publishReruns fires each match again, schemas.MaxTriggerBatch firings to
// a message.
func (s *Service) publishReruns(r *http.Request, who string, auditID int64, matches []store.Match, patch json.RawMessage) error {
	now := s.opts.NowFunc().UTC()
	byTask := map[string][]schemas.TriggerEvent{}
	var order []string
	for _, m := range matches {
		payload := m.Payload
		if len(patch) > 0 {
			var err error
			if payload, err = mergePatch(payload, patch); err != nil {
				return err
			}
		}
		if _, ok := byTask[m.Task]; !ok {
			order = append(order, m.Task)
		}
		byTask[m.Task] = append(byTask[m.Task], schemas.TriggerEvent{
			EventID: fmt.Sprintf("%s%d-%s", schemas.RerunEventIDPrefix, m.ID, nuid.Next()), Task: m.Task,
			Source: schemas.SourceManual, Operator: who, Payload: payload, PayloadVersion: m.PayloadVersion,
			Priority: m.Priority, FiredAt: now, Reason: fmt.Sprintf("rerun of instance %d (bulk action %d)", m.ID, auditID),
		})
	}
	for _, task := range order {
		evs := byTask[task]
		for len(evs) > 0 {
			n := min(len(evs), schemas.MaxTriggerBatch)
			if err := s.publishBatch(r, s.opts.Topology.APITrigger(task), task, evs[:n]); err != nil {
				return err
			}
			evs = evs[n:]
		}
	}
	return nil
}

// publishCancels orders each match cancelled, the orders published
// asynchronously and awaited together.
func (s *Service) publishCancels(ctx context.Context, who string, auditID int64, matches []store.Match, reason string) error {
	if reason == "" {
		reason = fmt.Sprintf("cancelled by %s (bulk action %d)", who, auditID)
	}
	batch := streams.NewAsyncBatch(s.js)
	now := s.opts.NowFunc().UTC()
	for _, m := range matches {
		ev := schemas.TriggerEvent{EventID: fmt.Sprintf("%s%d", schemas.CancelEventIDPrefix, m.ID), Task: m.Task,
			Source: schemas.SourceManual, Operator: who, FiredAt: now, Cancel: &schemas.CancelOf{InstanceID: m.ID, Reason: reason}}
		msg, err := streams.NewMsg(s.opts.Topology.APITrigger(m.Task), streams.TriggerMsgID(m.Task, ev.EventID), ev)
		if err != nil {
			return err
		}
		streams.InjectTrace(ctx, msg.Header)
		batch.Add(msg)
	}
	return batch.Wait(ctx)
}

// mergePatch applies the JSON merge patch (RFC 7396) patch to doc.
func mergePatch(doc, patch json.RawMessage) (json.RawMessage, error) {
	var d, p any
	if len(doc) > 0 {
		if err := json.Unmarshal(doc, &d); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("payload patch: %w", err)
	}
	return json.Marshal(mergeValue(d, p))
}

func mergeValue(doc, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	dm, ok := doc.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
			continue
		}
		dm[k] = mergeValue(dm[k], v)
	}
	return dm
}

func (s *Service) listDeadLetters(w http.ResponseWriter, r *http.Request) error {
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
	if limit == 0 {
		limit = 100
	}
	groups, err := s.opts.Store.DeadLetters(r.Context(), task, limit)
	if err != nil {
		return internal("dead letters", err)
	}
	if groups == nil {
		groups = []schemas.DeadLetterGroup{}
	}
	writeJSON(w, http.StatusOK, wire.DeadLetterList{Groups: groups})
	return nil
}

// replayDeadLetters reruns a dead-letter group: a bulk rerun of the FAILED
// instances of a task with an error class.
func (s *Service) replayDeadLetters(w http.ResponseWriter, r *http.Request) error {
	data, _, e := s.readBody(w, r, false)
	if e != nil {
		return e
	}
	var req wire.ReplayRequest
	if e := decodeOptionalBody(data, &req, `{"task": "nightly", "error_class": "timeout after Ns", "payload_patch": {"retry": true}}`); e != nil {
		return e
	}
	if req.ErrorClass == "" {
		return badRequest("invalid_request", "error_class", "name the group's error_class, as GET /v1/dead-letters lists it")
	}
	q, e := bulkQuery(schemas.InstanceQuery{Task: req.Task, State: []schemas.State{schemas.StateFailed}, ErrorClass: req.ErrorClass})
	if e != nil {
		return e
	}
	res, err := s.runBulk(r, schemas.ActionBulkRerun, q, true, wire.BulkRequest{DryRun: req.DryRun, Limit: req.Limit,
		Confirm: req.Confirm, PayloadPatch: req.PayloadPatch})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
