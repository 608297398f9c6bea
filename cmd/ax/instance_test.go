package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

func TestInstanceCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	e.apply("task_name: other\nexecution: {handler: h}\n")
	failed := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed, "boom")
	done := e.insertInstance("nightly-report", "ev-2", schemas.StateSucceeded, "")
	other := e.insertInstance("other", "ev-3", schemas.StateFailed, "")

	// -o json prints the instance as the API returns it.
	var in map[string]any
	if err := json.Unmarshal([]byte(e.mustAx("instance", "get", fmt.Sprint(failed), "-o", "json")), &in); err != nil {
		t.Fatal(err)
	}
	if in["id"] != float64(failed) || in["task"] != "nightly-report" || in["state"] != "FAILED" || in["attempt"] != 2.0 ||
		in["worker_id"] != "w-7" || in["error"] != "boom" {
		t.Errorf("instance get -o json = %v", in)
	}
	trs, _ := in["transitions"].([]any)
	if len(trs) != 2 {
		t.Fatalf("transitions = %v, want 2", in["transitions"])
	}
	first, second := trs[0].(map[string]any), trs[1].(map[string]any)
	if first["from"] != "" || first["to"] != "CREATED" || first["attempt"] != 1.0 || first["operator"] != "alice" || first["at"] == "" ||
		second["from"] != "CREATED" || second["to"] != "FAILED" || second["attempt"] != 2.0 || second["operator"] != "worker:w-7" ||
		second["reason"] != "handler said so" {
		t.Errorf("transitions = %v", trs)
	}

	out := e.mustAx("instance", "get", fmt.Sprint(failed))
	for _, want := range []string{
		fmt.Sprintf("ID        %d\n", failed), "TASK      nightly-report (version 1)\n", "STATE     FAILED\n",
		"ATTEMPT   2 of 3\n", "WORKER    w-7\n", "ERROR     boom\n",
		"FROM     TO       ATTEMPT  OPERATOR    REASON           AT\n",
		"-        CREATED  1        alice       -                ",
		"CREATED  FAILED   2        worker:w-7  handler said so  ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("instance get output lacks %q:\n%s", want, out)
		}
	}

	out = e.mustAx("instance", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.HasPrefix(lines[1], fmt.Sprint(other)) || !strings.HasPrefix(lines[3], fmt.Sprint(failed)) {
		t.Errorf("instance list printed\n%s", out)
	}
	var list []schemas.Instance
	if err := json.Unmarshal([]byte(e.mustAx("instance", "list", "--task", "nightly-report", "--state", "failed", "-o", "json")), &list); err != nil ||
		len(list) != 1 || list[0].ID != failed {
		t.Errorf("instance list --task --state = %+v, %v", list, err)
	}
	if err := json.Unmarshal([]byte(e.mustAx("instance", "list", "--limit", "1", "--before", fmt.Sprint(other), "-o", "json")), &list); err != nil ||
		len(list) != 1 || list[0].ID != done {
		t.Errorf("instance list --limit 1 --before = %+v, %v", list, err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"instance", "get", "abc"}, `ax: "abc" is not an instance id`},
		{[]string{"instance", "get", fmt.Sprint(other + 100)}, fmt.Sprintf("ax: instance %d does not exist", other+100)},
		{[]string{"instance", "list", "--state", "DONE"}, `ax: state="DONE" is not an instance state`},
		{[]string{"instance", "list", "--limit", "501"}, `ax: limit="501" is not a number from 1 to 500`},
	} {
		e.refuses(tt.args, tt.want)
	}
}

func TestInstanceRerun(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	failed := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed, "boom")

	// No dispatcher runs, so no instance appears: ax says so on stderr.
	code, out, errOut := e.ax("", "instance", "rerun", fmt.Sprint(failed))
	if code != 0 || out != "" || !strings.Contains(errOut, fmt.Sprintf("fired nightly-report as event rerun-%d-", failed)) {
		t.Errorf("instance rerun: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ev := e.lastEvent("ax.fire.nightly-report.api")
	if ev.Source != schemas.SourceManual || ev.Operator != operatorName() || ev.Reason != fmt.Sprintf("rerun of instance %d", failed) ||
		ev.Priority != schemas.PriorityNormal || ev.PayloadVersion != 1 {
		t.Errorf("published firing = %+v", ev)
	}

	// Another payload, given inline or in a file, goes through the API.
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(`{"day": "2025-03-03"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--payload", `{"day": "2025-03-02"}`}, {"--payload-file", file}} {
		if code, _, errOut := e.ax("", append([]string{"instance", "rerun", fmt.Sprint(failed)}, args...)...); code != 0 {
			t.Fatalf("instance rerun %v: exit %d, %s", args, code, errOut)
		}
		ev, err := taskdef.ParseTriggerEvent(e.lastMsg("ax.fire.nightly-report.api"))
		want := `{"day":"2025-03-02"}`
		if args[0] == "--payload-file" {
			want = `{"day":"2025-03-03"}`
		}
		if err != nil || string(compactJSON(t, ev.Payload)) != want || ev.Reason != fmt.Sprintf("rerun of instance %d", failed) {
			t.Errorf("rerun %v published %+v (%v), want payload %s", args, ev, err, want)
		}
	}

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"instance", "rerun", fmt.Sprint(failed), "--payload", "{}", "--payload-file", file}, 1, "ax: --payload and --payload-file both give a payload"},
		{[]string{"instance", "rerun", fmt.Sprint(failed), "--payload", "{nope"}, 1, "ax: --payload is not valid JSON"},
		{[]string{"instance", "rerun", "abc"}, 1, `ax: "abc" is not an instance id`},
		{[]string{"instance", "rerun", fmt.Sprint(failed + 100)}, 1, fmt.Sprintf("ax: instance %d does not exist", failed+100)},
		{[]string{"instance", "rerun", fmt.Sprint(failed), "--wait", "--timeout", "0s"}, 1, "ax: --timeout 0s: use a positive duration"},
		{[]string{"instance", "rerun", fmt.Sprint(failed), "--wait", "--timeout", "300ms"}, 3, "ax: the dispatcher created no instance for event rerun-"},
	} {
		code, out, errOut := e.ax("", tt.args...)
		if code != tt.code || out != "" || !strings.HasPrefix(errOut, tt.want) {
			t.Errorf("ax %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, out, errOut, tt.code, tt.want)
		}
	}
}

// compactJSON returns data without insignificant spaces.
func compactJSON(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatalf("compact %s: %v", data, err)
	}
	return b.Bytes()
}
