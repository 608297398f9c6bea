// Package streams is AX's JetStream topology as code: the subjects, the
// streams, consumers and KV buckets every service relies on, [Ensure] to
// create them, and typed publishing and decoding of the messages in schemas.
//
// All names derive from a [Topology]'s prefix ("ax" by default), so several
// installations can share one NATS account:
//
//	ax.trigger.<task>                        AX_TRIGGERS  trigger (cron), any client → dispatcher; no schedules, no rollups
//	ax.fire.<task>.api                       AX_FIRINGS   API (firings, cancel orders) → dispatcher
//	ax.fire.<task>.ax                        AX_FIRINGS   dispatcher (chain firings, retries, reroutes, delayed firings due) → dispatcher
//	ax.sched.<task>.<event_id>               AX_FIRINGS   one-shot schedules of delayed firings → ax.fire.<task>.api|ax
//	ax.sched.<event_id>                      AX_FIRINGS   the dispatcher's one-shot schedules (retries, reroutes) → ax.fire.<task>.ax
//	ax.dispatch.<pool>.<priority>.<handler> AX_DISPATCH  dispatcher → the executors of a pool that serve the handler
//	ax.dispatch.worker.<worker_id>          AX_DISPATCH  dispatcher → one executor (hash and worker routing)
//	ax.report.<pool>.<worker_id>.<instance_id>
//	                                        AX_REPORTS   executors → dispatcher (work queue)
//	ax.audit.<task>                         AX_AUDIT     outbox relay → auditor, anyone
//	ax.log.<instance_id>.<worker_id>        AX_LOGS      executors → API, console, CLI
//	ax.control.<worker_id>                  core NATS    dispatcher, API → executor
//	ax.fence.<pool>.<worker_id>.<instance_id>
//	                                        core NATS    executor → dispatchers (request/reply: may a redelivered attempt start?)
//	ax.ready.<pool>.<priority>.<handler>    core NATS    dispatcher → idle executors of the queue (the doorbell)
//	ax.ready.worker.<worker_id>             core NATS    dispatcher → one idle executor
//
// and the KV buckets ax-workers (executor heartbeats, and the grant keys
// <worker_id>.<pool>.<handler> that prove what each may serve), ax-leases (one key per
// attempt), ax-mutex (concurrency.mutex_key), ax-once (the SDK's Once
// records) and ax-tasks (the task definitions the trigger and executors watch).
package streams
