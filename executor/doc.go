// Package executor is the SDK for AX handler authors and the executor daemon
// that runs their handlers.
//
// # Handlers
//
// The SDK is shaped like net/http. A [Handler] runs one attempt of a task
// instance; a [Mux] maps handler names (the execution.handler of a task
// definition) to handlers; [JSON] adapts a function that takes a typed
// payload:
//
//	type Resize struct {
//		Image string `json:"image"`
//		Width int    `json:"width"`
//	}
//
//	mux := executor.NewMux()
//	mux.Handle("images.resize", executor.JSON(func(ctx context.Context, t *executor.Job, p Resize) (any, error) {
//		executor.Logger(ctx).Info("resizing", "image", p.Image)
//		if p.Width <= 0 {
//			return nil, executor.Permanent(fmt.Errorf("width %d: use a positive width", p.Width))
//		}
//		return map[string]any{"url": resize(ctx, p)}, nil
//	}))
//
// The returned error is the outcome of the attempt: nil succeeds, an error
// fails the attempt and the task's retry policy decides about the next one,
// an error wrapped with [Permanent] fails without retry, and a panic is
// recovered as an error. The output is JSON-encoded into the report.
//
// The handler's context carries the attempt's deadline (the task's timeout),
// its cancellation (an operator's cancel, a lost lease, a worker shutting
// down: see [context.Cause]) and a [*slog.Logger] whose records are the
// instance's task log ([Logger]).
// A handler should return soon after its context ends.
//
// # Isolation and idempotency
//
// Options of [Mux.Handle] bound how a worker runs a handler: [Concurrency]
// gives it a pool of its own inside the worker's slots, so that a slow
// handler never fills the worker, and [RateLimit] throttles how often its
// attempts start. A task's concurrency.mutex_key keeps two attempts with the
// same rendered key from running at once on any workers. [Once] records a
// business step's success so that a retried attempt skips it. The rules,
// and what each guarantees, are in docs/execution.md.
//
// # The daemon
//
// [New] and [Service.Run] make a worker: it registers in the ax-workers
// bucket (its record, and a grant key per pool and handler, which only a
// credential that grants them may write: the dispatcher routes to a worker
// only what they back), pulls attempts from its pools' consumers on AX_DISPATCH only while
// it has free slots (urgent work first), takes a lease in ax-leases for each,
// runs the handler, reports it started if it runs past
// Options.StartedDelay, reports the outcome and stops renewing the lease. It needs NATS credentials only; the dispatcher owns the topology and
// PostgreSQL.
//
// One attempt's life on a worker:
//
//  1. fetch the dispatch message (one FetchNoWait per consumer, a batch at a
//     time, never more than the free slots) and take a slot; if the
//     handler's own slots are full, give the message back for
//     Options.RequeueDelay instead;
//  2. wait for the handler's rate limit, if it has one, then take the
//     mutex key, if the task has one; if another attempt holds it, give the
//     message back for Options.RequeueDelay;
//  3. create ax-leases/<instance>.<attempt> if absent; if it exists another
//     delivery of the attempt ran or runs, so the message is terminated;
//  4. ack the dispatch message (the lease fences any redelivery);
//  5. run the handler under the attempt's deadline, renewing the lease every
//     TTL/3; if it still runs Options.StartedDelay (1 s) later, publish the
//     started report (a shorter attempt sends none: its final report says
//     when it started, and the dispatcher records both transitions from it);
//  6. publish the succeeded or failed report, await its acknowledgement,
//     release the mutex key and stop renewing the lease, which ages out
//     one TTL after its last renewal.
//
// A dispatch naming a handler the worker does not have goes the same way and
// fails permanently at step 5 with an error that lists the worker's
// handlers: the instance's record reads RUNNING then FAILED, with the reason.
//
// Publishes of one batch (leases, started reports falling due together, renewals) are
// asynchronous and awaited together: one round trip per batch.
package executor
