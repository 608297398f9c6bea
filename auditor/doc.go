// Package auditor is AX's auditor service: one process that runs the two
// jobs that read what the other services wrote, each in a package of its
// own.
//
//   - [relay]: the audit trail. It relays the outbox tables of PostgreSQL
//     (instance_transitions, operator_actions) to the AX_AUDIT stream, one
//     record per row, exactly once, one leader at a time.
//   - [monitor]: the fleet metrics, the alert rules and their notifications,
//     read from AX_AUDIT, the ax-workers bucket and PostgreSQL, one leader
//     at a time.
//
// Each job elects its leader with a PostgreSQL advisory lock of its own, so
// the two may lead on different auditors; [Service.Leading] and
// [Service.Monitoring] tell which this one leads. [Options] configures both.
package auditor
