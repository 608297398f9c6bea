package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/api/wire"
	"github.com/ax-scheduler/ax/internal/wait/waittest"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
	"github.com/ax-scheduler/ax/streams"
	"github.com/ax-scheduler/ax/streams/streamstest"
)

// concretePath fills a route's parameters with values that name nothing,
// so that a request that gets past authorization changes nothing.
func concretePath(pattern string) string {
	return strings.NewReplacer("{name}", "no-such-task", "{event_id}", "ev-none", "{id}", "999999").Replace(pattern)
}

// call sends a request with an Authorization header (none when auth is
// empty) and returns the status, the WWW-Authenticate header and the error
// body, if any.
func (e *env) call(method, path, auth string) (int, string, *wire.Error) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error *wire.Error `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body.Error
}

// TestEveryRouteNeedsItsRole walks every route of the router: without a
// token, with a wrong one, with each role too weak for it, and with the
// role it needs.
func TestEveryRouteNeedsItsRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	secrets := map[schemas.Role]string{}
	for _, role := range schemas.Roles {
		secrets[role] = apitest.Token(t, e.store, "walker-"+string(role), role)
	}
	unknown, err := store.NewTokenSecret()
	if err != nil {
		t.Fatal(err)
	}
	routes := api.Routes()
	if len(routes) < 20 {
		t.Fatalf("Routes() lists %d routes; the table looks truncated", len(routes))
	}
	for _, rt := range routes {
		name := rt.Method + " " + rt.Pattern
		path := concretePath(rt.Pattern)
		if rt.Role == "" {
			if rt.Pattern != "/healthz" {
				t.Errorf("%s needs no token; only GET /healthz may", name)
			}
			if status, _, _ := e.call(rt.Method, path, ""); status != http.StatusOK {
				t.Errorf("%s without a token: %d, want 200", name, status)
			}
			continue
		}
		for _, c := range []struct{ what, auth, code, challenge string }{
			{"without a token", "", "unauthenticated", `Bearer realm="ax"`},
			{"with an unknown token", "Bearer " + unknown, "invalid_token", `Bearer realm="ax", error="invalid_token"`},
			{"with a malformed token", "Bearer not-a-token", "invalid_token", `Bearer realm="ax", error="invalid_token"`},
			{"with another scheme", "Basic YWxpY2U6c2VjcmV0", "unauthenticated", `Bearer realm="ax"`},
		} {
			status, challenge, body := e.call(rt.Method, path, c.auth)
			if status != http.StatusUnauthorized || challenge != c.challenge || body == nil || body.Code != c.code {
				t.Errorf("%s %s: %d, WWW-Authenticate %q, %+v; want 401 %s with %q", name, c.what, status, challenge, body, c.code, c.challenge)
			}
		}
		for _, role := range schemas.Roles {
			status, _, body := e.call(rt.Method, path, "Bearer "+secrets[role])
			if role.Includes(rt.Role) {
				if status == http.StatusUnauthorized || status == http.StatusForbidden {
					t.Errorf("%s with a %s token: %d %+v, want past authorization", name, role, status, body)
				}
				continue
			}
			if status != http.StatusForbidden || body == nil || body.Code != "forbidden" ||
				!strings.Contains(body.Message, "needs the "+string(rt.Role)+" role") {
				t.Errorf("%s with a %s token: %d %+v, want 403 naming the %s role", name, role, status, body, rt.Role)
			}
		}
	}
	// A path the table does not have is no route, with or without a token.
	if status, _, body := e.call("GET", "/v1/nothing", ""); status != http.StatusNotFound || body == nil || body.Code != "route_not_found" {
		t.Errorf("GET /v1/nothing: %d %+v, want 404", status, body)
	}
}

func TestRoleChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	viewer := e.as(apitest.Token(t, e.store, "vera", schemas.RoleViewer))
	operator := e.as(apitest.Token(t, e.store, "otto", schemas.RoleOperator))
	ctx := t.Context()

	if _, err := viewer.ListTasks(ctx); err != nil {
		t.Errorf("viewer lists tasks: %v", err)
	}
	_, err := viewer.SetTaskEnabled(ctx, "nightly-report", false)
	if ae, ok := errors.AsType[*wire.Error](err); !ok || ae.Status != 403 ||
		ae.Message != `POST /v1/tasks/{name}/disable needs the operator role, and token "vera" has the viewer role; use a token with the operator role or stronger (ax token create --role operator)` {
		t.Errorf("viewer disables a task: %v", err)
	}
	if _, err := operator.SetTaskEnabled(ctx, "nightly-report", false); err != nil {
		t.Errorf("operator disables a task: %v", err)
	}
	if _, err := operator.ApplyTask(ctx, []byte(echoTask), "application/yaml"); !isStatus(err, 403) {
		t.Errorf("operator applies a task: %v, want 403", err)
	}
	// The change is recorded as the token's.
	recs, err := e.client.Audit(ctx, apiclient.AuditQuery{Operator: "otto"})
	if err != nil || len(recs) != 1 || recs[0].Action != "disable" {
		t.Errorf("audit of otto = %+v, %v; want the disable", recs, err)
	}
}

func isStatus(err error, status int) bool {
	ae, ok := errors.AsType[*wire.Error](err)
	return ok && ae.Status == status
}

func TestTokenRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *api.Options) { o.TokenCacheTTL = 10 * time.Millisecond })
	ctx := t.Context()

	made, err := e.client.CreateToken(ctx, "ci", schemas.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	if made.Token.Name != "ci" || made.Token.Role != schemas.RoleOperator || !strings.HasPrefix(made.Secret, "axt_") {
		t.Errorf("CreateToken = %+v", made)
	}
	ci := e.as(made.Secret)
	if _, err := ci.ListTasks(ctx); err != nil {
		t.Errorf("the new token lists tasks: %v", err)
	}
	if _, err := ci.ListTokens(ctx); !isStatus(err, 403) {
		t.Errorf("an operator lists tokens: %v, want 403", err)
	}
	if _, err := e.client.CreateToken(ctx, "ci", schemas.RoleViewer); !isStatus(err, 409) {
		t.Errorf("a second live token called ci: %v, want 409", err)
	}
	for _, c := range []struct{ body, field string }{
		{`{"name": "ci 2", "role": "viewer"}`, "name"},
		{`{"name": "ci2", "role": "root"}`, "role"},
		{`{"name": "ci2", "role": "viewer", "extra": 1}`, ""},
		{`{"name": 7}`, "name"},
	} {
		status, body := e.do("POST", "/v1/tokens", "application/json", strings.NewReader(c.body))
		errBody, _ := body["error"].(map[string]any)
		if status != 400 || (c.field != "" && errBody["field"] != c.field) {
			t.Errorf("POST /v1/tokens %s: %d %v, want 400 on field %q", c.body, status, body, c.field)
		}
	}

	toks, err := e.client.ListTokens(ctx)
	if err != nil || len(toks) != 2 || toks[0].Name != apitest.AdminName || toks[1].Name != "ci" {
		t.Fatalf("ListTokens = %+v, %v", toks, err)
	}
	if toks[0].LastUsedAt == nil {
		t.Error("the admin token's last_used_at is not set after its requests")
	}

	// Revocation through this API takes effect at once, though the
	// token's lookup is cached.
	if _, err := ci.ListTasks(ctx); err != nil {
		t.Fatalf("the ci token before its revocation: %v", err)
	}
	revoked, err := e.client.RevokeToken(ctx, made.Token.ID)
	if err != nil || revoked.RevokedAt == nil {
		t.Fatalf("RevokeToken = %+v, %v", revoked, err)
	}
	if _, err := ci.ListTasks(ctx); !isStatus(err, 401) {
		t.Errorf("the revoked token right after its revocation: %v, want 401", err)
	}
	// Revoked elsewhere (ax token revoke, another replica), within the TTL.
	other, err := e.client.CreateToken(ctx, "ops", schemas.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	ops := e.as(other.Secret)
	if _, err := ops.ListTasks(ctx); err != nil {
		t.Fatalf("the ops token: %v", err)
	}
	if _, err := e.store.RevokeToken(ctx, "ops", "test"); err != nil {
		t.Fatal(err)
	}
	waittest.ForTrue(t, "the token revoked in the store to be refused (401) after the cache's TTL", api.DefaultTokenCacheTTL+30*time.Second, func() bool {
		_, err := ops.ListTasks(ctx)
		return isStatus(err, 401)
	})
	if _, err := e.client.RevokeToken(ctx, made.Token.ID); !isStatus(err, 404) {
		t.Errorf("revoking it again: %v, want 404", err)
	}
	if status, body := e.do("DELETE", "/v1/tokens/x", "", nil); status != 400 {
		t.Errorf("DELETE /v1/tokens/x: %d %v, want 400", status, body)
	}
}

func TestRunRefusesWithoutAnAdminToken(t *testing.T) {
	t.Parallel()
	ns := streamstest.NewServer(t, streams.Config{})
	nc, _ := ns.Connect()
	st := store.New(storetest.NewDB(t))
	check := func(what string) {
		t.Helper()
		svc, err := api.New(api.Options{Store: st, Conn: nc, Addr: "127.0.0.1:0", Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		err = svc.Run(t.Context())
		if !errors.Is(err, api.ErrNoAdminToken) || !strings.Contains(err.Error(), "DATABASE_URL=… ax token create --role admin --name <you>") {
			t.Errorf("Run %s = %v, want ErrNoAdminToken saying how to make one", what, err)
		}
	}
	check("on an empty database")
	if _, _, err := st.CreateToken(t.Context(), "olga", schemas.RoleOperator, "test"); err != nil {
		t.Fatal(err)
	}
	check("with an operator token only")
	if _, _, err := st.CreateToken(t.Context(), "root", schemas.RoleAdmin, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeToken(t.Context(), "root", "test"); err != nil {
		t.Fatal(err)
	}
	check("with a revoked admin token only")
}
