package executor

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// Job is one attempt of one task instance, as its handler sees it: the
// instance, which attempt this is, the payload, the deadline. The handler
// must not modify it. (AX's "task" is the definition an instance is made
// from, so the handler's value is not called Task; see docs/execution.md.)
type Job struct {
	// InstanceID identifies the instance. With Attempt it is a key for
	// business idempotency: a retried attempt has the same InstanceID.
	InstanceID int64
	// Name is the task's name.
	Name string
	// Handler is the handler name the task's execution.handler gives: the
	// name [Mux.HandleTask] looks up.
	Handler string
	// Attempt counts the attempts of the instance, from 1.
	Attempt int
	// MaxAttempts is how many attempts the task's retry policy allows in all;
	// Attempt == MaxAttempts is the last chance.
	MaxAttempts int
	// EventID identifies the firing the instance was made for.
	EventID string
	// Priority is the instance's priority.
	Priority schemas.Priority
	// Payload is the firing's payload as it was sent (empty when none).
	Payload json.RawMessage
	// FiredAt is when the trigger fired.
	FiredAt time.Time
	// Deadline is when the attempt's context ends (the task's timeout after
	// the attempt started); zero when the attempt has no timeout.
	Deadline time.Time
	// WorkerID names the worker running the attempt.
	WorkerID string
	// RunID names the run the instance belongs to: its root firing's run,
	// shared by every task chained after it (see docs/triggers.md).
	RunID string
	// Parents tells, for a task that fired because the tasks in its after
	// ended, how each of them ended in the run, by task name; nil for an
	// instance no chain fired. See [Job.Parent].
	Parents map[string]schemas.ParentResult
	// ShardIndex and ShardCount place the attempt among the children of a
	// sharded firing (execution.shards) or a broadcast: it is shard
	// ShardIndex, from 0, of ShardCount. Both are 0 when the task is
	// neither sharded nor broadcast.
	ShardIndex int
	ShardCount int

	// run is the attempt the worker runs this as, for [Job.Progress]; nil
	// for a Job no worker made.
	run *attempt
	// fence is the attempt's fencing token, see [Job.Fence].
	fence uint64
}

// Parent returns how the parent task called name ended in the instance's
// run (its instance, its terminal state and, when it succeeded, the output
// its handler returned); ok is false when name is not a parent of this
// firing. Decode its output with json.Unmarshal(p.Output, &v).
func (t *Job) Parent(name string) (p schemas.ParentResult, ok bool) {
	p, ok = t.Parents[name]
	return p, ok
}

// Handler runs one attempt of a task.
//
// The returned error is the attempt's outcome: nil succeeds, an error fails
// the attempt (retried by the task's policy), an error wrapped with
// [Permanent] fails it without retry. The output is JSON-encoded into the
// report when the attempt succeeds: nil means no output, and a
// [json.RawMessage] or []byte holding valid JSON is passed as it is (any other
// []byte is encoded the way encoding/json encodes bytes, as base64). An output
// that cannot be encoded fails the attempt permanently.
//
// HandleTask is called on its own goroutine, concurrently with other
// attempts. ctx ends at the attempt's deadline (the task's timeout), on an
// operator's cancel, when the worker lost the attempt's lease or shuts down;
// [context.Cause] tells which. The handler should return soon after: an
// error then fails the attempt with that cause ("timeout after 1m0s"), while
// nil still succeeds, since the work was done. A panic is recovered and
// fails the attempt.
type Handler interface {
	HandleTask(ctx context.Context, t *Job) (output any, err error)
}

// HandlerFunc adapts an ordinary function to a [Handler].
type HandlerFunc func(ctx context.Context, t *Job) (any, error)

// HandleTask calls f(ctx, t).
func (f HandlerFunc) HandleTask(ctx context.Context, t *Job) (any, error) { return f(ctx, t) }
