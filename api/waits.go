package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// attachWaits sets the Wait of each instance of list that waits (see
// [schemas.Wait]): the reason the dispatcher recorded for its current
// attempt (no live worker, a pool nobody serves, a departed pinned
// worker, a broadcast with no worker), or, where it recorded none, what
// the API reads of the instance's task: WAITING behind
// max_running_instances, or DISPATCHED while another attempt holds its
// mutex_key. Instances that do not wait cost nothing; those that do, one
// query for all.
func (s *Service) attachWaits(ctx context.Context, list []schemas.Instance) error {
	var ids []int64
	for _, in := range list {
		if in.State.Waits() && !in.Archived {
			ids = append(ids, in.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	recorded, err := s.opts.Store.Waits(ctx, ids)
	if err != nil {
		return err
	}
	wr := &waitReader{s: s, ids: ids, tasks: map[string]*store.TaskRecord{}}
	for i := range list {
		in := &list[i]
		if !in.State.Waits() || in.Archived {
			continue
		}
		w, ok := recorded[in.ID]
		if in.Wait = store.WaitOf(*in, w, ok); in.Wait != nil {
			// The dispatcher wrote it when it queued the attempt, and
			// does not come back to it: a worker that came since ends it.
			if in.Wait.Kind == schemas.WaitUnservedPool {
				if t := wr.task(ctx, in.Task); t != nil && t.Definition != nil && wr.served(ctx, in.Pool, t.Definition.Execution.Handler) {
					in.Wait = nil
				}
			}
			continue
		}
		if err := wr.taskWait(ctx, in); err != nil {
			return err
		}
	}
	return nil
}

// waitReader reads for attachWaits, each once and only when asked, the
// tasks, the workers and the calendar waits of the instances ids.
type waitReader struct {
	s           *Service
	ids         []int64
	tasks       map[string]*store.TaskRecord
	workers     []schemas.Worker
	workersRead bool
	mutexReads  int
	calendar    map[int64]string // read once, when an instance waits for parents' ticks
}

// task is the task name, nil when it cannot be read.
func (wr *waitReader) task(ctx context.Context, name string) *store.TaskRecord {
	if t, ok := wr.tasks[name]; ok {
		return t
	}
	var t *store.TaskRecord
	if rec, err := wr.s.opts.Store.GetTask(ctx, name); err == nil {
		t = &rec
	}
	wr.tasks[name] = t
	return t
}

// served reports whether a live worker serves handler in pool.
func (wr *waitReader) served(ctx context.Context, pool, handler string) bool {
	if !wr.workersRead {
		wr.workersRead = true
		rctx, cancel := context.WithTimeout(ctx, readNATSTimeout)
		wr.workers, _ = wr.s.readWorkers(rctx) // unread, the reason stands
		cancel()
	}
	return slices.ContainsFunc(wr.workers, func(w schemas.Worker) bool {
		return slices.Contains(w.Pools, pool) && slices.Contains(w.Handlers, handler)
	})
}

// taskWait sets the Wait of in, which has none recorded, from what its
// task says: a calendar wait, max_running_instances, or a mutex_key.
func (wr *waitReader) taskWait(ctx context.Context, in *schemas.Instance) error {
	t := wr.task(ctx, in.Task)
	if t == nil || t.Definition == nil {
		return nil
	}
	c := t.Definition.Concurrency
	switch {
	case in.State == schemas.StateWaiting && calendarAligned(t.Definition):
		if wr.calendar == nil {
			var err error
			if wr.calendar, err = wr.s.opts.Store.WaitReasons(ctx, wr.ids); err != nil {
				return err
			}
		}
		in.Wait = calendarWait(*in, t.Definition, wr.calendar[in.ID])
	case in.State == schemas.StateWaiting && c.MaxRunningInstances > 0:
		in.Wait = &schemas.Wait{Kind: schemas.WaitMaxRunning, Since: waitingSince(*in),
			Reason: fmt.Sprintf("task %s runs at most %d instances at once (concurrency.max_running_instances) and that many run now",
				in.Task, c.MaxRunningInstances),
			Ends: "one of the task's running instances ends; raise max_running_instances to run more at once"}
	case in.State == schemas.StateDispatched && c.MutexKey != "" && wr.mutexReads < maxMutexReads:
		wr.mutexReads++
		in.Wait = wr.s.mutexWait(ctx, *in, c.MutexKey)
	}
	return nil
}

// maxMutexReads bounds the mutex bucket reads of one answer: a page of
// 500 DISPATCHED instances of a mutex task reads the first 50 holders.
const maxMutexReads = 50

// waitingSince is when in entered its current state, by its transitions
// when it has them (GET /v1/instances/{id}), else when it was created.
func waitingSince(in schemas.Instance) time.Time {
	for i := len(in.Transitions) - 1; i >= 0; i-- {
		if t := in.Transitions[i]; t.To == in.State {
			return t.At
		}
	}
	return in.CreatedAt
}

// mutexWait returns the wait of a DISPATCHED instance whose task has a
// mutex_key when another attempt holds the key it renders, or nil: the
// holder is read from the mutex bucket, the executors' (see
// executor/mutex.go), so the reason is as fresh as the read.
func (s *Service) mutexWait(ctx context.Context, in schemas.Instance, template string) *schemas.Wait {
	key, err := renderKey(template, in.Payload)
	if err != nil {
		return nil
	}
	kv, err := s.js.KeyValue(ctx, s.opts.Topology.MutexBucket())
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || err != nil {
		return nil
	}
	var holder schemas.Lease
	if json.Unmarshal(e.Value(), &holder) != nil || holder.InstanceID == in.ID {
		return nil
	}
	since := e.Created()
	if !holder.AcquiredAt.IsZero() {
		since = holder.AcquiredAt
	}
	return &schemas.Wait{Kind: schemas.WaitMutex, Since: since,
		Reason: fmt.Sprintf("mutex key %q (concurrency.mutex_key) is held by instance %d, attempt %d on worker %s; a worker requeues this attempt until it is free",
			key, holder.InstanceID, holder.Attempt, holder.WorkerID),
		Ends: fmt.Sprintf("instance %d ends (or its key expires with its TTL); cancel it to run this one sooner", holder.InstanceID)}
}

// renderKey renders a mutex_key template over a payload as the executor
// does: the payload decoded with numbers as written.
func renderKey(text string, payload json.RawMessage) (string, error) {
	if !strings.Contains(text, "{{") {
		return text, nil
	}
	t, err := schemas.ParseMutexKey(text)
	if err != nil {
		return "", err
	}
	var data any
	if len(bytes.TrimSpace(payload)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// calendarAligned reports whether def has an after entry with a window: its
// firings wait (WAITING) for the parents' ticks in that window.
func calendarAligned(def *schemas.Task) bool {
	return slices.ContainsFunc(def.After, func(a schemas.After) bool { return a.Window != "" })
}

// calendarWait is the wait of in, WAITING for the ticks of def's
// calendar-aligned parents; reason is what the dispatcher's calendar loop
// last found missing ("" before its first look).
func calendarWait(in schemas.Instance, def *schemas.Task, reason string) *schemas.Wait {
	if reason == "" {
		var names []string
		for _, a := range def.After {
			if a.Window != "" {
				names = append(names, fmt.Sprintf("%s (%s)", a.Task, a.Window))
			}
		}
		reason = "waits for the ticks of its calendar-aligned parents: " + strings.Join(names, ", ")
	}
	return &schemas.Wait{Kind: schemas.WaitCalendarParents, Since: waitingSince(in), Reason: reason,
		Ends: "every parent tick of the window succeeds (rerun a failed one), or the after entry's timeout passes"}
}
