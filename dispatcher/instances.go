package dispatcher

import (
	"errors"
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
)

// newInstance fills an instance from a firing and its task's current
// version. A firing the task cannot take (disabled, another payload
// version, a payload its payload_schema refuses, a chain firing whose
// parent did not end as the task's after asks) makes a SKIPPED instance
// that says why; one of a task in shadow mode that it could take makes a
// SHADOW instance, which nothing runs. The error is for a payload_schema
// that does not compile, which the API never stores.
func (it *intake) newInstance(f firing, rec store.TaskRecord, def *schemas.Task) (store.NewInstance, error) {
	ev := f.event
	if ev.Source == schemas.SourceCron {
		ev.Payload = cronPayload(def, f.task, ev.EventID)
	}
	in := store.NewInstance{
		Task:          f.task,
		TaskVersion:   rec.Version,
		EventID:       ev.EventID,
		Source:        ev.Source,
		Operator:      ev.Operator,
		Priority:      def.Priority,
		Pool:          def.Dispatch.Pool(),
		Handler:       def.Execution.Handler,
		TimeoutMS:     def.TimeoutDuration().Milliseconds(),
		MutexTemplate: def.Concurrency.MutexKey,
		MaxAttempts:   def.Execution.Retry.MaxAttempts,
		RetryPolicy:   def.Execution.Retry,
		Payload:       ev.Payload,
		FiredAt:       ev.FiredAt,
		State:         schemas.StateDispatched,
		CreatedReason: ev.Reason,
		RunID:         ev.RunID,
		Parents:       ev.Parents,
		Route: store.Route{
			Strategy:         def.Dispatch.Strategy,
			MinWorkerVersion: def.MinWorkerVersion,
		},
		Shard: store.Shard{ShardCount: def.Execution.Shards},
	}
	switch def.Dispatch.Strategy {
	case schemas.DispatchHash:
		in.Route.Key = def.Dispatch.RouteKey(f.task)
	case schemas.DispatchWorker:
		in.Route.Key = def.Dispatch.Worker
	}
	if !ev.RunAt.IsZero() {
		// A delayed firing's instance is the one due at RunAt.
		in.FiredAt = ev.RunAt
	}
	if ev.Priority != "" {
		in.Priority = ev.Priority
	}
	reason, err := skipReason(f, rec, def)
	if reason != "" {
		in.State, in.Reason = schemas.StateSkipped, reason
	} else if rec.Shadow {
		// Recorded on its tick, published to no one (see docs/migrate.md).
		in.State, in.Reason = schemas.StateShadow, shadowReason
	}
	if hold := calendarHold(def); hold != "" && in.State == schemas.StateDispatched {
		in.State, in.Reason = schemas.StateWaiting, hold // calendar.go releases it
	}
	return in, err
}

// shadowReason is the reason of a SHADOW instance's transition.
const shadowReason = "task is in shadow mode: recorded, not run"

// skipReason says why the firing f cannot make a running instance of its
// task (rec, its definition with defaults def), "" when it can; the error
// is for a payload_schema that does not compile.
func skipReason(f firing, rec store.TaskRecord, def *schemas.Task) (string, error) {
	ev := f.event
	version := max(ev.PayloadVersion, schemas.DefaultSchemaVersion)
	var skip string
	if ev.Source == schemas.SourceChain {
		// A chain firing carries no payload, so no version can be wrong.
		version = def.SchemaVersion
		skip = chainSkip(def.After, ev.Parents)
	}
	encoded := schemas.EncodedPayloadProblems(def, ev.Payload)
	switch {
	case f.problem != "":
		return f.problem, nil
	case !rec.Enabled:
		return "task is disabled", nil
	case rec.Paused:
		return "task is paused", nil
	case skip != "":
		return skip, nil
	case version != def.SchemaVersion:
		return fmt.Sprintf("payload_version %d does not match the task's schema_version %d", version, def.SchemaVersion), nil
	case len(encoded) > 0:
		// As the API refuses it: the scheduler cannot read an encoded payload.
		return problemsText(encoded), nil
	}
	// The API checks this before it publishes; a plain NATS publish is
	// checked here, where it can only be recorded.
	err := taskdef.ValidatePayload(def.PayloadSchema, ev.Payload)
	if ve, ok := errors.AsType[*schemas.ValidationError](err); ok {
		return ve.Error(), nil
	} else if err != nil {
		return "", fmt.Errorf("check the payload of task %s version %d: %w", f.task, rec.Version, err)
	}
	return "", nil
}
