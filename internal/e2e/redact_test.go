package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apitest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// TestRedactHidesFieldsInEveryAnswer walks every route whose answer
// carries a payload or an output, with a viewer's, an operator's and an
// admin's token: none of them shows a field the task's redact names, each
// shows the marker instead, while the handler (and a rerun's) still gets
// the value.
func TestRedactHidesFieldsInEveryAnswer(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	const cardSecret, outSecret, childSecret = "4111-2222-3333-4444", "sk_live_out", "child-pin-99"
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		cards []string
	)
	mux := executor.NewMux()
	mux.Handle("test.vault", executor.JSON(func(_ context.Context, _ *executor.Job, p map[string]any) (any, error) {
		mu.Lock()
		cards = append(cards, fmt.Sprint(p["card"].(map[string]any)["number"]))
		mu.Unlock()
		return map[string]any{"token": outSecret, "ok": true}, nil
	}))
	mux.HandleFunc("test.child", func(context.Context, *executor.Job) (any, error) {
		return map[string]any{"pins": []any{map[string]any{"pin": childSecret}}}, nil
	})
	mux.HandleFunc("test.hold", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, context.Cause(ctx)
	})
	s.executor("w-redact", mux, 4)
	s.apply("task_name: vault\nexecution: {handler: test.vault}\nredact: [card.number, /token]\n")
	s.apply("task_name: vault-child\nexecution: {handler: test.child}\nafter: [{task: vault}]\nredact: ['/pins/*/pin']\n")
	s.apply("task_name: vault-hold\nexecution: {handler: test.hold}\nredact: [card.number]\n")
	t.Cleanup(func() { close(release) })

	payload := map[string]any{"card": map[string]any{"number": cardSecret, "exp": "12/29"}, "order": 42}
	res := s.fire("vault", payload)
	parent := s.waitState(res, schemas.StateSucceeded, 30*time.Second)
	child := s.chained("vault-child", s.runOf(res), schemas.StateSucceeded, 30*time.Second)
	held := s.fire("vault-hold", payload)
	s.waitState(held, schemas.StateRunning, 30*time.Second)

	tokens := map[schemas.Role]string{}
	for _, role := range []schemas.Role{schemas.RoleViewer, schemas.RoleOperator, schemas.RoleAdmin} {
		tokens[role] = apitest.Token(t, s.store, "redact-"+string(role), role)
	}
	call := func(role schemas.Role, method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.apiURL+path, nil)
		resp, err := apitest.HTTPClient(nil, tokens[role]).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	secrets := []string{cardSecret, outSecret, childSecret}
	all := []schemas.Role{schemas.RoleViewer, schemas.RoleOperator, schemas.RoleAdmin}
	for _, tc := range []struct {
		method, path string
		roles        []schemas.Role
		markers      int // at least this many markers in the answer
	}{
		{"GET", fmt.Sprintf("/v1/instances/%d", parent.ID), all, 2},
		{"GET", "/v1/instances?task=vault", all, 2},
		{"GET", "/v1/instances", all, 5},
		{"GET", "/v1/tasks/vault/runs/" + parent.EventID, all, 2},
		{"GET", fmt.Sprintf("/v1/instances/%d", child.ID), all, 2}, // its output and its parent's
		{"GET", fmt.Sprintf("/v1/audit?instance=%d", parent.ID), all, 0},
		{"GET", "/v1/audit", all, 0},
		{"POST", fmt.Sprintf("/v1/instances/%d/cancel", held), []schemas.Role{schemas.RoleOperator}, 1},
	} {
		for _, role := range tc.roles {
			t.Run(fmt.Sprintf("%s %s as %s", tc.method, tc.path, role), func(t *testing.T) {
				status, body := call(role, tc.method, tc.path)
				if status >= 300 {
					t.Fatalf("answered %d: %s", status, body)
				}
				for _, secret := range secrets {
					if strings.Contains(body, secret) {
						t.Errorf("the answer shows the redacted %q:\n%s", secret, body)
					}
				}
				if n := strings.Count(body, `"`+schemas.RedactedMarker+`"`); n < tc.markers {
					t.Errorf("the answer holds %d markers %q, want at least %d:\n%s", n, schemas.RedactedMarker, tc.markers, body)
				}
				if tc.markers > 0 && !strings.Contains(body, `"exp":"12/29"`) && !strings.Contains(body, `"pins"`) {
					t.Errorf("the answer lost the fields that are not redacted:\n%s", body)
				}
			})
		}
	}

	// A rerun fires the stored payload, not the redacted one.
	status, body := call(schemas.RoleOperator, "POST", fmt.Sprintf("/v1/instances/%d/rerun", parent.ID))
	if status != http.StatusCreated || strings.Contains(body, cardSecret) {
		t.Fatalf("rerun answered %d: %s", status, body)
	}
	waitFor(t, "the rerun's handler", 30*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(cards) == 2, nil
	})
	mu.Lock()
	if cards[0] != cardSecret || cards[1] != cardSecret {
		t.Errorf("the handlers saw cards %q; want the real one twice", cards)
	}
	mu.Unlock()
}
