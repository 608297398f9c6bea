package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

// TestInstanceGetSaysWhyAndEnds has ax instance get show why a waiting
// instance waits and what ends it, ax instance list its kind, and a
// SUCCEEDED instance its final progress (it last reported 19/20).
func TestInstanceGetSaysWhyAndEnds(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	waiting := e.insertInstance("nightly-report", "ev-waiting", schemas.StateDispatched, "")
	done := e.insertInstance("nightly-report", "ev-done", schemas.StateSucceeded, "")
	if _, err := e.pool.Exec(t.Context(), `
		INSERT INTO instance_waits (instance_id, attempt, kind, reason, ends, since)
		SELECT id, attempt, 'unserved_pool', 'no live worker of pool "default" has registered handler "builtin.echo"',
			'start an executor with --pool default', now() FROM instances WHERE id = $1`, waiting); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE instances SET progress = '{"attempt": 1, "done": 19, "total": 20, "at": "2026-03-14T15:09:27Z"}' WHERE id = $1`, done); err != nil {
		t.Fatal(err)
	}
	get := e.mustAx("instance", "get", fmt.Sprint(waiting))
	if !regexp.MustCompile(`WAITS\s+no live worker of pool "default" has registered handler "builtin.echo" since \S+.*\(unserved_pool\)`).MatchString(get) ||
		!regexp.MustCompile(`UNTIL\s+start an executor with --pool default`).MatchString(get) {
		t.Errorf("instance get of a waiting instance:\n%s", get)
	}
	if list := e.mustAx("instance", "list"); !regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s.*unserved_pool$`, waiting)).MatchString(list) {
		t.Errorf("instance list shows no wait:\n%s", list)
	}
	get = e.mustAx("instance", "get", fmt.Sprint(done))
	if !strings.Contains(get, "20/20 (100%)") || strings.Contains(get, "WAITS") {
		t.Errorf("instance get of a SUCCEEDED instance that last reported 19/20:\n%s", get)
	}
}
