// Package relay is the auditor's outbox relay, the audit trail: it relays
// the outbox tables of PostgreSQL — instance_transitions, written by the
// dispatcher in the transaction of each state change, and operator_actions,
// written by the api in the transaction of each operator action — to the
// AX_AUDIT stream, one [schemas.AuditRecord] per row on ax.audit.<task>,
// exactly once, even across crashes. A page's records of one task travel in
// one message (version 2 of the audit protocol, docs/protocol.md, read by
// [schemas.DecodeAuditMessage]); Options.Version 1 (ax auditor
// --audit-version 1) keeps one record a message for older consumers.
//
// Any number of relays may run; one relays at a time. The leader holds a
// PostgreSQL session advisory lock on a connection of its own (see
// [store.Store.AcquireRelay]); when that connection dies the lock is released
// and a follower, which tries every Options.RetryInterval, takes over. The
// leader reads the outbox in batches that follow commit order, publishes each
// batch asynchronously and awaits the acknowledgements together, and
// saves its cursor on the lock's connection, so a deposed leader can no
// longer move it: when a batch begins (with the end of the one before, see
// [store.Relay.Next]), within a batch once every Options.SaveInterval, and
// when the leader finds nothing new or stops.
//
// Exactly once rests on three things. Every message carries Nats-Msg-Id =
// the id of its (last) record ("t-<transition id>", "o-<action id>"), so
// JetStream drops a repeat inside its duplicate window. A new leader reads the
// last message of AX_AUDIT and skips every record up to it (and, when that
// message is not its page's last part — headers Ax-Audit-Page and
// Ax-Audit-Part k/n — re-reads the page, from the end of the message
// before its first part, and publishes only the missing parts): a leader
// that died before it stored its cursor left those records there, and the
// batch's order is fixed before its first record is published (see
// [store.Relay.Next]), so what precedes the last message is published too —
// also beyond the duplicate window. And every message expects the stream
// to end with the message before it (Nats-Expected-Last-Msg-Id; the first
// after a leader starts expects the stream's last sequence), so a deposed
// leader's late publish fails instead of adding a second copy: the stream
// only ever grows by the next record in the outbox's fixed order.
//
// The leader polls the outbox every Options.PollInterval while it is idle:
// no service rings it after a commit. A batch that follows one that read
// the outbox to its end begins half that after the one before began, so
// that at a steady rate a batch holds what committed meanwhile, not the few
// records of one round trip; after a batch that took longer — a backlog's —
// the next begins at once.
//
// # Reading a batch in pages
//
// A batch (the rows between two snapshots) is read in pages in id order: when
// it begins, one statement finds its first row of each table through the xid
// indexes, and each page then reads the primary key on from the cursor and
// stops at its last row, so a batch costs its rows once, however many pages it
// takes (the relay's session plans without sorts, sequential scans and JIT, so
// that no planner estimate turns a page back into a read and sort of the whole
// batch).
package relay
