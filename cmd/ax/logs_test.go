package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// shipLog publishes a line to AX_LOGS as an executor older than the
// worker token in log subjects did (ax.log.<instance>), which readers show.
func (e *cliEnv) shipLog(l schemas.LogLine) {
	e.t.Helper()
	if _, err := streams.Publish(context.WithoutCancel(e.t.Context()), e.js, streams.Default().InstanceLogs(l.InstanceID)[0], "", l); err != nil {
		e.t.Fatal(err)
	}
}

func TestLogsCommand(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.apply(reportTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateSucceeded, "")
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	lines := []schemas.LogLine{
		{Attempt: 1, WorkerID: "w-1", Level: "info", Message: "charging", Time: at,
			Fields: json.RawMessage(`{"order":"A-1","cents":1200,"tags":["a","b"],"note":"two words"}`)},
		{Attempt: 1, WorkerID: "w-1", Level: "error", Message: "card declined", Time: at.Add(1500 * time.Millisecond)},
		{Attempt: 2, WorkerID: "w-2", Level: "", Message: "plain", Time: at.Add(time.Minute), Fields: json.RawMessage(`{"empty":""}`)},
	}
	for _, l := range lines {
		l.InstanceID, l.Task = id, "nightly-report"
		e.shipLog(l)
	}
	local := func(d time.Duration) string { return at.Add(d).Local().Format("2006-01-02 15:04:05.000") }
	want := "--- attempt 1 on worker w-1\n" +
		local(0) + " INFO  charging order=A-1 cents=1200 tags=[\"a\",\"b\"] note=\"two words\"\n" +
		local(1500*time.Millisecond) + " ERROR card declined\n" +
		"--- attempt 2 on worker w-2\n" +
		local(time.Minute) + " -     plain empty=\"\"\n"
	if out := e.mustAx("logs", fmt.Sprint(id)); out != want {
		t.Errorf("ax logs printed\n%s\nwant\n%s", out, want)
	}
	if out := e.mustAx("logs", fmt.Sprint(id), "--attempt", "2"); out != "--- attempt 2 on worker w-2\n"+local(time.Minute)+" -     plain empty=\"\"\n" {
		t.Errorf("ax logs --attempt 2 printed\n%s", out)
	}

	// -f prints the same and ends with the instance, which has ended.
	code, out, errOut := e.ax("", "logs", fmt.Sprint(id), "-f")
	if code != 0 || out != want || errOut != fmt.Sprintf("instance %d ended SUCCEEDED\n", id) {
		t.Errorf("ax logs -f: exit %d\n%s\nstderr %q", code, out, errOut)
	}

	// An instance without log lines says so, on standard error.
	quiet := e.insertInstance("nightly-report", "ev-quiet", schemas.StateSucceeded, "")
	code, out, errOut = e.ax("", "logs", fmt.Sprint(quiet))
	if code != 0 || out != "" || !strings.Contains(errOut, fmt.Sprintf("instance %d has no log lines: its handler has logged nothing", quiet)) {
		t.Errorf("ax logs of an instance without lines: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = e.ax("", "logs", fmt.Sprint(id), "--attempt", "9")
	if code != 0 || !strings.Contains(errOut, "no log lines that --attempt and --since select") {
		t.Errorf("ax logs --attempt 9: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = e.ax("", "logs", fmt.Sprint(quiet), "-f")
	if code != 0 || !strings.Contains(errOut, "has no log lines") || !strings.HasSuffix(errOut, fmt.Sprintf("instance %d ended SUCCEEDED\n", quiet)) {
		t.Errorf("ax logs -f of an instance without lines: exit %d, stderr %q", code, errOut)
	}

	// -o json prints JSON lines, every page of them.
	for i := range 1000 {
		e.shipLog(schemas.LogLine{InstanceID: id, Task: "nightly-report", Attempt: 3, WorkerID: "w-3", Level: "debug",
			Message: "tick", Time: at.Add(time.Hour + time.Duration(i)*time.Millisecond)})
	}
	out = e.mustAx("logs", fmt.Sprint(id), "-o", "json", "--since", at.Add(time.Second).Format(time.RFC3339))
	jsonLines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(jsonLines) != 1002 {
		t.Fatalf("ax logs -o json printed %d lines, want 1002", len(jsonLines))
	}
	var first, last schemas.LogLine
	if err := json.Unmarshal([]byte(jsonLines[0]), &first); err != nil || first.Message != "card declined" || first.Level != "error" {
		t.Errorf("first JSON line %s (%v)", jsonLines[0], err)
	}
	if err := json.Unmarshal([]byte(jsonLines[1001]), &last); err != nil || last.Attempt != 3 || !last.Time.Equal(at.Add(time.Hour+999*time.Millisecond)) {
		t.Errorf("last JSON line %s (%v)", jsonLines[1001], err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "abc"}, `ax: "abc" is not an instance id`},
		{[]string{"logs", fmt.Sprint(id + 100)}, fmt.Sprintf("ax: instance %d does not exist", id+100)},
		{[]string{"logs", fmt.Sprint(id + 100), "-f"}, fmt.Sprintf("ax: instance %d does not exist", id+100)},
		{[]string{"logs", fmt.Sprint(id), "--since", "yesterday"}, `ax: --since "yesterday": use a duration back from now`},
		{[]string{"logs", fmt.Sprint(id), "--attempt", "-1"}, `ax: --attempt -1: attempts count from 1`},
		{[]string{"logs"}, `ax: accepts 1 arg(s)`},
	} {
		e.refuses(tt.args, tt.want)
	}
}
