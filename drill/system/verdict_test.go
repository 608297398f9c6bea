package system

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestLegal(t *testing.T) {
	tr := func(from, to schemas.State, attempt int) *transitionRow {
		return &transitionRow{from: from, to: to, attempt: attempt}
	}
	for _, c := range []struct {
		name       string
		prev, next *transitionRow
		want       bool
	}{
		{"creation", nil, tr(schemas.StateCreated, schemas.StateDispatched, 1), true},
		{"creation at a later attempt", nil, tr(schemas.StateCreated, schemas.StateDispatched, 2), false},
		{"first from RUNNING", nil, tr(schemas.StateRunning, schemas.StateSucceeded, 1), false},
		{"started", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateDispatched, schemas.StateRunning, 1), true},
		{"a gap", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateRunning, schemas.StateSucceeded, 1), false},
		{"DISPATCHED to SUCCEEDED", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateDispatched, schemas.StateSucceeded, 1), false},
		{"out of a terminal state", tr(schemas.StateRunning, schemas.StateSucceeded, 1), tr(schemas.StateSucceeded, schemas.StateRunning, 1), false},
		{"next attempt", tr(schemas.StateRunning, schemas.StateRetrying, 1), tr(schemas.StateRetrying, schemas.StateDispatched, 2), true},
		{"next attempt skips one", tr(schemas.StateRunning, schemas.StateRetrying, 1), tr(schemas.StateRetrying, schemas.StateDispatched, 3), false},
		{"attempt rises without a retry", tr(schemas.StateDispatched, schemas.StateRunning, 1), tr(schemas.StateRunning, schemas.StateSucceeded, 2), false},
	} {
		if got := legal(c.prev, c.next); got != c.want {
			t.Errorf("%s: legal = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLogsOfQuotesTheLinesNamingAStuckInstance quotes each process's log
// lines that name the instance by id or by event id, and no other.
func TestLogsOfQuotesTheLinesNamingAStuckInstance(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"dispatcher.log": `{"level":"error","message":"batch failed; redelivering it","event_id":"ev-42"}` + "\n" +
			`{"level":"info","instance_id":160,"message":"another"}` + "\n" +
			`{"level":"warn","instance_id":1601,"message":"dispatch refused"}` + "\n",
		"executor-e1.log": "12:00:00 INF attempt finished instance_id=1601 outcome=succeeded\n" +
			"12:00:01 INF attempt finished instance_id=16011 outcome=succeeded\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "logs", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &run{sb: &Sandbox{dir: dir}}
	got := r.logsOf(instanceRow{id: 1601, eventID: "ev-42"})
	for _, want := range []string{"batch failed", "dispatch refused", "instance_id=1601 outcome"} {
		if !strings.Contains(got, want) {
			t.Errorf("logsOf = %q, want it to quote %q", got, want)
		}
	}
	for _, not := range []string{"another", "16011"} {
		if strings.Contains(got, not) {
			t.Errorf("logsOf = %q, quotes a line of another instance (%q)", got, not)
		}
	}
	for _, in := range []instanceRow{{id: 7, eventID: "ev-7"}, {id: 8}} {
		if got := r.logsOf(in); got != "" {
			t.Errorf("logsOf of instance %d (event %q), which no line names, = %q, want none", in.id, in.eventID, got)
		}
	}
}
