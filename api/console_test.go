package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestConsoleServed: the web console's page and assets are served without
// a token, with their content types, while /v1 still needs one.
func TestConsoleServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	anon := e.srv.Client()
	for _, tt := range []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="console/app.js">`},
		{"/console/app.js", "text/javascript; charset=utf-8", "function route()"},
		{"/console/api.js", "text/javascript; charset=utf-8", "Authorization: 'Bearer '"},
		{"/console/style.css", "text/css; charset=utf-8", ":root"},
		{"/console/vendor/chart.umd.min.js", "text/javascript; charset=utf-8", "Chart.js v4"},
	} {
		resp, err := anon.Get(e.srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", tt.path, resp.StatusCode)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != tt.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tt.path, ct, tt.contentType)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tt.path, csp)
		}
		if !strings.Contains(string(body), tt.contains) {
			t.Errorf("GET %s: the body lacks %q", tt.path, tt.contains)
		}
	}

	for path, want := range map[string]int{
		"/console/missing.js": http.StatusNotFound,
		"/v1/tasks":           http.StatusUnauthorized,
		"/nowhere":            http.StatusNotFound,
	} {
		resp, err := anon.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
