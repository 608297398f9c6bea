package api

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles is the web console: a single-page application of plain ES
// modules, one stylesheet and the vendored chart library, embedded so that
// the console works without a network.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP is the Content-Security-Policy of the console's files: they
// load nothing but themselves and talk to nothing but this API.
const consoleCSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"

// consoleFS returns the files of the web console, rooted at its index.html.
func consoleFS() fs.FS {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic("api: the embedded console has no console directory: " + err.Error())
	}
	return sub
}

// consoleRoutes serves the web console on mux: its page at / and its
// assets under /console/. They need no token, as they hold no data: every
// call the console makes to /v1 sends the token its user logged in with.
func (s *Service) consoleRoutes(mux *http.ServeMux) {
	files := consoleFS()
	assets := http.StripPrefix("/console/", http.FileServerFS(files))
	mux.Handle("GET /{$}", consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "index.html")
	})))
	mux.Handle("GET /console/", consoleHeaders(assets))
}

// consoleHeaders sets the headers every file of the console is served with.
func consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
