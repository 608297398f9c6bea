// Package api is AX's HTTP API: operators and programs apply task
// definitions, enable and disable tasks, fire them and read their instances.
// It is the only writer of the tasks and task_versions tables; it fires a
// task by publishing a trigger event to AX_TRIGGERS, exactly as any NATS
// client could, and never creates instances itself.
//
// Every route speaks JSON. A request the API refuses gets a 4xx status and a
// body
//
//	{"error": {"code": "task_disabled", "message": "…", "field": "…", "problems": [{"field": "…", "message": "…"}]}}
//
// whose message says what to fix. A firing is checked before anything is
// published — the task exists (404) and is enabled (409), payload_version
// equals its schema_version and the payload satisfies its payload_schema
// (422) — and then waits up to [Options].RunWait for the dispatcher to create
// the instance (201), or answers 202 with the event id. A firing with
// run_at or delay answers 202 at once with its event id and run_at: it is
// published as a one-shot JetStream message schedule (see docs/protocol.md).
// A firing with an idempotency_key has the event id idem-<key>: the same key
// again returns the original instance (200) when the payload is the same JSON
// value, and 409 naming that instance when it is not. [Client] is the Go
// client of the API; the ax CLI is built on it.
//
// Routes:
//
//	POST /v1/tasks                        apply a task definition (JSON or YAML)
//	GET  /v1/tasks                        list the tasks
//	GET  /v1/tasks/{name}                 one task
//	POST /v1/tasks/{name}/enable          enable a task
//	POST /v1/tasks/{name}/disable         disable a task
//	POST /v1/tasks/{name}/runs            fire a task
//	GET  /v1/tasks/{name}/runs/{event_id} the instance a firing made
//	GET  /v1/instances                    list instances (?task=&state=&limit=&before=)
//	GET  /v1/instances/{id}               one instance with its transitions
//	POST /v1/instances/{id}/rerun         fire its task again with its payload and priority
//	GET  /healthz                         PostgreSQL and NATS reachable
package api
