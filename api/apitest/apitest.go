// Package apitest helps tests call an AX API, which takes only requests
// with a token.
package apitest

import (
	"context"
	"net/http"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

// AdminName is the name of the token [Admin] makes.
const AdminName = "test-admin"

// Token makes a live API token called name with role in st and returns its
// secret. It fails t when it cannot.
func Token(t testing.TB, st *store.Store, name string, role schemas.Role) string {
	t.Helper()
	_, secret, err := st.CreateToken(context.WithoutCancel(t.Context()), name, role, "apitest")
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return secret
}

// Admin makes a live admin token called [AdminName] in st and returns its
// secret.
func Admin(t testing.TB, st *store.Store) string {
	t.Helper()
	return Token(t, st, AdminName, schemas.RoleAdmin)
}

// HTTPClient returns a copy of c (nil means http.DefaultClient) whose
// requests carry Authorization: Bearer token, unless they set the header
// themselves: for tests that build requests by hand.
func HTTPClient(c *http.Client, token string) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cp := *c
	base := cp.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cp.Transport = &bearer{base: base, token: token}
	return &cp
}

// bearer adds the Authorization header to requests that have none.
type bearer struct {
	base  http.RoundTripper
	token string
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport below.
func (b *bearer) CloseIdleConnections() {
	if c, ok := b.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
