// Package dispatcher is AX's dispatcher service. It turns firings into
// instances and attempts, and executors' reports into transitions:
//
//   - it consumes AX_TRIGGERS (outside publishers, cron) and AX_FIRINGS
//     (the API's and its own firings) in batches, creates one instance per
//     (task, event_id) in one statement, publishes each attempt to its pool's
//     subject on AX_DISPATCH, awaits the acknowledgements together, and only
//     then acknowledges the firings;
//   - a firing due later (run_at, delay) is not created early: one due
//     within 2 s is held in memory, un-acked, until its time; one due later
//     is re-published as a one-shot JetStream message schedule set half a
//     second early, which the server publishes back at its time (no polling);
//   - a payload that the task's payload_schema refuses (a plain NATS publish:
//     the API checks before it publishes) makes a SKIPPED instance that says
//     where the payload is wrong;
//   - it consumes AX_REPORTS in batches and records them as guarded
//     transitions, then schedules the next attempt of every failure that has
//     attempts left (a one-shot JetStream message schedule: no polling);
//   - its reaper watches the ax-leases bucket: an expired lease means the
//     worker is gone, and the attempt moves to RETRYING or FAILED. The next
//     attempt's higher number fences the old one out in PostgreSQL.
//
// # Parts
//
// The Service runs its parts side by side (see Service.loops), each a type
// with the few inputs it reads, as River has a producer, a job executor, a
// completer and maintenance:
//
//   - intake (triggers.go, firings.go, fire.go, instances.go, refused.go,
//     delay.go): trigger messages to firings, firings to instances, one
//     firingBatch at a time;
//   - recorder (reports.go, unstorable.go): reports to transitions, in
//     rounds;
//   - router (routing.go, departures.go; workers.go keeps its view of
//     the live workers): where an attempt goes, and routing again what
//     waits on the queues of workers that left;
//   - reaper (reaper.go, rollups.go, outage.go, fence.go) with its
//     deathJudge (deaths.go): lapsed leases, timeouts, what vanished, the
//     grace of an outage, and the fence's answers about redelivered
//     dispatch messages;
//   - what the outcomes set going, which the Service does for all of them
//     as their completer (ends.go, chains.go, shards.go, send.go): retries,
//     chained tasks, promotions, cancels, fan-out and publishing attempts;
//   - the history's maintenance (history.go).
//
// The faults a rehearsal injects come through one seam, [Options.Faults],
// nil in production (drill/drillfaults implements ax drill's).
//
// Any number of dispatchers may run at once: they share the durable
// consumers, and every write is guarded, so replicas never double an effect.
//
// # Firings in bulk
//
// One message may carry up to 1,000 firings of its task, a JSON array of
// trigger events (AX's InsertMany): one stored message, one publish and
// acknowledgement, one delivery and one acknowledgement for all of them,
// instead of one each. A batch fires one task, the one its subject names, so
// that NATS subject permissions keep deciding who may fire what (a batch of
// several tasks on one subject would let a publisher allowed one task fire
// others). Each firing of a batch has its own event id (its own, or <message
// id>/<index>, seq-<stream sequence>-<index>), so a redelivered batch makes
// nothing twice, and each bad firing is its own SKIPPED instance; the message
// is acknowledged once all its firings are made (a Nak of any returns it
// whole). A dispatcher batch ends after a bulk message, so it holds at most
// one. Since a message may then be as large as the server's max_payload, the
// dispatcher's consumers (triggers and reports alike) are bounded by bytes as
// well as by count: each pull asks for at most 8 MiB or 4 × max_payload,
// whichever is more, and the messages received but not yet in a batch hold at
// most as much; never less than one message, since the server ends, and would
// keep ending, a pull whose max_bytes one message exceeds. POST
// /v1/tasks/{name}/runs with an array checks each firing as a single one and
// publishes those due now as one such message.
//
// # Creating instances
//
// The dispatcher consumes AX_TRIGGERS and AX_FIRINGS in batches (up to 500: it
// waits for one message, then takes whatever else is already there). One query
// loads the batch's tasks; one statement inserts every instance and, in the
// same statement, its →CREATED and CREATED→DISPATCHED transitions (or
// CREATED→SKIPPED with the reason: task disabled, payload version mismatch, a
// payload its payload_schema refuses, malformed event). A firing due later is
// not created yet: one due within 2 s is held in memory, un-acked, until its
// run_at; one due later is re-published as a message schedule (a plain NATS
// publish with a delay) and acknowledged. Instances already there are returned
// too, so a redelivered firing re-publishes its attempt instead of making
// another instance. The insert skips the keys it finds; when one appears
// meanwhile (another dispatcher's transaction) the unique index refuses the
// statement and the batch goes in again with ON CONFLICT (task, event_id) DO
// NOTHING, which waits for that transaction and skips its keys (a plain insert
// writes one WAL record less per instance than one with ON CONFLICT, which
// inserts speculatively and then confirms). No firing holds up its batch: text
// PostgreSQL cannot store is refused by ParseTriggerEvent (SKIPPED with the
// field), and when PostgreSQL refuses the insert for a value it alone judges
// (a data exception), the dispatcher splits the batch in halves until each
// refused firing is alone, creates the rest, and records each refused one
// SKIPPED without its payload (or terminates it, logged, when even that is
// refused), counted in ax_dispatcher_refused_firings_total. Reports are held
// to the same rule: a NUL in a report's error or progress message is replaced
// by U+FFFD, a success whose output PostgreSQL cannot store becomes a
// permanent failure naming the output's bad path, and a report PostgreSQL
// still refuses is found by splitting the report batch and recorded as a bare
// failure (ax_dispatcher_unstorable_reports_total). Otherwise the batch would
// fail for good, and its attempts would wait forever: the reaper leaves an
// attempt whose final report waits in AX_REPORTS to that report.
//
// # Routing: batches in flight
//
// Every DISPATCHED attempt is published asynchronously to
// ax.dispatch.<pool>.<priority>.<handler> (Nats-Msg-Id = <instance>-<attempt>)
// — or, for hash, worker and min_worker_version routing, to one worker's own
// ax.dispatch.worker.<worker_id>, chosen over the dispatcher's live view of
// ax-workers; a sharded or broadcast firing makes its child instances first
// (docs/execution.md) — the acknowledgements are awaited together
// (streams.Publisher: each publish answered by its acknowledgement, the
// stream's error, a timeout of 10 s, or at once "disconnected" when the
// connection loses its server), each queue's doorbell
// (ax.ready.<pool>.<priority>.<handler>, or ax.ready.worker.<worker_id>, core
// NATS) rings once, and only then are the firings acknowledged. Any failure
// naks the batch for redelivery; every step is idempotent. Up to 3 batches are
// in flight at once, so that a firing does not wait for the commit and the
// acknowledgements of the batch before it: a batch of fresh firings of tasks
// without max_running_instances inserts its instances while the batch before
// it still commits (their keys are all they share: a conflict waits in key
// order, and the batch that loses returns the key's instance as another's); a
// batch that creates instances of a limited task, starts retries or cancels
// writes only after the batch before it has sent its publishes, so a task's
// slots go to its firings in the order they came; and every batch publishes
// after the one before it, so attempts reach their queues in the order of the
// batches. A batch then awaits its acknowledgements while the next ones run.
//
// # Recording reports
//
// The dispatcher consumes AX_REPORTS in batches and applies them in one
// statement, one row per attempt (a report batch, the final reports a worker
// sends together on ax.report.<pool>.<worker>.batch when the dispatch message
// offers report_batches, counts as the reports it carries, each judged on its
// own; an attempt reported twice, or by two workers, in one consumer batch has
// its later report applied in a second statement): a started report alone
// moves its instance DISPATCHED→RUNNING; a final report RUNNING→SUCCEEDED |
// RETRYING | FAILED, and before it DISPATCHED→RUNNING for an attempt whose
// started report was not sent, not yet recorded or is in the same batch — both
// transitions from one update of the instance. A progress report sets the
// instance's progress while it is DISPATCHED or RUNNING at that attempt, in a
// statement of its own after the others — but before them for an attempt whose
// final report is in the same batch, since the stream holds it first and an
// ended attempt takes none. Each row is guarded: WHERE id = … AND attempt = …
// AND state IN (…), with the transition rows inserted by the same statement,
// and each report gets its own outcome (a report delivered twice is answered
// as applied before). A failure with attempts left becomes RETRYING and its
// next attempt is scheduled; a released report becomes RETRYING whatever the
// attempts left, raises the instance's max_attempts by one in the same update
// (the hand-back spends no attempt) and fires the next attempt at once. Every
// batch statement locks its instance rows in one global order, by id (a SELECT
// … ORDER BY id FOR UPDATE that the update joins; PostgreSQL sorts before it
// locks): two batches over the same rows wait for each other and never
// deadlock. A batch insert of instances inserts in (task, event_id) order for
// the same reason.
//
// # The reaper
//
// The dispatcher's reaper watches the bucket. A marker (or, at start, a
// RUNNING attempt older than the TTL without a lease: expiries that happened
// while no dispatcher watched) only names a candidate, handled in batches in
// this order:
//
//  1. PostgreSQL: one query keeps the candidates still DISPATCHED or RUNNING
//     at that attempt. Finished attempts — the fast path, every retired lease
//     whose report was recorded in time — cost nothing more.
//  2. AX_REPORTS: for each remaining one, the last message on
//     ax.report.*.*.<instance> (and, if that is another report, each pending
//     one of the instance: the work queue holds only unrecorded reports, a
//     few per instance), then, for those not found so, one read of the report
//     batches waiting on ax.report.*.*.batch (a few: a batch is acknowledged,
//     like a report, only once all its reports are applied or refused). A
//     final report of that attempt there means the worker finished: the
//     attempt is left to its report, counted in
//     ax_dispatcher_reaper_left_to_report_total. The fence looks at both the
//     same way.
//  3. Worker deaths: the rest are attempts whose worker died. Each instance
//     counts the workers that died while running it (instances.deaths, once
//     per attempt), and a death is judged (next paragraph).
//  4. The guarded write: the rest move to RETRYING, spending no attempt, or
//     FAILED (quarantined), and the next attempt is fired after a short
//     jitter (a suspect's after a lease TTL and more).
//
// A poison that kills its worker. A handler that ends its process (os.Exit, a
// panic on a goroutine it started, memory) takes every attempt of its worker
// with it, and one death cannot say which attempt did it. The policy, chosen
// so that a death never spends an innocent neighbour's attempt: *a worker
// death spends no attempt* (RETRYING with max_attempts one higher, as a
// hand-back), and the poison is found by counting — it is in every death, each
// neighbour in one. An instance in 2 deaths is a *suspect* (an event suspect
// on its timeline, ax_death_suspects_total); its retry waits its backoff and
// at least a lease TTL plus up to half a TTL at random, so it runs apart from
// the attempts it died beside (it spends no attempt either: two instances
// retried together after one death may share the next one, and cannot be told
// apart yet — charging both, as tried first, spent an innocent's attempt in
// one make drill run). Suspects of one death tied on its most deaths are
// retried one after the other, two lease TTLs apart, so the next death tells
// them apart. One in --quarantine-after deaths (default 3) that alone has the
// most deaths of its death's attempts is *quarantined*: FAILED with the
// reason quarantined: N workers died while running this instance (the audit
// trail, ax_instances_quarantined_total), whatever its attempts left. The
// others of a death are retried after a random 0–250 ms, each at its own
// moment (the dispatcher that takes its firing holds it in memory until then),
// not in one batch that one worker pulls. So a poison costs at most 3 workers,
// and its neighbours nothing. An instance unlucky enough to share every death
// with it is tied with it: neither is quarantined (quarantining both, the
// earlier rule, failed an innocent in an occasional drill run); both are
// retried apart, and the next death — one worker more — quarantines the
// poison alone. Counting
// attempts instead (the earlier rule) let one poison exhaust its neighbours'
// max_attempts; a per-pool quarantine would need a pool no executor serves. ax
// drill system's poison-kills-executor and TestPoisonKillsItsExecutor pin it
// (see docs/execution.md, "Worker deaths").
//
// Why a late report never loses to the reaper. A final report in AX_REPORTS is
// either still there when the reaper looks (step 2 skips the attempt, however
// long the report waits: a dispatcher that died holding it, PostgreSQL down, a
// backlog) or gone, and the recorder acknowledges — removes — a report only
// after the transaction that recorded it committed, so the attempt is no
// longer unfinished and step 3's guard (state IN (DISPATCHED, RUNNING) AND
// attempt = …) makes the write a no-op. A lease that expires while its report
// is not stored is one whose holder stopped renewing before its report was
// safe: only then is the worker taken for dead. Expiries the reaper cannot
// apply (PostgreSQL or NATS failing) are kept and tried again every second,
// never dropped; so are the start-up sweep and the promotion of waiting
// instances. A failure whose write committed and whose retry's publish
// failed is kept, and applied again until the retry is sent (no candidate
// list names a RETRYING attempt again); the retries of a dispatcher that
// died between the two are found by every reaper, at start and once a
// minute: instances its write moved to RETRYING over 15 s ago whose retry
// no schedule in AX_FIRINGS holds, sent again
// (ax_dispatcher_retries_recovered_total; see unsent.go). Once a lease TTL
// the reaper also lists the bucket's keys against the RUNNING attempts, for
// leases that a roll-up purged without a marker (docs/security.md, "Which
// headers take effect where").
// TestFinalReportsUnrecordedPastTheLeaseAreNotReaped and
// TestExactlyOnceThroughADispatcherKillAndAPostgresOutage (a real ax
// dispatcher killed with kill -9 while holding final reports, PostgreSQL down
// for three lease TTLs, one handler run per instance) pin it.
//
// # Timeouts and stale reports
//
// Timeouts are the executor's job first: the handler's context ends at the
// task's timeout and the executor reports the failure. An attempt still
// RUNNING 5 s (TimeoutGrace) past its deadline has an executor that hangs
// while it renews its lease — or a final report that waits unrecorded; once a
// second the reaper looks for such attempts with one query over the
// live-instance index, leaves those whose final report is in AX_REPORTS to it
// (as above), fails the others (timeout: …, then RETRYING or FAILED by the
// task's policy and backoff) and tells their worker to stop
// (ax.control.<worker>), so the old run cannot go on beside a retry. This
// and the minutely look for lost retries are the dispatcher's periodic
// queries: a deadline is not an event NATS can deliver without a schedule
// message per running attempt.
//
// PostgreSQL, not the lease, decides whose report counts: the next attempt's
// higher number fences the old one out, so a late report from a worker that
// lost its lease changes nothing. Nor does a report that is not the attempt's
// holder's — of another pool than the instance's, or of another worker than
// the one that holds the attempt (ax_refused_reports_total{kind}, event
// refused_<report kind>; see security.md). Nothing, but a stale report leaves
// a trace: the dispatcher counts such a refused report
// (ax_stale_reports_total{kind}), logs it at info with instance_id and
// attempt, and adds an event to the instance's timeline (table
// instance_events, kind stale_<report kind>, one per attempt and kind; GET
// /v1/instances/{id} answers it as events, ax instance get prints it under the
// transitions). A stale report is not a state change, so it is not a
// transition row: instance_transitions stays the state machine's record and
// the outbox, and the audit relay and the metrics built on it are unchanged.
// When a stale started report arrives, the dispatcher tells that worker to
// cancel the attempt (ax.control.<worker>). An executor that fails to renew a
// lease (the revision moved) cancels the attempt itself and reports nothing.
//
// # Outages
//
// After an outage: a grace. A nats-server that was down (a kill -9, a restart)
// ages the leases by its own clock when it is back, so every lease whose
// holder could not renew it meanwhile expires at once — while the final
// reports of the attempts that ended during the outage are still on their way:
// an executor retries a report while the server's JetStream starts (each try
// awaited at most 2 s, then 0.1, 0.3, 1 and 2 s between tries, 2 s from then
// on). Failing those at once recorded an attempt that succeeded as lost and
// ran it again (ax drill system's nats-kill). So for a grace after the
// dispatcher's connection comes back (one lease TTL, at least 10 s, from when
// the reaper first sees the reconnection in the connection's statistics) the
// reaper keeps its candidates and the fence gives no "lost" answer (no answer:
// the executor asks again); a final report that lands meanwhile wins, and
// afterwards the candidates are handled as above. The price: an attempt whose
// worker did die in the outage is failed one grace later.
// TestFinalReportAfterAReconnectWinsOverTheLeaseExpiry (a lease that expires
// after a forced reconnect, its report a second later) failed the attempt as
// lost without the grace.
//
// A final report during a JetStream outage of any length. A JetStream that
// refuses writes — a full store, a stream without quorum, a server down —
// refuses the worker's lease renewals and its final reports alike. The worker
// keeps a final report until the stream stores it, however long that takes: it
// tries again every 2 s at most, says so every 10 s, and keeps the attempt on
// its running set, so its lease is renewed whenever renewals go through. A
// report the first try did not store is also written (synced) to the worker's
// spool, --spool-dir (executor.Options.SpoolDir), one file per attempt,
// removed once stored; the next run of a worker on that folder sends what it
// finds there first. Only the worker's shutdown ends the tries, after twice
// ShutdownTimeout: the report stays in the spool. So a lease that expires
// under a live worker is one whose renewals JetStream refused — and the
// dispatcher sees that itself: every quarter of the lease TTL (at most 5 s) it
// puts a key of its own in the leases bucket, a write like a renewal, and
// while those writes are refused, and for a grace after the last refusal (the
// lease TTL or 10 s, plus a probe interval), the reaper fails no attempt as
// lost or overdue and the fence answers no "lost". The report, tried every 2
// s, lands within that grace once JetStream takes writes again, and decides
// its attempt; then the reaper goes on as before. What this costs and leaves:
// a worker that dies while JetStream refuses writes is taken for dead one
// grace after the outage ends; a worker that dies holding an unsent report
// delivers it from its spool when it starts again — if it starts within the
// grace, the report counts; later, the attempt has run again and the report is
// refused as stale, as it would be without a spool; a worker that never comes
// back is a worker that died before reporting (the attempt runs again). An
// attempt whose handler was still running when its lease expired in the outage
// is cancelled by the worker (its renewal finds the lease gone) and run again
// after the grace. Each refused probe counts in
// ax_publish_refusals_total{stream,reason} (store_full, unavailable),
// ax_jetstream_writable is 0 meanwhile, a dispatcher batch that fails counts
// in ax_dispatcher_batch_failures_total{stage}, and the account's store use is
// ax_jetstream_store_used_bytes / _limit_bytes; the alert rules for them are
// in deploy/prometheus/alerts.yml. An executor started while JetStream refuses
// writes waits for its entry in ax-workers, logged, instead of exiting.
// TestFinalReportsOutlastAFullJetStreamStore (a nats-server with a 48 MiB
// max_file_store, filled for 40 s while attempts end; before: 6 of 30
// instances ran twice), TestFinalReportsOutlastAClusterWithoutQuorum (two of
// three nodes down for 45 s; before: 5 of 30 ran twice),
// TestFinalReportRefusedIsSpooledAndSentAfterARestart,
// TestWorkerStartedWhileJetStreamRefusesWritesWaits and ax drill system's
// jetstream-full pin it.
//
// # The fence
//
// So an executor given a dispatch message whose JetStream metadata says it was
// delivered more than once, or which says it is republished, or which came
// soon after a reconnection, asks first, on core NATS, before it takes the
// lease: a request on ax.fence.<pool>.<worker>.<instance> with the instance,
// the attempt and its worker id (schemas.FenceQuestion). A first delivery asks
// nothing: the hot path is unchanged. A redelivery is rare (a lost ack, a
// requeue for full slots, a held mutex or a rate limit), so it may cost a
// round trip. The dispatchers answer as one queue group, once the reaper's
// watch of the leases bucket has read the bucket's current state:
//
//  1. The reads, in this order: the leases the watch saw put (the reaper's
//     holders, kept until it has dealt with the lease's expiry), AX_REPORTS
//     (any report of that attempt, by subject ax.report.*.*.<instance>: the
//     reaper's lookup), then PostgreSQL (pool, state, attempt,
//     dispatched_at). A lease is forgotten only after the attempt's end or
//     failure committed, and a report leaves AX_REPORTS only after it is
//     applied: what the first reads miss, PostgreSQL shows. That is the
//     barrier: every report stored before the question counts.
//  2. Another pool's attempt: refused
//     (ax_fence_answers_total{answer="refused"}), nothing else happens. NATS
//     permissions let an executor ask only on its own pools' fence subjects.
//  3. The instance is not at that attempt, or not DISPATCHED or RUNNING: no,
//     the attempt is over.
//  4. Yes only when the instance is DISPATCHED at that attempt, no report of
//     it waits, no lease of it was seen, and any lease put of it would have
//     been seen: it was dispatched after this dispatcher began to watch the
//     leases, or at most 2 × TTL − min(TTL/2, 2 s) before (both by
//     PostgreSQL's clock, read as the watch begins). The watch reads the
//     bucket's state first, and the bucket keeps every lease put for one TTL
//     after its last renewal and then its expiry marker for one TTL more: a
//     lease put since then is there, as a put or as a marker, and either
//     marks its attempt as one that may have run until the reaper has dealt
//     with it. So the fence tells "never ran" from "may have run" from what
//     survives a dispatcher's restart, not from its memory alone. The watch
//     begins before the dispatcher consumes its first firing, so every
//     attempt it dispatches itself is one it can answer yes for, and so is
//     one its dead predecessor dispatched just before dying: a firing whose
//     creation statement committed after the kill (it waited on a lock),
//     whose dispatch message was never published, comes back after the ack
//     wait, is published again marked republished, and runs once instead of
//     being failed as lost with no run
//     (TestFiringOrphanedByAKilledDispatcherRunsOnce, a real ax dispatcher
//     killed with kill -9 while its statement waits on a key the test holds
//     in PostgreSQL, max_attempts: 1, runs counted in a ledger the handler
//     writes; before, the instance ended FAILED with 0 runs). dispatched_at
//     is the time the dispatching statement wrote the row (clock_timestamp(),
//     after any wait for the table's lock, before the commit), the earliest a
//     lease of the attempt may have been put; a wait for another
//     transaction's key comes after it and counts against the horizon, and an
//     attempt dispatched longer than the horizon before its dispatcher's
//     successor began to watch is still answered below. What the dispatcher
//     did not see itself it knows only from the server: a lease put lost by
//     the server (a bucket leader's restart loses R3 limit markers) while the
//     only dispatcher restarted is unknown to both. A finished attempt is
//     still safe then (its final report waits in AX_REPORTS or is applied:
//     no); an attempt whose worker died unreported runs again under the same
//     attempt number rather than the next.
//  5. Otherwise it ran, or that cannot be shown: no. When its lease is alive,
//     another delivery runs it and nothing else happens — a pool-mate asking
//     can never end a running attempt. When its lease is gone, the attempt is
//     failed as lost on the reaper's path (PostgreSQL, then its final report
//     in AX_REPORTS, then the guarded write; a final report that waits wins),
//     and the instance goes on with the next attempt instead of running this
//     one twice or staying DISPATCHED for ever (answer="lost").
//
// The executor terminates a delivery told no, and gives back (NakWithDelay,
// IdleWait) one that got no answer (no dispatcher, a timeout; the dispatcher
// also stays silent when PostgreSQL fails) so that it asks again. In the
// window after a reconnection that is every delivery: while no dispatcher
// answers (they may still be reconnecting themselves), each one waits about
// IdleWait (1 s by default) and asks again, and none runs unanswered. After a
// yes it takes the lease as before; two deliveries told yes at once still race
// for the create-only lease, and one wins.
//
// The price: an attempt redelivered after it was requeued (full slots, a held
// mutex, a rate limit) whose answering dispatcher started watching more than
// the horizon above after the attempt was dispatched — a dispatcher down for
// longer than about two lease TTLs with requeued attempts in flight, or a
// server that lost a lease put (kill -9) while the only dispatcher restarted —
// cannot be shown never to have run, so it is failed as lost and costs an
// attempt (the next one starts at once, without backoff). At most once: AX
// chooses an attempt lost over an attempt run twice. The Node SDK's executor
// (sdk/node) asks the same question the same way. The fence still answers what
// a confirmed ack leaves: a message requeued before it started (full slots, a
// mutex, a rate limit) or whose ack the server confirmed and then lost in a
// cluster leader's change. TestRedeliveryOfASucceededAttemptDoesNotRunIt (it
// ran twice before the fence), TestRedeliveryOfAnAttemptThatNeverRanRunsIt,
// TestRedeliveryOfALostAttemptFailsIt, TestForeignFenceQuestions,
// TestFiringOrphanedByAKilledDispatcherRunsOnce (internal/e2e) and
// TestLeaseBookReachesBackTheBucketsHistory (dispatcher) pin it.
//
// # What a worker may serve
//
// A worker's record in ax-workers is its own word: its pools, handlers,
// version, slots. What it may serve is its credential's, and the dispatcher
// cannot read the credentials (deployments configure NATS from generated
// files, an authenticator or a chart; there is no user list to ask). So NATS
// itself proves the grant: an executor credential may write, besides its
// record, one grant key per pool and handler of its scope,
// <worker_id>.<pool>.<handler> (streams.GrantKey; the handler last, since it
// may hold dots, and worker ids and pools have none), and nothing else. The
// SDKs write the grant keys before the record on the same connection, so they
// are stored first, and renew them with every heartbeat (one empty publish
// each, no ack awaited), so the bucket's TTL drops them with a dead worker; a
// clean stop deletes them. The dispatcher's live view takes a worker's pools
// and handlers as the intersection of its record and its live grant keys:
// hash, worker, min_worker_version and broadcast routing use only that, and a
// report on an attempt no worker holds yet counts only when the worker's grant
// keys name the attempt's pool and handler (schemas.Report.Handlers, checked
// in the store's holder check). For that check a dispatcher remembers a grant
// for an hour after its key went, so a report recorded after its worker
// stopped still counts; a dispatcher that starts more than a bucket TTL after
// a worker's last heartbeat never saw its grants and refuses its reports on
// unheld attempts (a short attempt whose started report was never recorded):
// the reaper then retries the attempt. That window is the price of proving
// grants without a second copy of the credentials. Pool queues need nothing of
// this: pulling them is a consumer permission.
//
// Why keys and not a table of grants: a table would be a second copy of the
// NATS configuration, kept in step by hand in every deployment; a separate
// bucket would need a topology change and more permissions for the same proof.
// The cost is pools × handlers publishes per heartbeat and per worker, a few
// dozen bytes each. Readers of the bucket (the API's worker list, the
// auditor's heartbeat counts, conformance) skip keys with a dot; the
// dispatcher's Workers() shows the verified view.
//
// # Workers that leave
//
// The dispatcher watches ax-workers. A worker whose key is deleted or expires,
// or whose lease the reaper found lapsed (it is then suspended: not routed to
// until it heartbeats again, so a retry never goes back to it), has its own
// queue drained by the dispatcher through the worker's consumer: each attempt
// there is routed again by its Ax-Route header (no store read) — hash to the
// worker that wins the key now, min_worker_version to the least busy eligible
// worker, or through a routing firing 2 s later when none is live — and one
// pinned by name is handed back to wait, with a worker_gone event in its
// instance's timeline. The new copy is published and acknowledged by the
// stream before the old message is acknowledged; the old one is in flight to
// the dispatcher meanwhile, so no worker can run it, and the new copy's
// message id (<instance>-<attempt>@<worker>~<old sequence>) dedupes a repeat
// after a crash. Messages the worker had taken come back after their ack wait,
// so the dispatcher looks again then; at start it looks at every worker
// consumer whose worker is not live.
package dispatcher
