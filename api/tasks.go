package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// handlerCheckTimeout bounds the look at the live workers that apply makes
// to warn of a handler none of them serves.
const handlerCheckTimeout = 2 * time.Second

func taskInfo(rec store.TaskRecord) wire.TaskInfo {
	return wire.TaskInfo{Task: rec.Definition, Version: rec.Version, Enabled: rec.Enabled, Paused: rec.Paused,
		Shadow: rec.Shadow, ShadowSince: rec.ShadowSince, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
}

// taskNameRE is the rule of task.schema.json's task_name: a name becomes a
// NATS subject token, so '.', '*', '>' and spaces must never pass.
var taskNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// taskName returns the {name} of the path, or an answer saying why it
// cannot name a task.
func taskName(r *http.Request) (string, *wire.Error) {
	name := r.PathValue("name")
	if !taskNameRE.MatchString(name) {
		return "", badRequest("invalid_task_name", "name",
			"%q is not a task name: use 1-64 lower-case letters, digits, '_' and '-', starting with a letter or digit", name)
	}
	return name, nil
}

func taskNotFound(name string) *wire.Error {
	return &wire.Error{Status: http.StatusNotFound, Code: "task_not_found", Field: "name",
		Message: fmt.Sprintf("task %q does not exist; check the name with GET /v1/tasks (ax task list) or apply its definition (ax task apply -f FILE)", name)}
}

func (s *Service) applyTask(w http.ResponseWriter, r *http.Request) error {
	data, mt, e := s.readBody(w, r, true)
	if e != nil {
		return e
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return badRequest("empty_body", "", "the body is empty; send a task definition in JSON or YAML")
	}
	if mt == mediaJSON || (mt == mediaUnset && trimmed[0] == '{') {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			e := jsonSyntaxError(data, err)
			if mt == mediaJSON {
				e.Message += "; to send YAML, set Content-Type: application/yaml"
			}
			return e
		}
	}
	def, err := taskdef.ParseTask(data)
	if ve, ok := errors.AsType[*schemas.ValidationError](err); ok {
		return validationError("invalid_task", ve)
	}
	if err != nil {
		return internal("parse task definition", err)
	}
	rec, changed, err := s.opts.Store.ApplyTask(r.Context(), def, operator(r))
	if ce, ok := errors.AsType[*store.ChainCycleError](err); ok {
		return badRequest("invalid_task", "after",
			"%v: the tasks on it would wait for each other forever; remove one of these after entries", ce)
	}
	if err != nil {
		return internal("apply task "+def.TaskName, err)
	}
	if changed {
		s.announceTask(r.Context(), rec)
	}
	status := http.StatusOK
	if changed && rec.Version == 1 {
		status = http.StatusCreated
	}
	fit, warnings := s.taskFit(r.Context(), def)
	writeJSON(w, status, wire.ApplyResult{TaskInfo: taskInfo(rec), Changed: changed, Warnings: warnings, Workers: fit})
	return nil
}

func (s *Service) listTasks(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.opts.Store.ListTasks(r.Context())
	if err != nil {
		return internal("list tasks", err)
	}
	out := wire.TaskList{Tasks: make([]wire.TaskInfo, 0, len(recs))}
	for _, rec := range recs {
		out.Tasks = append(out.Tasks, taskInfo(rec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Service) getTask(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	rec, err := s.opts.Store.GetTask(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return taskNotFound(name)
	}
	if err != nil {
		return internal("get task "+name, err)
	}
	info := taskInfo(rec)
	info.NextFireTimes = nextFireTimes(rec.Definition, s.opts.NowFunc(), 5)
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Service) setEnabled(enabled bool) handlerFunc {
	return s.setFlag("enabled", enabled, s.opts.Store.SetTaskEnabled)
}

func (s *Service) setPaused(paused bool) handlerFunc {
	return s.setFlag("paused", paused, s.opts.Store.SetTaskPaused)
}

// setFlag answers a request that sets one of a task's flags with set, and
// tells trigger services about the change.
func (s *Service) setFlag(flag string, value bool,
	set func(ctx context.Context, name string, value bool, operator string) (store.TaskRecord, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, e := taskName(r)
		if e != nil {
			return e
		}
		rec, err := set(r.Context(), name, value, operator(r))
		if errors.Is(err, store.ErrNotFound) {
			return taskNotFound(name)
		}
		if err != nil {
			return internal(fmt.Sprintf("set task %s %s=%t", name, flag, value), err)
		}
		s.announceTask(r.Context(), rec)
		s.opts.Logger.Info().Str("task", name).Bool(flag, value).Str("operator", operator(r)).Msg("task flag set")
		writeJSON(w, http.StatusOK, taskInfo(rec))
		return nil
	}
}

// deleteTask deletes a task: it leaves every list and takes no firings, its
// running instances finish, and its history stays. Trigger services drop its
// schedules when its key leaves the tasks bucket.
func (s *Service) deleteTask(w http.ResponseWriter, r *http.Request) error {
	name, e := taskName(r)
	if e != nil {
		return e
	}
	rec, err := s.opts.Store.DeleteTask(r.Context(), name, operator(r))
	if errors.Is(err, store.ErrNotFound) {
		return taskNotFound(name)
	}
	if err != nil {
		return internal("delete task "+name, err)
	}
	s.forgetTask(r.Context(), name)
	s.opts.Logger.Info().Str("task", name).Str("operator", operator(r)).Msg("task deleted")
	writeJSON(w, http.StatusOK, taskInfo(rec))
	return nil
}
