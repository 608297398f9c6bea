package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// instanceID returns the {id} of the path, or an answer saying why it
// cannot name an instance.
func instanceID(r *http.Request) (int64, *wire.Error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("invalid_instance_id", "id", "%q is not an instance id: use the positive number that ax fire or ax instance list printed", raw)
	}
	return id, nil
}

func instanceNotFound(id int64) *wire.Error {
	return &wire.Error{Status: http.StatusNotFound, Code: "instance_not_found", Field: "id",
		Message: fmt.Sprintf("instance %d does not exist; list instances with GET /v1/instances (ax instance list)", id)}
}

func (s *Service) getInstance(w http.ResponseWriter, r *http.Request) error {
	id, e := instanceID(r)
	if e != nil {
		return e
	}
	in, err := s.opts.Store.GetInstance(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return instanceNotFound(id)
	}
	if err != nil {
		return internal(fmt.Sprintf("get instance %d", id), err)
	}
	one := []schemas.Instance{in}
	if err := s.attachWaits(r.Context(), one); err != nil {
		return internal(fmt.Sprintf("read why instance %d waits", id), err)
	}
	in = one[0]
	in.Attempts = schemas.Attempts(in.Transitions)
	if err := s.redactOne(r.Context(), &in); err != nil {
		return internal(fmt.Sprintf("redact instance %d", id), err)
	}
	writeJSON(w, http.StatusOK, in)
	return nil
}

// rerun fires the task of an instance again, as a new manual firing with the
// instance's payload (or the request's), payload version and priority. The new instance's
// CREATED transition names the operator and says "rerun of instance N".
// It answers like POST /v1/tasks/{name}/runs.
func (s *Service) rerun(w http.ResponseWriter, r *http.Request) error {
	var req wire.RerunRequest
	id, err := s.instanceRequest(w, r, &req, `{"payload": {"day": "2025-03-01"}}`)
	if err != nil {
		return err
	}
	f, err := s.opts.Store.InstanceFiring(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return instanceNotFound(id)
	}
	if err != nil {
		return internal(fmt.Sprintf("get the firing of instance %d", id), err)
	}
	payload := f.Payload
	if len(req.Payload) > 0 {
		payload = req.Payload
	}
	return s.publishFiring(w, r, schemas.TriggerEvent{
		EventID:        fmt.Sprintf("%s%d-%s", schemas.RerunEventIDPrefix, id, nuid.Next()),
		Task:           f.Task,
		Source:         schemas.SourceManual,
		Operator:       operator(r),
		Payload:        payload,
		PayloadVersion: f.PayloadVersion,
		Priority:       f.Priority,
		FiredAt:        s.opts.NowFunc().UTC(),
		Reason:         fmt.Sprintf("rerun of instance %d", id),
	})
}

func (s *Service) listInstances(w http.ResponseWriter, r *http.Request) error {
	f, e := s.instanceFilter(r)
	if e != nil {
		return e
	}
	list, err := s.opts.Store.ListInstances(r.Context(), f)
	if err != nil {
		return internal("list instances", err)
	}
	if list == nil {
		list = []schemas.Instance{}
	}
	if err := s.attachWaits(r.Context(), list); err != nil {
		return internal("read why instances wait", err)
	}
	if err := s.redact(r.Context(), list); err != nil {
		return internal("redact instances", err)
	}
	writeJSON(w, http.StatusOK, wire.InstanceList{Instances: list})
	return nil
}

// instanceFilter reads the query of GET /v1/instances, refusing unknown
// parameters: a misspelt filter must not silently list everything.
func (s *Service) instanceFilter(r *http.Request) (store.InstanceFilter, *wire.Error) {
	var f store.InstanceFilter
	q, e := s.readQuery(r, "task", "state", "since", "until", "limit", "before", "after", "archived")
	if e != nil {
		return f, e
	}
	if f.Task, e = q.task("task"); e != nil {
		return f, e
	}
	if state := q.Get("state"); state != "" {
		f.State = schemas.State(strings.ToUpper(state))
		if !f.State.Valid() {
			return f, badRequest("invalid_parameter", "state",
				"state=%q is not an instance state; use one of CREATED, WAITING, DISPATCHED, RUNNING, RETRYING, SUCCEEDED, FAILED, SKIPPED, CANCELLED, SHADOW", state)
		}
	}
	if f.Limit, e = q.limit("limit", store.MaxInstanceLimit); e != nil {
		return f, e
	}
	if f.Since, e = q.time("since", time.Time{}); e != nil {
		return f, e
	}
	if f.Until, e = q.time("until", time.Time{}); e != nil {
		return f, e
	}
	switch archived := q.Get("archived"); archived {
	case "", "false":
	case "true":
		f.Archived = true
	default:
		return f, badRequest("invalid_parameter", "archived",
			"archived=%q: use archived=true to list the instances in the history and the archive, or leave it out", archived)
	}
	if before := q.Get("before"); before != "" {
		id, err := strconv.ParseInt(before, 10, 64)
		if err != nil || id < 1 {
			return f, badRequest("invalid_parameter", "before",
				"before=%q is not an instance id; pass the id of the last instance of the previous page", before)
		}
		f.BeforeID = id
	}
	if after := q.Get("after"); after != "" {
		id, err := strconv.ParseInt(after, 10, 64)
		if err != nil || id < 1 {
			return f, badRequest("invalid_parameter", "after",
				"after=%q is not an instance id; pass the id of the first instance of the page you came from", after)
		}
		f.AfterID = id
	}
	return f, nil
}

// instanceRequest reads the {id} of a POST on an instance and its optional
// JSON body into req (example shows the body's shape in errors).
func (s *Service) instanceRequest(w http.ResponseWriter, r *http.Request, req any, example string) (int64, error) {
	id, e := instanceID(r)
	if e == nil {
		var data []byte
		if data, _, e = s.readBody(w, r, false); e == nil {
			e = decodeOptionalBody(data, req, example)
		}
	}
	if e != nil {
		return 0, e
	}
	return id, nil
}
