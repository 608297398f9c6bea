package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

func TestAuditCommand(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	op := operatorName()
	e.apply(reportTask)
	e.mustAx("task", "disable", "nightly-report")
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed, "boom")

	out := e.mustAx("audit")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The four records of the task, and the admin token the test made.
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "AT ") || !strings.Contains(lines[5], "token_create") {
		t.Fatalf("audit printed\n%s", out)
	}
	for i, want := range [][]string{
		{"nightly-report", fmt.Sprint(id), "CREATED→FAILED (attempt 2)", "worker:w-7", "handler said so"},
		{"nightly-report", fmt.Sprint(id), "-→CREATED (attempt 1)", "alice", "-"},
		{"nightly-report", " - ", "disable", orDash(op), "-"},
		{"nightly-report", " - ", `apply {"version":1}`, orDash(op), "-"},
	} {
		rest := lines[i+1]
		for _, part := range want {
			at := strings.Index(rest, part)
			if at < 0 {
				t.Errorf("line %d = %q, want %q in order", i+1, lines[i+1], want)
				break
			}
			rest = rest[at+len(part):]
		}
	}

	var recs []schemas.AuditRecord
	if err := json.Unmarshal([]byte(e.mustAx("audit", "--instance", fmt.Sprint(id), "--operator", "alice", "--since", "1h", "-o", "json")), &recs); err != nil ||
		len(recs) != 1 || recs[0].To != schemas.StateCreated {
		t.Errorf("audit --instance --operator --since -o json = %+v, %v", recs, err)
	}
	if err := json.Unmarshal([]byte(e.mustAx("audit", "--task", "nightly-report", "--limit", "1", "--before", recs[0].ID, "-o", "json")), &recs); err != nil ||
		len(recs) != 1 || recs[0].Action != schemas.ActionDisable {
		t.Errorf("audit --limit 1 --before = %+v, %v", recs, err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out := e.mustAx("audit", "--since", future); strings.Count(out, "\n") != 1 {
		t.Errorf("audit --since %s printed\n%s", future, out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--since", "yesterday"}, `ax: --since "yesterday": use a duration back from now`},
		{[]string{"audit", "--limit", "5000"}, `ax: limit="5000" is not a number from 1 to 1000`},
		{[]string{"audit", "--before", "42"}, `ax: before="42" is not an audit record id`},
		{[]string{"audit", "-o", "xml"}, `ax: --output "xml": use table, json or yaml`},
	} {
		e.refuses(tt.args, tt.want)
	}
}
