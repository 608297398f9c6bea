// Package store is AX's PostgreSQL access: task definitions, instances and
// their transitions. Every write to an instance is a guarded transition —
// UPDATE … WHERE id = … AND state = ANY(from) AND attempt = … — and inserts
// its row into instance_transitions in the same statement, so the audit trail
// cannot miss a change and a report from a stale attempt changes nothing.
//
// Each table has one writing service: tasks and task_versions the api,
// instances and instance_transitions the dispatcher.
//
// # Instance history
//
// The leader. One dispatcher at a time maintains the history: the one that
// holds the session advisory lock ax_histo on a connection of its own
// (store.AcquireHistory); the others try every Interval (1 minute) and take
// over when its session dies. Every interval the leader creates the partitions
// of the current period and the next two, moves ended instances, and applies
// retention.
//
// The move (store.MoveHistory) takes families — an instance that ended before
// the cutoff with all its shards, when no instance of its run is live (so a
// chain never looks for a parent that left) and every transition of the family
// is on AX_AUDIT (the relay's cursor: the audit stream stays the permanent
// record) — and moves them in two transactions:
//
//  1. copy the instances, transitions and events into the history and each
//     key (task, event_id) into instance_history_keys, a plain table whose
//     primary key is the key;
//  2. wait until no session of the database holds a snapshot older than that
//     commit (pg_stat_activity.backend_xmin), then lock the copied instances
//     in id order — the order every hot statement locks in — refresh their
//     events (a stale report may have added one meanwhile) and delete them
//     from the hot tables.
//
// A pass moves in calls of up to a thousand families, oldest first. Each
// call reads the candidates up to its limit and deletes its own copies; the
// pass's first call (MoveOptions.Sweep) and its last (one that copied fewer)
// also delete every copy an older snapshot held up, looking each hot row's
// key up by itself. So a pass costs in proportion to what it moves, whatever
// the backlog before it or the size of the history
// (BenchmarkHistoryMoverAndList measures it; the plans are pinned by
// TestMoverChoiceReadsNoMoreThanItTakes and TestMoverLooksUpCopiesByTheirKeys).
//
// One instance per firing across the move. The dispatcher's insert skips a
// firing whose key is in instance_history_keys (one probe of one unique index,
// however many partitions there are). An insert whose snapshot predates step
// 1's commit does not see the key, but then the hot row is still there for its
// ON CONFLICT (task, event_id) to meet: step 2 does not delete it until every
// such snapshot has ended. So the dedupe holds for as long as the instance
// exists — in the hot tables, the history or the archive — not just for as
// long as JetStream can redeliver the firing (while its message is in
// AX_TRIGGERS or AX_FIRINGS, 24 hours by default; --history-after may not be
// shorter, so a firing cannot be redelivered after retention dropped its
// instance). A dropped instance takes its key along: a firing with that event
// id after the drop is a new one, and the audit stream holds the old one's
// record.
//
// A late report for an instance being moved waits for step 2's locks, or step
// 2 waits for its: a report before the delete finds the instance ended and is
// stale as ever (its event goes along to the history); one after finds no
// instance (Found false) and is acknowledged. RecordEvents locks the instances
// it writes for (FOR KEY SHARE), so an event of an instance that left is
// dropped rather than failing a foreign key.
//
// Retention (store.ExpireHistory) counts from fired_at: the dispatcher's
// --history-retention for every task (0, the default, keeps forever), a task's
// retention: 90d for its own (never less than --history-after: it is not in
// the history before). A partition whose whole range is older than the longest
// retention in force is dropped; in the others, the instances of a task whose
// shorter retention ran out are deleted one by one. A task with archive: true
// (or every task, with --history-archive) has its expired instances copied to
// instance_archive and instance_transition_archive first, cold tables that
// keep them and their keys. GET /v1/instances/{id}, reruns and idempotency
// keys find an instance in the history or the archive when it is not in the
// hot tables; GET /v1/instances?archived=true and ax instance list --archived
// list them.
package store
