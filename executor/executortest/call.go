package executortest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/internal/sdkhook"
	"github.com/ax-scheduler/ax/schemas"
)

// Result is what became of one attempt run by [Call].
type Result struct {
	// Report is the final report a worker would publish for the attempt:
	// Kind (succeeded or failed), Output, Error, Permanent and
	// RetryAfterMS, by the rules a worker applies (an output that does not
	// encode fails permanently, a panic fails, a result returned after
	// the deadline is a timeout).
	Report schemas.Report
	// Output is Report.Output: the handler's output as JSON, nil for none.
	Output json.RawMessage
	// Err is the error the handler returned, as it returned it (test it
	// with errors.Is and errors.As); nil when it succeeded or panicked.
	Err error
	// Logs are the lines the handler logged through executor.Logger, as
	// AX_LOGS would hold them, every level included.
	Logs []schemas.LogLine
}

// Succeeded reports whether the attempt succeeded.
func (r *Result) Succeeded() bool { return r.Report.Kind == schemas.ReportSucceeded }

// Messages returns the messages of the log lines, in order.
func (r *Result) Messages() []string {
	msgs := make([]string, len(r.Logs))
	for i, l := range r.Logs {
		msgs[i] = l.Message
	}
	return msgs
}

// Option changes the attempt [Call] runs.
type Option func(*call)

type call struct {
	task    executor.Job
	once    *Once
	timeout time.Duration
}

// WithTask lets edit change the attempt's facts before the handler sees
// them: Attempt and MaxAttempts to test a last attempt, Parents, ShardIndex
// and ShardCount, InstanceID, RunID.
func WithTask(edit func(t *executor.Job)) Option { return func(c *call) { edit(&c.task) } }

// WithOnce makes executor.Once in the handler use o's records, so that a
// later Call with the same o sees the work an earlier one did. Without it
// each Call has records of its own.
func WithOnce(o *Once) Option { return func(c *call) { c.once = o } }

// WithTimeout gives the attempt the task's timeout d: the handler's
// context ends d after the call starts, with the cause a worker gives it
// ("timeout after …"), and Job.Deadline is set.
func WithTimeout(d time.Duration) Option { return func(c *call) { c.timeout = d } }

// Call runs the handler that mux registers under name on one attempt whose
// payload is payload, as a worker would run it but with no NATS server:
// the handler gets a context with the mux's middleware applied, a logger
// whose lines the Result captures, and an in-memory executor.Once (see
// [WithOnce]). It is River's rivertest.Worker for AX.
//
// payload is a json.RawMessage or []byte holding JSON, used as it is, or
// any other value, encoded with encoding/json; nil is no payload. The
// attempt is attempt 1 of 1 of instance 1 of a task named after the
// handler, with no timeout; change it with [WithTask] and [WithTimeout].
// Call runs the handler on the calling goroutine and returns when it does.
//
// Call fails the test at once (t.Fatalf) when mux has no handler name or
// payload is not JSON: those are mistakes in the test, not outcomes.
func Call(t testing.TB, mux *executor.Mux, name string, payload any, opts ...Option) *Result {
	t.Helper()
	h, ok := mux.Handler(name)
	if !ok {
		t.Fatalf("executortest.Call: the mux has no handler %q (it has: %s)", name, strings.Join(mux.Names(), ", "))
	}
	raw, err := encodePayload(payload)
	if err != nil {
		t.Fatalf("executortest.Call(%q): payload: %v", name, err)
	}
	now := time.Now()
	c := call{task: executor.Job{InstanceID: 1, Name: name, Handler: name, Attempt: 1, MaxAttempts: 1,
		EventID: "executortest-1", Priority: schemas.PriorityNormal, Payload: raw, FiredAt: now,
		WorkerID: "executortest", RunID: "executortest-run-1"}}
	for _, opt := range opts {
		opt(&c)
	}
	if c.once == nil {
		c.once = NewOnce()
	}
	if c.timeout > 0 {
		c.task.Deadline = time.Now().Add(c.timeout)
	}
	res := &Result{}
	var mu sync.Mutex // a handler may log from goroutines of its own
	ctx := t.Context()
	if ctx == nil { // a testing.T made outside the test runner, as in an example
		ctx = context.Background()
	}
	rep, err := sdkhook.Call(ctx, h, &c.task, func(l schemas.LogLine) {
		mu.Lock()
		res.Logs = append(res.Logs, l)
		mu.Unlock()
	}, c.once)
	mu.Lock()
	defer mu.Unlock()
	res.Report, res.Output, res.Err = rep, rep.Output, err
	return res
}

// encodePayload returns the JSON of a payload given to Call.
func encodePayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return checkJSON(p)
	case []byte:
		return checkJSON(p)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %T as JSON: %w", payload, err)
	}
	return data, nil
}

func checkJSON(p []byte) (json.RawMessage, error) {
	if len(p) > 0 && !json.Valid(p) {
		return nil, fmt.Errorf("%q is not JSON; pass a value to encode, or valid JSON bytes", p)
	}
	return json.RawMessage(p), nil
}

// Once holds executor.Once's records in memory for [Call]: the work of a
// key that succeeded is skipped by every later call that shares the Once
// ([WithOnce]), a failed one is not recorded, and two calls of one key
// never run it at once (the second waits). Its zero value is not usable;
// make one with [NewOnce]. It is safe for concurrent use.
type Once struct {
	mu      sync.Mutex
	done    map[string]bool
	running map[string]chan struct{} // closed when the work ends
}

// NewOnce returns an empty Once.
func NewOnce() *Once {
	return &Once{done: make(map[string]bool), running: make(map[string]chan struct{})}
}

// Done reports whether the work of key succeeded and was recorded.
func (o *Once) Done(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done[key]
}

// Run runs fn for key by the rules of executor.Once; executor.Once calls
// it inside a handler that [Call] runs, after checking the key.
func (o *Once) Run(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	for {
		o.mu.Lock()
		if o.done[key] {
			o.mu.Unlock()
			return nil
		}
		wait, busy := o.running[key]
		if !busy {
			end := make(chan struct{})
			o.running[key] = end
			o.mu.Unlock()
			return o.runHeld(ctx, key, end, fn)
		}
		o.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("once %q: wait for the work running elsewhere: %w", key, context.Cause(ctx))
		}
	}
}

// runHeld runs fn for key, which this call holds until end is closed.
func (o *Once) runHeld(ctx context.Context, key string, end chan struct{}, fn func(ctx context.Context) error) (err error) {
	ok := false
	defer func() {
		o.mu.Lock()
		delete(o.running, key)
		if ok {
			o.done[key] = true
		}
		o.mu.Unlock()
		close(end)
	}()
	err = fn(ctx)
	ok = err == nil
	return err
}
