package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
)

// query is a request's query parameters, read one way for every list
// endpoint: parameters the endpoint does not take are refused (a misspelt
// filter must not silently list everything), and a limit or a time is
// read, and refused, in the same words wherever it appears.
type query struct {
	url.Values
	s *Service
}

// readQuery returns the query of r, or a 400 naming the first parameter
// that is not among takes, with what the endpoint takes, in that order.
func (s *Service) readQuery(r *http.Request, takes ...string) (query, *wire.Error) {
	v := r.URL.Query()
	for k := range v {
		if !slices.Contains(takes, k) {
			return query{}, badRequest("unknown_parameter", k, "unknown query parameter %q; %s takes %s",
				k, r.URL.Path, listWords(takes))
		}
	}
	return query{Values: v, s: s}, nil
}

// limit reads the parameter name as a number from 1 to max; absent, it is 0.
func (q query) limit(name string, max int) (int, *wire.Error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, badRequest("invalid_parameter", name, "%s=%q is not a number from 1 to %d", name, v, max)
	}
	return n, nil
}

// time reads the parameter name as an RFC 3339 time or a positive
// duration back from now (see Service.parseSince); absent, it is def.
func (q query) time(name string, def time.Time) (time.Time, *wire.Error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	t, ok := q.s.parseSince(v)
	if !ok {
		return def, badRequest("invalid_parameter", name,
			"%s=%q is neither an RFC 3339 time (2026-11-29T08:00:00Z) nor a positive duration back from now (90m, 24h)", name, v)
	}
	return t, nil
}

// task reads the parameter name as a task name; absent, it is "".
func (q query) task(name string) (string, *wire.Error) {
	v := q.Get(name)
	if v != "" && !taskNameRE.MatchString(v) {
		return "", badRequest("invalid_parameter", name,
			"%s=%q is not a task name: use 1-64 lower-case letters, digits, '_' and '-', starting with a letter or digit", name, v)
	}
	return v, nil
}

// listWords joins words as "a, b and c".
func listWords(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
