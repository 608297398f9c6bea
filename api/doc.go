// Package api is AX's HTTP API: operators and programs apply task
// definitions, enable and disable tasks, fire them and read their instances.
// It is the only writer of the tasks and task_versions tables; it fires a
// task by publishing a trigger event to its own subject of AX_FIRINGS
// (ax.fire.<task>.api, where its operator counts), as any NATS client could
// to AX_TRIGGERS, and never creates instances itself.
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
// Every route but GET /healthz takes an API token, sent as Authorization:
// Bearer <token>, whose role (viewer, operator, admin) must be at least the
// route's: without a valid token the answer is 401, with too weak a role 403.
// The name of the token is recorded as the operator of every change. The
// routes and the role each needs are listed by [Routes] and described by the
// OpenAPI document [OpenAPI], served at GET /v1/openapi.json; see
// docs/security.md.
package api
