package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api"
	"github.com/ax-scheduler/ax/schemas"
)

func TestFireCommand(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	code, _, errOut := e.ax(reportTask, "task", "apply", "-f", "-")
	if code != 0 {
		t.Fatal(errOut)
	}

	// No dispatcher runs, so no instance appears: ax says so on stderr.
	code, out, errOut := e.ax("", "fire", "nightly-report", "--payload", `{"day": "2025-03-01"}`, "--priority", "urgent", "--event-id", "ev-1")
	if code != 0 || out != "" || !strings.Contains(errOut, "fired nightly-report as event ev-1, but the dispatcher has not created its instance yet") {
		t.Errorf("fire without a dispatcher: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	s, err := e.js.Stream(t.Context(), "AX_TRIGGERS")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(t.Context(), "ax.trigger.nightly-report")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := schemas.ParseTriggerEvent(msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.EventID != "ev-1" || ev.Source != schemas.SourceManual || ev.Operator != operatorName() || ev.Priority != schemas.PriorityUrgent ||
		string(ev.Payload) != `{"day":"2025-03-01"}` || ev.PayloadVersion != 1 {
		t.Errorf("published firing = %+v", ev)
	}

	// The dispatcher made the instance of ev-2: ax prints just its id.
	id := e.insertInstance("nightly-report", "ev-2", schemas.StateDispatched, "")
	if out := e.mustAx("fire", "nightly-report", "--event-id", "ev-2"); out != fmt.Sprintln(id) {
		t.Errorf("fire printed %q, want the id %d", out, id)
	}
	var res api.FireResult
	if err := json.Unmarshal([]byte(e.mustAx("fire", "nightly-report", "--event-id", "ev-2", "-o", "json")), &res); err != nil ||
		res.InstanceID != id || res.EventID != "ev-2" || res.State != schemas.StateDispatched {
		t.Errorf("fire -o json = %+v, %v", res, err)
	}
	// The payload from standard input.
	if code, _, errOut := e.ax(`[1, 2]`, "fire", "nightly-report", "--payload", "@-", "--event-id", "ev-3"); code != 0 {
		t.Errorf("fire --payload @-: exit %d: %s", code, errOut)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"fire", "missing"}, `ax: task "missing" does not exist`},
		{[]string{"fire", "Bad.Name"}, `ax: "Bad.Name" is not a task name`},
		{[]string{"fire", "nightly-report", "--payload", "{day: 1}"}, "ax: --payload is not valid JSON"},
		{[]string{"fire", "nightly-report", "--payload", "@/nonexistent.json"}, "ax: read --payload: open /nonexistent.json"},
		{[]string{"fire", "nightly-report", "--payload-version", "2"}, "ax: payload_version 2 does not match the schema_version 1"},
		{[]string{"fire", "nightly-report", "--priority", "high"}, "ax: invalid firing: priority: must be one of urgent, normal, low"},
		{[]string{"fire", "nightly-report", "--wait", "--timeout", "0s"}, "ax: --timeout 0s: use a positive duration"},
	} {
		code, out, errOut := e.ax("", tt.args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, tt.want) {
			t.Errorf("ax %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", strings.Join(tt.args, " "), code, out, errOut, tt.want)
		}
	}
	e.mustAx("task", "disable", "nightly-report")
	if code, _, errOut := e.ax("", "fire", "nightly-report"); code != 1 || !strings.Contains(errOut, "ax task enable nightly-report") {
		t.Errorf("fire a disabled task: exit %d, stderr %q", code, errOut)
	}
}

func TestFireWait(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	if code, _, errOut := e.ax(reportTask, "task", "apply", "-f", "-"); code != 0 {
		t.Fatal(errOut)
	}
	ok := e.insertInstance("nightly-report", "ev-ok", schemas.StateSucceeded, "")
	failed := e.insertInstance("nightly-report", "ev-failed", schemas.StateFailed, "boom")
	skipped := e.insertInstance("nightly-report", "ev-skipped", schemas.StateSkipped, "")
	running := e.insertInstance("nightly-report", "ev-running", schemas.StateRunning, "")

	for _, tt := range []struct {
		event   string
		timeout string
		code    int
		stdout  string
		stderr  string
	}{
		{"ev-ok", "5s", 0, fmt.Sprintf("%d\nSUCCEEDED\n", ok), ""},
		{"ev-failed", "5s", 2, fmt.Sprintf("%d\nFAILED\n", failed), fmt.Sprintf("ax: instance %d ended FAILED: boom\n", failed)},
		{"ev-skipped", "5s", 2, fmt.Sprintf("%d\nSKIPPED\n", skipped), fmt.Sprintf("ax: instance %d ended SKIPPED: handler said so\n", skipped)},
		{"ev-running", "300ms", 3, fmt.Sprintf("%d\n", running), fmt.Sprintf("ax: instance %d is still RUNNING after 300ms", running)},
		{"ev-none", "400ms", 3, "", "ax: the dispatcher created no instance for event ev-none of task nightly-report within 400ms"},
	} {
		code, out, errOut := e.ax("", "fire", "nightly-report", "--event-id", tt.event, "--wait", "--timeout", tt.timeout)
		if code != tt.code || out != tt.stdout || !strings.HasPrefix(errOut, tt.stderr) {
			t.Errorf("fire --event-id %s --wait: exit %d, stdout %q, stderr %q; want exit %d, %q, %q",
				tt.event, code, out, errOut, tt.code, tt.stdout, tt.stderr)
		}
	}

	var in schemas.Instance
	if err := json.Unmarshal([]byte(e.mustAx("fire", "nightly-report", "--event-id", "ev-ok", "--wait", "-o", "json")), &in); err != nil ||
		in.ID != ok || in.State != schemas.StateSucceeded || len(in.Transitions) != 2 {
		t.Errorf("fire --wait -o json = %+v, %v", in, err)
	}
}
