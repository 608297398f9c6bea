package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/api/wire"
)

func TestTaskCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "nightly-report.yaml")
	if err := os.WriteFile(file, []byte(reportTask), 0o600); err != nil {
		t.Fatal(err)
	}

	if out := e.mustAx("task", "apply", "-f", file); out != "task nightly-report created (version 1)\n" {
		t.Errorf("first apply printed %q", out)
	}
	if out := e.mustAx("task", "apply", "-f", file); out != "task nightly-report unchanged (version 1)\n" {
		t.Errorf("second apply printed %q", out)
	}
	// JSON on standard input, with a change.
	code, out, errOut := e.ax(`{"task_name": "nightly-report", "description": "v2", "execution": {"handler": "builtin.echo", "timeout": "10m"}}`,
		"task", "apply", "-f", "-")
	if code != 0 || out != "task nightly-report updated to version 2\n" {
		t.Errorf("apply from stdin: exit %d, printed %q %q", code, out, errOut)
	}
	var applied wire.ApplyResult
	out = e.mustAx("-o", "json", "task", "apply", "-f", file)
	if err := json.Unmarshal([]byte(out), &applied); err != nil || applied.Version != 3 || !applied.Changed {
		t.Errorf("apply -o json = %+v, %v from %s", applied, err, out)
	}
	var versionOp string
	if err := e.pool.QueryRow(t.Context(), `SELECT operator FROM task_versions WHERE version = 1`).Scan(&versionOp); err != nil ||
		versionOp != operatorName() {
		t.Errorf("version 1 recorded operator %q, %v; want %q", versionOp, err, operatorName())
	}
	jsonFile := filepath.Join(dir, "other.json")
	if err := os.WriteFile(jsonFile, []byte(`{"task_name": "a-other", "execution": {"handler": "h"}, "dispatch": {"tags_all": ["gpu", "eu"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.mustAx("task", "apply", "-f", jsonFile)
	e.mustAx("task", "pause", "a-other")

	out = e.mustAx("task", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "NAME VERSION ENABLED PAUSED HANDLER") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "a-other 1 true true h eu+gpu normal") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "nightly-report 3 true false builtin.echo default normal") {
		t.Errorf("task list printed\n%s", out)
	}
	var list []wire.TaskInfo
	if err := json.Unmarshal([]byte(e.mustAx("task", "list", "-o", "json")), &list); err != nil || len(list) != 2 {
		t.Errorf("task list -o json = %+v, %v", list, err)
	}

	out = e.mustAx("task", "get", "nightly-report")
	for _, want := range []string{"VERSION  3", "ENABLED  true", "task_name: nightly-report", "timeout: 10m", "priority: normal"} {
		if !strings.Contains(out, want) {
			t.Errorf("task get output lacks %q:\n%s", want, out)
		}
	}

	if out := e.mustAx("task", "disable", "nightly-report"); out != "task nightly-report disabled\n" {
		t.Errorf("disable printed %q", out)
	}
	var got wire.TaskInfo
	if err := json.Unmarshal([]byte(e.mustAx("task", "get", "nightly-report", "-o", "json")), &got); err != nil || got.Enabled {
		t.Errorf("task get -o json after disable = %+v, %v", got, err)
	}
	if out := e.mustAx("task", "enable", "nightly-report"); out != "task nightly-report enabled\n" {
		t.Errorf("enable printed %q", out)
	}
}

func TestTaskCommandErrors(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("task_name: Bad.Name\nexecution: {}\npriority: high\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "get", "missing"}, `ax: task "missing" does not exist`},
		{[]string{"task", "enable", "missing"}, `ax: task "missing" does not exist`},
		{[]string{"task", "apply", "-f", bad}, "ax: invalid task definition:\n  - execution.handler: is required\n  - priority: must be one of urgent, normal, low\n  - task_name: "},
		{[]string{"task", "apply", "-f", "/nonexistent/task.yaml"}, "ax: read task definition: open /nonexistent/task.yaml"},
		{[]string{"task", "apply"}, "ax: name the definition file with -f FILE"},
		{[]string{"task", "apply", "-f", "-"}, "ax: the task definition in standard input is empty"},
	} {
		e.refuses(tt.args, tt.want)
	}
}
