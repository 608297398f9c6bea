// Package trigger is AX's trigger service: it fires the cron triggers of
// every enabled task onto AX_TRIGGERS, where the dispatcher makes one
// instance of each firing.
//
// # One heap
//
// All cron triggers of all tasks live in one min-heap ordered by their next
// tick, with one timer for the earliest: no goroutine or timer per task.
// Schedules are parsed once per distinct expression and zone and times are
// Unix nanoseconds, so a task costs about 150 bytes
// (BenchmarkHundredThousandCronTasks). While it waits, the service encodes
// the firings of the next tick; at the tick it publishes them all
// asynchronously, awaits the acknowledgements together, and only then saves
// the triggers' last ticks in PostgreSQL (trigger_state, written in the
// background in batches).
//
// # Exactly one firing per tick
//
// A firing's event id is [schemas.CronEventID]: the task, the trigger's index
// and the tick, nothing else. Its Nats-Msg-Id is [streams.CronMsgID]: the
// task and an HMAC of the event id under the key the service reads from the
// store at start ([store.Store.CronMsgIDKey]). Any number of trigger
// services may run on the same tasks: the ticks they all fire collapse into
// one message in JetStream's duplicate window and, past it, into one
// instance in PostgreSQL, where (task, event_id) is unique. A replica that
// stops leaves no gap, since the others fire the same ticks. AX_TRIGGERS's
// duplicate window is shared with outside publishers (the trigger's NATS
// user is theirs under ax dev), who reach NATS but not PostgreSQL: they
// cannot compute a tick's id and take it first, and the dispatcher knows a
// firing that carries it for this service's.
//
// A task disabled and enabled again, or whose trigger is replanned, goes on
// from the tick it fired last, also while its state is being written: the
// persister tells the replan what it wrote during the read of the stored
// states (persister.unsaved).
//
// # Watching, not polling
//
// At start the service plans every task in the store. Then it watches the
// tasks bucket (streams.Topology.TasksBucket), where the api puts a
// [schemas.TaskEntry] after every change of a task, and reloads just the
// tasks whose entries changed: a changed trigger is replanned, an unchanged
// one keeps its place, a disabled or deleted task leaves the heap.
//
// # Misfires
//
// A tick the service sees more than Options.MisfireGrace (1 s) after its
// time is missed: the service was down, the task was disabled, or the
// process stalled. At start, when a task is enabled again, and at every wake,
// the missed ticks of each trigger — those after the trigger's last tick in
// trigger_state — follow its misfire policy: skip fires none, fire_once
// fires the latest, catch_up fires the latest max_catch_up of them, oldest
// first. A tick fired late carries a reason in its trigger event, which the
// instance keeps; every decision is logged at warn level as "cron ticks
// missed" with the task, the trigger, how many ticks were missed, fired and
// skipped, and the first and last skipped tick. A trigger never fires a tick
// from before it existed: a new trigger starts when its definition took
// effect (the task's updated_at), and one whose schedule changed starts
// afresh.
//
// # Time zones and daylight saving time
//
// A trigger's schedule is read in its IANA time zone (the zone database is
// embedded). When the clocks spring forward over a local time the schedule
// names, it fires once at the end of the gap; when they fall back over it,
// it fires once, at its first occurrence. A schedule that runs every hour
// keeps its cadence in elapsed time instead. See [taskdef.CronSchedule].
package trigger
