// Package store is AX's PostgreSQL access: task definitions, instances and
// their transitions. Every write to an instance is a guarded transition —
// UPDATE … WHERE id = … AND state = ANY(from) AND attempt = … — and inserts
// its row into instance_transitions in the same statement, so the audit trail
// cannot miss a change and a report from a stale attempt changes nothing.
//
// Each table has one writing service: tasks and task_versions the api,
// instances and instance_transitions the dispatcher.
package store
