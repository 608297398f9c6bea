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
//
// # Two trigger streams
//
// A stream that outside publishers write honours no header that acts beyond
// the writer's own message, and AX's own kinds of firing come from AX's
// services only. Measured on nats-server 2.15.3: a stream with message
// schedules gets allow_rollup from the server (so a Nats-Rollup: all purges
// it), a schedule may aim its copy at any subject of its stream (the API's
// included), a schedule's target must be a subject of the schedule's own
// stream, schedules cannot be switched off on an existing stream, and a
// duplicate window spans a stream's subjects. Hence AX_TRIGGERS
// (ax.trigger.<task>, outside publishers) has no schedules and no rollups, and
// AX_FIRINGS (ax.fire.<task>.api|ax, ax.sched.>) holds what the api and the
// dispatcher publish, the schedules and the subjects they publish to; its
// duplicate window is out of outside publishers' reach. The dispatcher
// consumes both (a consumer dispatcher on each, the same handling); the
// subject says who may have published a firing (streams.Origin), and it
// refuses AX's own kinds outside ax.fire.<task>.ax and an operator outside
// ax.fire.<task>.api. A delayed firing read from ax.trigger.<task> is
// scheduled onto ax.fire.<task>.ax as the dispatcher read it, with its
// operator already nats. The trigger service keeps ax.trigger.<task> for its
// cron ticks: ax dev hands its user to outside publishers, so the bus cannot
// tell them apart by user: a cron tick's Nats-Msg-Id is <task>/ and an HMAC of
// its event id under a key kept in PostgreSQL (streams.CronMsgID,
// store.CronMsgIDKey), which outside publishers cannot compute. Two replicas'
// firings of a tick collapse in the duplicate window, no outsider can take the
// id first, and the dispatcher takes a tick that carries it as the trigger
// service's; any other cron firing there it checks against the task's schedule
// (docs/security.md). An install made by an earlier AX (AX_TRIGGERS with
// schedules) is deleted and made again by the dispatcher's Ensure when it
// holds no pending schedule and no firing not yet taken; otherwise the
// dispatcher stops with an error saying how many and what to do.
//
// # Settings
//
// The topology's settings have one owner, the installation itself: the
// dispatcher and ax dev ensure the topology at start
// (streams.Topology.Reconcile), and a setting whose flag is left unset
// (--replicas, --lease-ttl, --logs-max-bytes, … — streams.Settings, each with
// an AX_* variable) keeps the value the installed stream or bucket has, and
// the dispatcher follows it; a new installation takes the defaults. A flag
// that states a different value is refused with an error that names it and
// --reconfigure, logged and shown as ax_topology_setting_mismatch{setting};
// with --reconfigure it is applied. So a second dispatcher started with fewer
// flags resets nothing (TestReconcileKeepsTheReplicasOfACluster; make drill's
// dispatcher-settings on a 3-node cluster).
//
// The dispatch consumers (pool_…, worker_…) are made by the executors, if
// absent, with an ack wait of the lease TTL, at least 10 s
// (streams.DispatchAckWait: 30 s at the default TTL, 10 s at 5 s), and never
// updated. A dispatch message taken by a worker that dies before it acks comes
// back after that ack wait, about when the reaper retries the attempts the
// worker had started
// (TestAttemptFetchedByAKilledWorkerComesBackAfterTheAckWait, drill/system:
// 9–10 s at TTL 5 s, 30 s before). A live worker holds a message from its
// fetch to its ack — a rate limit's wait, a mutex, the fence's question (up to
// 5 s), the lease write — and says it is in progress every third of the
// shortest ack wait its consumers actually have, so a short ack wait does not
// hand a held attempt to another worker. A consumer made before keeps its ack
// wait (its workers follow it): after a lease TTL change (--reconfigure) the
// ack wait changes only for a consumer removed and made again; the dispatcher
// does not update them. The trigger service, executors, the api and the
// auditor only look up what they use, and refuse to start, naming what is
// missing, when it is not there. A stream whose MaxBytes the server cannot
// reserve (AX_LOGS asks 1 GiB) stops the start with an error naming the
// stream, the bytes and --logs-max-bytes. A start-up request that NATS leaves
// unanswered or answers "unavailable" (a cluster still electing its meta
// leader or its streams' leaders, a server not up yet) or "no suitable peers
// for placement, peer offline" (a node the meta leader has not heard from yet:
// streams.Transient) is not a reason to stop: every service (dispatcher,
// trigger, executor, the auditor's relay and monitor) runs its start-up work
// on the topology through streams.UntilStarted, which logs each failure (…
// start-up failed; trying again, with retry_in) and tries again after 0.25 s,
// doubling up to 10 s, until it succeeds or the service is stopped. A refusal
// that waiting cannot cure (a stream missing, a setting in conflict, an
// executor credential that does not name its consumer) still stops the start
// with the error (TestServicesStartOnceJetStreamAnswers). An executor reads
// the lease TTL from the leases bucket at start and again at every renewal
// tick, and renews every third of the TTL it read last, so a changed
// --lease-ttl reaches running executors within one renewal (a TTL cut below
// the time since a lease's last renewal ends that lease: shorten it in steps
// no larger than a third).
package streams
