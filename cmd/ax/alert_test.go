package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
)

func TestAlertCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	st := store.New(e.pool)
	a, err := st.RaiseAlert(t.Context(), store.AlertSignal{Rule: "consecutive_failures", Level: schemas.AlertP1, Key: "etl", Task: "etl",
		InstanceID: 42, Reason: "task etl failed 3 times in a row", At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	out := e.mustAx("alert", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") ||
		!strings.Contains(lines[1], "P1     firing") || !strings.Contains(lines[1], "consecutive_failures  etl  42") {
		t.Errorf("alert list printed\n%s", out)
	}
	if out := e.mustAx("alert", "ack", fmt.Sprint(a.ID)); out != fmt.Sprintf("alert %d (P1 consecutive_failures etl) acknowledged by %s\n", a.ID, operatorName()) {
		t.Errorf("alert ack printed %q", out)
	}
	var acked []schemas.Alert
	if err := json.Unmarshal([]byte(e.mustAx("alert", "list", "--state", "acked", "-o", "json")), &acked); err != nil || len(acked) != 1 {
		t.Errorf("alert list --state acked = %+v, %v", acked, err)
	}

	if out := e.mustAx("alert", "channel", "add", "--kind", "slack", "--url", "https://hooks.example/x"); !strings.HasPrefix(out, "channel 1 added: slack") {
		t.Errorf("channel add printed %q", out)
	}
	if out := e.mustAx("alert", "channel", "list"); !strings.Contains(out, "https://hooks.example/x") {
		t.Errorf("channel list printed\n%s", out)
	}
	if out := e.mustAx("alert", "channel", "delete", "1"); !strings.HasPrefix(out, "channel 1 deleted") {
		t.Errorf("channel delete printed %q", out)
	}

	if out := e.mustAx("alert", "rule", "set", "consecutive_failures", "--params", `{"failures": 5}`, "--level", "p0"); out != "rule consecutive_failures: consecutive_failures P0, enabled true, params {\"failures\":5}\n" {
		t.Errorf("rule set printed %q", out)
	}
	e.mustAx("alert", "rule", "set", "duration_jitter", "--disable")
	e.mustAx("alert", "rule", "set", "etl-backlog", "--kind", "backlog", "--level", "P1")
	out = e.mustAx("alert", "rule", "list")
	for _, want := range []string{"consecutive_failures  consecutive_failures  P0     true", "duration_jitter       duration_jitter       P2     false",
		"etl-backlog           backlog               P1     true     {}"} {
		if !strings.Contains(out, want) {
			t.Errorf("rule list lacks %q:\n%s", want, out)
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"alert", "ack", "x"}, `ax: "x" is not an alert id`},
		{[]string{"alert", "ack", "99"}, `ax: alert 99 does not exist`},
		{[]string{"alert", "list", "--state", "open"}, `ax: state="open" is not an alert state`},
		{[]string{"alert", "rule", "set", "new-rule"}, `ax: rule new-rule does not exist: give --kind and --level`},
		{[]string{"alert", "rule", "set", "backlog", "--kind", "timeout_rate"}, `ax: --kind timeout_rate: rule backlog is of kind backlog`},
		{[]string{"alert", "rule", "set", "backlog", "--params", "{age: 5m}"}, `ax: --params "{age: 5m}" is not JSON`},
		{[]string{"alert", "rule", "set", "backlog", "--params", `{"age": "soon"}`}, `ax: alert rule backlog: params.age: must be a duration string`},
		{[]string{"alert", "channel", "add", "--kind", "pager", "--url", "https://x"}, `ax: alert channel: kind: "pager" is not a channel kind`},
	} {
		e.refuses(tt.args, tt.want)
	}
}

func TestReportHealthCommand(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	e.apply("task_name: orphan\nexecution: {handler: builtin.echo}\n")
	if _, err := e.pool.Exec(t.Context(), `
		INSERT INTO instances (task, task_version, event_id, source, state, max_attempts, priority, pool, handler, timeout_ms,
			fired_at, finished_at, error)
		SELECT 'orphan', 1, 'ev-' || n, 'manual', 'FAILED', 1, 'normal', 'default', 'builtin.echo', 1000, now(), now(), 'boom'
		FROM generate_series(1, 3) n`); err != nil {
		t.Fatal(err)
	}
	out := e.mustAx("report", "health")
	for _, want := range []string{
		"Tasks failing in a row: 1\n  rule: the task's latest 2 or more ended instances FAILED",
		"  orphan  3         ",
		"boom",
		"Missed schedules: 0\n",
		"Runs far longer than their history: 0\n",
		"Tasks without an owner: 1\n  rule: the task's definition has no owner\n  orphan\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report health lacks %q:\n%s", want, out)
		}
	}
	var rep schemas.HealthReport
	if err := json.Unmarshal([]byte(e.mustAx("report", "health", "--min-failures", "4", "-o", "json")), &rep); err != nil ||
		len(rep.ConsecutiveFailures) != 0 || len(rep.WithoutOwner) != 1 {
		t.Errorf("report health --min-failures 4 -o json = %+v, %v", rep, err)
	}
	if code, _, errOut := e.ax("", "report", "health", "--factor", "0.5"); code != 1 || !strings.Contains(errOut, `factor="0.5" is not a number above 1`) {
		t.Errorf("report health --factor 0.5: exit %d, %s", code, errOut)
	}
}
