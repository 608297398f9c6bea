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
package dispatcher
