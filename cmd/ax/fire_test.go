package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/wire"
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
	ev := e.lastEvent("ax.fire.nightly-report.api")
	if ev.EventID != "ev-1" || ev.Source != schemas.SourceManual || ev.Operator != operatorName() || ev.Priority != schemas.PriorityUrgent ||
		string(ev.Payload) != `{"day":"2025-03-01"}` || ev.PayloadVersion != 1 {
		t.Errorf("published firing = %+v", ev)
	}

	// The dispatcher made the instance of ev-2: ax prints just its id.
	id := e.insertInstance("nightly-report", "ev-2", schemas.StateDispatched, "")
	if out := e.mustAx("fire", "nightly-report", "--event-id", "ev-2"); out != fmt.Sprintln(id) {
		t.Errorf("fire printed %q, want the id %d", out, id)
	}
	var res wire.FireResult
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
		e.refuses(tt.args, tt.want)
	}
	e.mustAx("task", "disable", "nightly-report")
	if code, _, errOut := e.ax("", "fire", "nightly-report"); code != 1 || !strings.Contains(errOut, "ax task enable nightly-report") {
		t.Errorf("fire a disabled task: exit %d, stderr %q", code, errOut)
	}
}

func TestFireWait(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
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

func TestFireLater(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)

	// A delay: nothing on stdout, the due time on stderr, a schedule in the stream.
	code, out, errOut := e.ax("", "fire", "nightly-report", "--delay", "2h", "--event-id", "later-1")
	if code != 0 || out != "" || !strings.Contains(errOut, "fired nightly-report as event later-1, due at ") ||
		!strings.Contains(errOut, "the dispatcher creates its instance then") {
		t.Errorf("fire --delay: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ev := e.lastEvent("ax.sched.nightly-report.later-1")
	if until := time.Until(ev.RunAt); until < 119*time.Minute || until > 2*time.Hour || ev.Operator != operatorName() {
		t.Errorf("scheduled firing = %+v, want one due in 2h by %s", ev, operatorName())
	}

	// A run_at, in JSON output.
	var res wire.FireResult
	runAt := "2099-03-01T09:00:00.5+01:00"
	if err := json.Unmarshal([]byte(e.mustAx("fire", "nightly-report", "--run-at", runAt, "--idempotency-key", "k-1", "-o", "json")), &res); err != nil ||
		res.EventID != "idem-k-1" || res.InstanceID != 0 || res.RunAt.Format(time.RFC3339Nano) != "2099-03-01T08:00:00.5Z" {
		t.Errorf("fire --run-at -o json = %+v, %v", res, err)
	}
	// The same key again: the waiting firing, said on stderr.
	code, _, errOut = e.ax("", "fire", "nightly-report", "--run-at", runAt, "--idempotency-key", "k-1")
	if code != 0 || !strings.Contains(errOut, "an earlier firing with this idempotency key is waiting for its time") {
		t.Errorf("fire with the key again: exit %d, stderr %q", code, errOut)
	}
	// The key's instance exists: its id, and a note.
	id := e.insertInstance("nightly-report", "idem-k-2", schemas.StateSucceeded, "")
	code, out, errOut = e.ax("", "fire", "nightly-report", "--idempotency-key", "k-2")
	if code != 0 || out != fmt.Sprintln(id) || !strings.Contains(errOut, fmt.Sprintf("an earlier firing with this idempotency key made instance %d", id)) {
		t.Errorf("fire with a used key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = e.ax("", "fire", "nightly-report", "--idempotency-key", "k-2", "--payload", `{"other": true}`)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("was used by instance %d with another payload", id)) {
		t.Errorf("fire with a used key and another payload: exit %d, stderr %q", code, errOut)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"fire", "nightly-report", "--delay", "-5s"}, "ax: --delay -5s: use a positive duration"},
		{[]string{"fire", "nightly-report", "--delay", "soon"}, `ax: invalid argument "soon" for "--delay" flag`},
		{[]string{"fire", "nightly-report", "--delay", "1h", "--run-at", runAt}, "ax: --delay and --run-at both say when to fire; give one of them"},
		{[]string{"fire", "nightly-report", "--run-at", "tomorrow"}, `ax: --run-at "tomorrow": use an RFC 3339 time`},
		{[]string{"fire", "nightly-report", "--idempotency-key", "k", "--event-id", "e"}, "ax: invalid firing: event_id: must be left out when idempotency_key is set"},
	} {
		e.refuses(tt.args, tt.want)
	}
}

// TestFireWaitShowsProgress has ax fire --wait follow instances whose
// handler reported progress: off a terminal it prints the progress on
// standard error, a line per value, and leaves standard output as it was;
// ax instance get shows it too.
func TestFireWaitShowsProgress(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	running := e.insertInstance("nightly-report", "ev-running", schemas.StateRunning, "")
	done := e.insertInstance("nightly-report", "ev-done", schemas.StateSucceeded, "")
	unknown := e.insertInstance("nightly-report", "ev-unknown", schemas.StateRunning, "")
	for id, progress := range map[int64]string{
		running: `{"attempt": 2, "done": 2, "total": 4, "message": "halfway", "at": "2026-03-14T15:09:26Z"}`,
		done:    `{"attempt": 2, "done": 4, "total": 4, "at": "2026-03-14T15:09:27Z"}`,
		unknown: `{"attempt": 2, "done": 42, "total": 0, "message": "rows so far", "at": "2026-03-14T15:09:28Z"}`,
	} {
		if _, err := e.pool.Exec(t.Context(), `UPDATE instances SET progress = $2 WHERE id = $1`, id, progress); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		event  string
		code   int
		stdout string
		stderr string
	}{
		{"ev-running", 3, fmt.Sprintf("%d\n", running), fmt.Sprintf("instance %d: 2/4 (50%%): halfway\nax: instance %d is still RUNNING after", running, running)},
		{"ev-done", 0, fmt.Sprintf("%d\nSUCCEEDED\n", done), fmt.Sprintf("instance %d: 4/4 (100%%)\n", done)},
		{"ev-unknown", 3, fmt.Sprintf("%d\n", unknown), fmt.Sprintf("instance %d: 42 done: rows so far\n", unknown)},
	} {
		code, out, errOut := e.ax("", "fire", "nightly-report", "--event-id", tt.event, "--wait", "--timeout", "1500ms")
		if code != tt.code || out != tt.stdout || !strings.HasPrefix(errOut, tt.stderr) || strings.Count("\n"+errOut, "\ninstance ") != 1 {
			t.Errorf("fire --event-id %s --wait: exit %d, stdout %q, stderr %q; want exit %d, %q, %q (one progress line)",
				tt.event, code, out, errOut, tt.code, tt.stdout, tt.stderr)
		}
	}
	get := e.mustAx("instance", "get", fmt.Sprint(running))
	if !regexp.MustCompile(`PROGRESS\s+2/4 \(50%\): halfway \(attempt 2, at \S+`).MatchString(get) {
		t.Errorf("instance get shows no progress:\n%s", get)
	}
}
