package api

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// storable reports whether PostgreSQL can store and compare s as text: it
// holds no NUL character and is valid UTF-8.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// refuseUnstorable answers 400 to a request whose path or query holds text
// PostgreSQL cannot take — a NUL character or bytes that are not UTF-8 —
// naming the parameter, instead of letting the query fail with a 500.
func refuseUnstorable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !storable(r.URL.Path) {
			writeError(w, badRequest("invalid_path", "", "the path holds a NUL character or bytes that are not UTF-8; remove them"))
			return
		}
		for k, vs := range r.URL.Query() {
			if !storable(k) {
				writeError(w, badRequest("invalid_parameter", "", "a query parameter's name holds a NUL character or bytes that are not UTF-8; remove them"))
				return
			}
			for _, v := range vs {
				if !storable(v) {
					writeError(w, badRequest("invalid_parameter", k, "query parameter %s holds a NUL character or bytes that are not UTF-8; remove them", k))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}
