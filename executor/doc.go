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
// One attempt's life on a worker, and the part of the worker that does
// each step:
//
//  1. fetch the dispatch message (one FetchNoWait per queue that may hold
//     work, a batch at a time, never more than the free slots: pull.go) and
//     take a slot; if the handler's own slots are full, give the message
//     back for Options.RequeueDelay instead (admit.go);
//  2. wait for the handler's rate limit, if it has one, then take the
//     mutex key, if the task has one; if another attempt holds it, give the
//     message back for Options.RequeueDelay (admit.go, mutex.go);
//  3. for a message delivered more than once, republished, or taken soon
//     after a reconnection, ask the dispatchers whether the attempt may
//     start (fence.go; see Fencing below);
//  4. create ax-leases/<instance>.<attempt> if absent; if it exists another
//     delivery of the attempt ran or runs, so the message is terminated
//     (the lease keeper, lease.go);
//  5. ack the dispatch message and await the server's confirmation of the
//     ack (ackconfirm.go): a handler runs only once its message can no
//     longer come back as a first delivery;
//  6. run the handler under the attempt's deadline (the attempt runner,
//     attempt.go) while the lease keeper renews the lease every TTL/3; if
//     it still runs Options.StartedDelay (1 s) later, publish the started
//     report (a shorter attempt sends none: its final report says when it
//     started, and the dispatcher records both transitions from it);
//  7. flush the attempt's log lines (logship.go), publish the final report
//     and try it until it is stored (the reporter: report.go, finals.go,
//     spool.go), release the mutex key and stop renewing the lease, which
//     ages out one TTL after its last renewal.
//
// An attempt that does not start at any step gives its slots (and its
// mutex) back, and its message is terminated, given back, or left to come
// back after its ack wait, as the step says (Service.drop).
//
// A dispatch message whose mutex key does not render goes the same way and
// fails permanently at step 6, saying why: the instance's record reads
// RUNNING then FAILED, with the reason. One naming a handler the worker does
// not have (only its own queue can hold one) is given back to wait for a
// worker that has the handler.
//
// Publishes of one batch (leases, started reports falling due together, renewals) are
// asynchronous and awaited together: one round trip per batch.
//
// # Fencing
//
// The create-only lease write fences a second delivery of a dispatch message
// out only while the leases bucket keeps the attempt's history: the lease,
// then its expiry marker — and the marker goes one lease TTL after the expiry,
// not after its own TTL of max(TTL, 1 h): nats-server's max-age expiry removes
// every message older than the bucket's TTL but those marked never to expire,
// the markers among them (nats-server 2.15.3; a 3-node cluster whose bucket
// leader restarts loses R3 limit markers at once, see docs/scaling.md). Two
// TTLs after an attempt's last renewal, a create on its key succeeds.
//
// So the executor runs a handler only after the server confirmed the ack of
// its dispatch message (a double ack, DoubleAck, one round trip per batch of
// starts, awaited together). On one server the confirmation comes after the
// message is removed from the work queue, a removal written to the store like
// a publish (a kill -9 does not undo it); on a cluster, after the ack is
// replicated. A message that comes again is then one whose handler never ran.
// Without it, ax drill system's nats-kill ran a succeeded attempt twice: 1
// extra run in 2 of 8 runs of AX_DRILL_SCENARIOS=nats-kill go test -race
// -count=4 -run TestEveryScenario ./drill/system (two at once, load average
// 40–50 on 2 cores; lease TTL 2 s), none in 4 runs with it. The ack was sent
// (a plain, unconfirmed ack) as the server was killed, the server, which
// writes its consumers' state (delivery counts among it) only every 100 ms or
// so, gave the message again after its restart as a first delivery
// (num_delivered 1: no fence question, below), 2.4 s after the lease's expiry
// marker was written — the marker was gone and the lease create succeeded (the
// leases bucket's store held both lease puts, each with
// Nats-Expected-Last-Subject-Sequence: 0, and the MaxAge marker between them).
// An ack the server does not confirm (opTimeout, 10 s) leaves the attempt
// unrun and its lease unrenewed: the lease expires, and the reaper fails the
// attempt as lost (the next attempt starts); a message the server had removed
// after all is not delivered again, and one it had not is fenced by the lease
// while it lasts, then runs its attempt once.
// TestHandlerRunsOnlyAfterTheAckIsConfirmed (executor; its worker may not
// publish acks) fails with a plain ack.
//
// A confirmed ack does not cover a message the dispatcher published again. A
// firing or retry that comes back (its own acknowledgement lost, as in a
// nats-server kill -9, which loses its consumers' latest state) and finds its
// instance DISPATCHED has the attempt published once more (CreateInstances and
// StartRetries return it, marked store.Attempt.Republished; so do the existing
// children of a sharded parent). Its message id is the earlier message's, and
// within the duplicate window the stream drops it — unless the server
// restarted: it rebuilds its message ids from the messages it still holds, so
// the id of one acknowledged and removed is forgotten, and the copy is stored
// as new, delivered once, with nothing but the lease to fence it. ax drill
// system's nats-kill ran a succeeded attempt twice that way (1 extra run in a
// clean-clone CI run at load about 25, lease TTL 2 s: the earlier run's lease
// and its marker had aged out). Such a message says so
// (schemas.Dispatch.Republished, "republished": true), and the executor asks
// the fence for it as for a redelivery.
//
// Nor does it cover a server that loses a confirmed removal, should a kill -9
// lose the consumer's latest state with it: the message would come again after
// the restart as a first delivery (a drill run at load saw a finished attempt
// run again 4.6 s after its worker had logged its lease expiring during the
// outage, and could not tell this case from a republished copy). So for one
// lease TTL (at least 10 s) after an executor's connection comes back from
// losing its server, every delivery it takes asks the fence
// (TestFirstDeliveryAfterAReconnectAsksTheFence).
//
// # Reports during an outage
//
// A JetStream that refuses writes — a full store, a stream without quorum, a
// server down — refuses the worker's lease renewals and its final reports
// alike. The worker keeps a final report until the stream stores it, however
// long that takes: each try is awaited at most 2 s, then 0.1, 0.3, 1 and 2 s
// between tries, 2 s from then on; it says so every 10 s, and keeps the
// attempt on its running set, so its lease is renewed whenever renewals go
// through. A report the first try did not store is also written (synced) to
// the worker's spool, Options.SpoolDir (--spool-dir), one file per attempt,
// removed once stored; the next run of a worker on that folder sends what it
// finds there first. Only the worker's shutdown ends the tries, after twice
// ShutdownTimeout: the report stays in the spool. The dispatcher's side — why
// the reaper fails no attempt as lost while JetStream refuses writes, and for
// a grace after — is in package dispatcher's documentation, "Outages". An
// executor started while JetStream refuses writes waits for its entry in
// ax-workers, logged, instead of exiting.
package executor
