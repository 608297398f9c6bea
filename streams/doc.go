// Package streams is AX's JetStream topology as code: the subjects, the
// streams, consumers and KV buckets every service relies on, [Ensure] to
// create them, and typed publishing and decoding of the messages in schemas.
//
// All names derive from a [Topology]'s prefix ("ax" by default), so several
// installations can share one NATS account:
//
//	ax.trigger.<task>             AX_TRIGGERS  trigger, API, any client → dispatcher
//	ax.sched.<event_id>           AX_TRIGGERS  one-shot @at schedules targeting ax.trigger.<task>
//	ax.dispatch.<pool>.<priority> AX_DISPATCH  dispatcher → executors (work queue)
//	ax.report.<instance_id>       AX_REPORTS   executors → dispatcher (work queue)
//	ax.audit.<task>               AX_AUDIT     outbox relay → auditor, anyone
//	ax.log.<instance_id>          AX_LOGS      executors → API, console, CLI
//	ax.control.<worker_id>        core NATS    dispatcher, API → executor
//	ax.ready.<pool>               core NATS    dispatcher → idle executors of the pool
//	KV ax-workers, ax-leases, ax-mutex
package streams
