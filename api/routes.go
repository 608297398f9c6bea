package api

import (
	"net/http"

	"github.com/ax-scheduler/ax/schemas"
)

// Route is one route of the API, as [Routes] lists it.
type Route struct {
	// Method is the HTTP method, e.g. "GET".
	Method string
	// Pattern is the path, with its parameters in braces: "/v1/tasks/{name}".
	Pattern string
	// Role is the weakest token role the route takes; "" for a route that
	// needs no token (only GET /healthz).
	Role schemas.Role
	// Summary says in a few words what the route does; it is also the
	// operation's summary in the OpenAPI document.
	Summary string
}

// route is a Route with its handler.
type route struct {
	Route
	handle func(s *Service, w http.ResponseWriter, r *http.Request) error
}

// routeTable is the one list of the API's routes: the router, the
// authorization of each request, the OpenAPI document's test and the test
// that walks every route all read it. Add a route here, in the OpenAPI
// document (api/openapi.json) and in [Client].
var routeTable = []route{
	{Route{"GET", "/healthz", "", "Report whether PostgreSQL and NATS are reachable"}, (*Service).health},
	{Route{"GET", "/v1/openapi.json", schemas.RoleViewer, "This API's OpenAPI 3.1 document"}, (*Service).openAPI},

	{Route{"POST", "/v1/tasks", schemas.RoleAdmin, "Apply a task definition (JSON or YAML)"}, (*Service).applyTask},
	{Route{"GET", "/v1/tasks", schemas.RoleViewer, "List the tasks"}, (*Service).listTasks},
	{Route{"GET", "/v1/tasks/{name}", schemas.RoleViewer, "Get a task with its next cron firings"}, (*Service).getTask},
	{Route{"DELETE", "/v1/tasks/{name}", schemas.RoleAdmin, "Delete a task: it takes no more firings; its history stays"}, (*Service).deleteTask},
	{Route{"POST", "/v1/tasks/{name}/enable", schemas.RoleOperator, "Enable a task"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setEnabled(true)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/disable", schemas.RoleOperator, "Disable a task"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setEnabled(false)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/pause", schemas.RoleOperator, "Pause a task: its firings make no runs until it is resumed"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setPaused(true)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/resume", schemas.RoleOperator, "Resume a paused task"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setPaused(false)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/shadow", schemas.RoleOperator, "Put a task in shadow mode: it fires, its instances are recorded SHADOW, nothing runs"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setShadow(true, true)(w, r) }},
	{Route{"DELETE", "/v1/tasks/{name}/shadow", schemas.RoleOperator, "End a task's shadow mode without a cut-over: the task is disabled"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setShadow(false, false)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/cut-over", schemas.RoleOperator, "End a task's shadow mode and enable it: its next firing runs"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setShadow(false, true)(w, r) }},
	{Route{"POST", "/v1/tasks/{name}/runs", schemas.RoleOperator, "Fire a task"}, (*Service).fire},
	{Route{"GET", "/v1/tasks/{name}/runs/{event_id}", schemas.RoleViewer, "Get the instance a firing made, or (202) the delayed firing that waits"}, (*Service).instanceByEvent},
	{Route{"POST", "/v1/tasks/{name}/runs/{event_id}/cancel", schemas.RoleOperator, "Cancel a pending delayed firing: it never fires"}, (*Service).cancelFiring},
	{Route{"POST", "/v1/tasks/{name}/runs/{event_id}/fire", schemas.RoleOperator, "Fire a pending delayed firing now"}, (*Service).fireFiringNow},
	{Route{"GET", "/v1/firings", schemas.RoleViewer, "List the pending delayed firings, soonest due first"}, (*Service).listFirings},
	{Route{"GET", "/v1/tasks/{name}/ledger", schemas.RoleViewer, "Every tick the task's cron triggers scheduled in a range, and what became of it"}, (*Service).ledger},
	{Route{"GET", "/v1/tasks/{name}/explain", schemas.RoleViewer, "Why the task's tick at an instant did or did not run, in words"}, (*Service).explainTick},

	{Route{"GET", "/v1/instances", schemas.RoleViewer, "List instances, newest first"}, (*Service).listInstances},
	{Route{"GET", "/v1/instances/{id}", schemas.RoleViewer, "Get an instance with its transitions"}, (*Service).getInstance},
	{Route{"GET", "/v1/instances/{id}/logs", schemas.RoleViewer, "Read or follow an instance's task log"}, (*Service).instanceLogs},
	{Route{"GET", "/v1/instances/{id}/explain", schemas.RoleViewer, "An instance's decision timeline in words"}, (*Service).explainInstance},
	{Route{"POST", "/v1/instances/{id}/cancel", schemas.RoleOperator, "Cancel an instance that has not ended; a running attempt is told to stop"}, (*Service).cancel},
	{Route{"POST", "/v1/instances/{id}/rerun", schemas.RoleOperator, "Fire an instance's task again with its payload and priority"}, (*Service).rerun},

	{Route{"POST", "/v1/instances/bulk/rerun", schemas.RoleOperator, "Rerun the instances a query matches"}, (*Service).bulkRerun},
	{Route{"POST", "/v1/instances/bulk/cancel", schemas.RoleOperator, "Cancel the instances a query matches"}, (*Service).bulkCancel},
	{Route{"GET", "/v1/dead-letters", schemas.RoleViewer, "Instances that failed for good, grouped by task and error class"}, (*Service).listDeadLetters},
	{Route{"POST", "/v1/dead-letters/replay", schemas.RoleOperator, "Rerun a dead-letter group, optionally with a payload patch"}, (*Service).replayDeadLetters},
	{Route{"POST", "/v1/tasks/{name}/backfills", schemas.RoleOperator, "Backfill a task's schedule over a past range"}, (*Service).createBackfill},
	{Route{"GET", "/v1/backfills", schemas.RoleViewer, "List backfills with their progress, newest first"}, (*Service).listBackfills},
	{Route{"GET", "/v1/backfills/{id}", schemas.RoleViewer, "Get a backfill with its progress"}, (*Service).getBackfill},
	{Route{"POST", "/v1/backfills/{id}/pause", schemas.RoleOperator, "Pause a backfill"}, setBackfill(schemas.BackfillPaused)},
	{Route{"POST", "/v1/backfills/{id}/resume", schemas.RoleOperator, "Resume a paused backfill"}, setBackfill(schemas.BackfillRunning)},
	{Route{"POST", "/v1/backfills/{id}/cancel", schemas.RoleOperator, "Cancel a backfill: it fires no more ticks"}, setBackfill(schemas.BackfillCancelled)},

	{Route{"GET", "/v1/audit", schemas.RoleViewer, "List audit records: transitions and operator actions, newest first"}, (*Service).listAudit},
	{Route{"GET", "/v1/workers", schemas.RoleViewer, "List the live workers from their heartbeats"}, (*Service).listWorkers},
	{Route{"GET", "/v1/streams", schemas.RoleViewer, "List AX's JetStream streams and their consumers"}, (*Service).listStreams},

	{Route{"GET", "/v1/alerts", schemas.RoleViewer, "List alerts, newest first"}, (*Service).listAlerts},
	{Route{"POST", "/v1/alerts/{id}/ack", schemas.RoleOperator, "Acknowledge an alert: no more notifications until it resolves"}, (*Service).ackAlert},
	{Route{"GET", "/v1/alert-rules", schemas.RoleViewer, "List the alert rules"}, (*Service).listAlertRules},
	{Route{"PUT", "/v1/alert-rules/{name}", schemas.RoleAdmin, "Create or replace an alert rule"}, (*Service).putAlertRule},
	{Route{"GET", "/v1/alert-channels", schemas.RoleAdmin, "List the alert channels (their URLs hold secrets)"}, (*Service).listAlertChannels},
	{Route{"POST", "/v1/alert-channels", schemas.RoleAdmin, "Add an alert channel: a webhook, WeCom robot or Slack webhook"}, (*Service).addAlertChannel},
	{Route{"DELETE", "/v1/alert-channels/{id}", schemas.RoleAdmin, "Delete an alert channel"}, (*Service).deleteAlertChannel},
	{Route{"GET", "/v1/limits", schemas.RoleViewer, "List the named limits with their use: running and waiting by key"}, (*Service).listLimits},
	{Route{"GET", "/v1/limits/{name}", schemas.RoleViewer, "Get a named limit with its use"}, (*Service).getLimit},
	{Route{"PUT", "/v1/limits/{name}", schemas.RoleAdmin, "Create or replace a named limit"}, (*Service).putLimit},
	{Route{"DELETE", "/v1/limits/{name}", schemas.RoleAdmin, "Delete a named limit: what waits for it waits until it is applied again"}, (*Service).deleteLimit},
	{Route{"POST", "/v1/limits/{name}/pause", schemas.RoleOperator, "Pause a named limit: it admits nothing until resumed"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setLimitPaused(true)(w, r) }},
	{Route{"POST", "/v1/limits/{name}/resume", schemas.RoleOperator, "Resume a paused named limit"},
		func(s *Service, w http.ResponseWriter, r *http.Request) error { return s.setLimitPaused(false)(w, r) }},
	{Route{"GET", "/v1/reports/health", schemas.RoleViewer, "The fleet's health report"}, (*Service).healthReport},
	{Route{"GET", "/v1/reports/summary", schemas.RoleViewer, "Instances of a time window summed up: counts by state, success rate, run time percentiles"}, (*Service).instanceSummary},
	{Route{"GET", "/metrics", schemas.RoleViewer, "Prometheus metrics of this process"}, (*Service).metrics},

	{Route{"GET", "/v1/tokens", schemas.RoleAdmin, "List the API tokens, the revoked ones too"}, (*Service).listTokens},
	{Route{"POST", "/v1/tokens", schemas.RoleAdmin, "Create an API token; the answer holds its secret, shown once"}, (*Service).createToken},
	{Route{"DELETE", "/v1/tokens/{id}", schemas.RoleAdmin, "Revoke an API token"}, (*Service).revokeToken},
}

// Routes returns every route of the API, in the order of its reference.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, rt := range routeTable {
		out[i] = rt.Route
	}
	return out
}

// routes builds the router from routeTable: each handler behind the
// authorization its route needs.
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routeTable {
		handle := rt.handle
		h := s.handle(func(w http.ResponseWriter, r *http.Request) error { return handle(s, w, r) })
		mux.Handle(rt.Method+" "+rt.Pattern, s.traced(rt.Route, s.authorize(rt.Route, refuseUnstorable(h))))
	}
	s.consoleRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { noRoute(mux, w, r) })
	return mux
}
