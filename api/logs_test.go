package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// logAt is the time of the i-th line the tests log.
func logAt(i int) time.Time { return time.Date(2025, 3, 1, 11, 0, i, 0, time.UTC) }

// logLine is the i-th line of attempt of instance id, as an executor ships it.
func logLine(id int64, attempt, i int) schemas.LogLine {
	return schemas.LogLine{InstanceID: id, Task: "nightly-report", Attempt: attempt, WorkerID: "w-1",
		Level: "info", Message: fmt.Sprintf("step %d", i), Time: logAt(i), Fields: json.RawMessage(fmt.Sprintf(`{"i":%d,"region":"eu"}`, i))}
}

// shipLog publishes a line to AX_LOGS as an executor does and returns its
// stream sequence.
func (e *env) shipLog(l schemas.LogLine) uint64 {
	e.t.Helper()
	ack, err := streams.Publish(context.WithoutCancel(e.t.Context()), e.js, streams.Default().Log(l.InstanceID, l.WorkerID), "", l)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

// setState moves an instance to state, as the dispatcher would.
func (e *env) setState(id int64, state schemas.State) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.WithoutCancel(e.t.Context()), `UPDATE instances SET state = $2 WHERE id = $1`, id, string(state)); err != nil {
		e.t.Fatal(err)
	}
}

// messages returns the messages of lines, to compare them.
func messages(lines []schemas.LogLine) string {
	var m []string
	for _, l := range lines {
		m = append(m, l.Message)
	}
	return strings.Join(m, ", ")
}

func TestInstanceLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateRunning)
	other := e.insertInstance("nightly-report", "ev-2", schemas.StateRunning)
	quiet := e.insertInstance("nightly-report", "ev-3", schemas.StateSucceeded)
	var seqs []uint64
	for i, attempt := range []int{1, 1, 1, 2, 2} {
		seqs = append(seqs, e.shipLog(logLine(id, attempt, i)))
		e.shipLog(logLine(other, attempt, 100+i))
	}

	status, body := e.do("GET", fmt.Sprintf("/v1/instances/%d/logs", id), "", nil)
	if status != http.StatusOK || body["next"] != float64(seqs[4]) || body["more"] != nil {
		t.Errorf("logs: %d %v", status, body)
	}
	lines, _ := body["lines"].([]any)
	if len(lines) != 5 {
		t.Fatalf("logs has %d lines, want 5: %v", len(lines), body)
	}
	raw, _ := json.Marshal(lines[3])
	var line schemas.LogLine
	if err := json.Unmarshal(raw, &line); err != nil {
		t.Fatal(err)
	}
	if want := logLine(id, 2, 3); fmt.Sprintf("%+v", line) != fmt.Sprintf("%+v", want) {
		t.Errorf("line 3 = %s\nwant %+v", raw, want)
	}

	ctx := t.Context()
	for _, tt := range []struct {
		name string
		q    apiclient.LogQuery
		want string
		next uint64
		more bool
	}{
		{"all", apiclient.LogQuery{}, "step 0, step 1, step 2, step 3, step 4", seqs[4], false},
		{"attempt", apiclient.LogQuery{Attempt: 2}, "step 3, step 4", seqs[4], false},
		{"since", apiclient.LogQuery{Since: logAt(2)}, "step 2, step 3, step 4", seqs[4], false},
		{"since later", apiclient.LogQuery{Since: time.Now().Add(time.Hour)}, "", 0, false},
		{"limit", apiclient.LogQuery{Limit: 2}, "step 0, step 1", seqs[1], true},
		{"after", apiclient.LogQuery{After: seqs[1], Limit: 2}, "step 2, step 3", seqs[3], true},
		{"last page", apiclient.LogQuery{After: seqs[3], Limit: 2}, "step 4", seqs[4], false},
		{"attempt and limit", apiclient.LogQuery{Attempt: 1, Limit: 3}, "step 0, step 1, step 2", seqs[2], true},
		{"after the end", apiclient.LogQuery{After: seqs[4]}, "", seqs[4], false},
	} {
		page, err := e.client.Logs(ctx, id, tt.q)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := messages(page.Lines); got != tt.want || page.Next != tt.next || page.More != tt.more {
			t.Errorf("%s: lines %q, next %d, more %v; want %q, %d, %v", tt.name, got, page.Next, page.More, tt.want, tt.next, tt.more)
		}
	}

	// An instance without lines has an empty list.
	status, body = e.do("GET", fmt.Sprintf("/v1/instances/%d/logs", quiet), "", nil)
	if lines, ok := body["lines"].([]any); status != http.StatusOK || !ok || len(lines) != 0 || body["next"] != 0.0 {
		t.Errorf("logs of a quiet instance: %d %v", status, body)
	}

	if _, err := e.client.Logs(ctx, quiet+100, apiclient.LogQuery{}); !apiclient.IsNotFound(err) ||
		!strings.Contains(err.Error(), fmt.Sprintf("instance %d does not exist", quiet+100)) {
		t.Errorf("logs of a missing instance: %v", err)
	}
	for _, tt := range []struct{ query, field, want string }{
		{"attempt=0", "attempt", `attempt="0" is not an attempt number`},
		{"limit=0", "limit", `limit="0" is not a number from 1 to 10000`},
		{"limit=10001", "limit", `limit="10001" is not a number from 1 to 10000`},
		{"since=yesterday", "since", `since="yesterday" is neither an RFC 3339 time`},
		{"after=-1", "after", `after="-1" is not a stream sequence`},
		{"follow=maybe", "follow", `follow="maybe" is not a boolean`},
		{"follow=true&limit=5", "limit", "limit does not apply to follow=true"},
		{"level=warn", "level", `unknown query parameter "level"`},
	} {
		status, body := e.do("GET", fmt.Sprintf("/v1/instances/%d/logs?%s", id, tt.query), "", nil)
		errBody := errorOf(t, body)
		if status != http.StatusBadRequest || errBody["field"] != tt.field || !strings.HasPrefix(errBody["message"].(string), tt.want) {
			t.Errorf("?%s: %d %v, want 400 on %s: %q", tt.query, status, errBody, tt.field, tt.want)
		}
	}
}

// TestFollowLogs follows a running instance: the stored lines come first,
// then a line shipped while the stream is open, and the stream ends once the
// instance has ended and no line comes.
func TestFollowLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateRunning)
	e.shipLog(logLine(id, 1, 0))
	e.shipLog(logLine(id, 1, 1))

	got := make(chan schemas.LogLine, 10)
	type result struct {
		state schemas.State
		err   error
	}
	done := make(chan result, 1)
	go func() {
		state, err := e.client.FollowLogs(t.Context(), id, apiclient.LogQuery{}, func(l schemas.LogLine) error {
			got <- l
			return nil
		})
		done <- result{state, err}
	}()
	next := func() schemas.LogLine {
		t.Helper()
		select {
		case l := <-got:
			return l
		case r := <-done:
			t.Fatalf("FollowLogs returned %v, %v before the line", r.state, r.err)
		case <-time.After(time.Minute):
			t.Fatal("no line in a minute")
		}
		return schemas.LogLine{}
	}
	for i := range 2 {
		if l := next(); l.Message != fmt.Sprintf("step %d", i) || string(l.Fields) != fmt.Sprintf(`{"i":%d,"region":"eu"}`, i) {
			t.Errorf("stored line %d = %+v", i, l)
		}
	}
	// A live line, while the instance runs on.
	e.shipLog(logLine(id, 2, 2))
	if l := next(); l.Message != "step 2" || l.Attempt != 2 {
		t.Errorf("live line = %+v", l)
	}
	select {
	case r := <-done:
		t.Fatalf("FollowLogs ended with %v, %v while the instance runs", r.state, r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	e.setState(id, schemas.StateSucceeded)
	select {
	case r := <-done:
		if r.err != nil || r.state != schemas.StateSucceeded {
			t.Errorf("FollowLogs = %v, %v; want SUCCEEDED", r.state, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("FollowLogs did not end after the instance did")
	}
	if len(got) != 0 {
		t.Errorf("%d more lines", len(got))
	}

	// Filters apply to a followed log too; the stream is server-sent events.
	var lines []schemas.LogLine
	state, err := e.client.FollowLogs(t.Context(), id, apiclient.LogQuery{Attempt: 1, Since: logAt(1)}, func(l schemas.LogLine) error {
		lines = append(lines, l)
		return nil
	})
	if err != nil || state != schemas.StateSucceeded || messages(lines) != "step 1" {
		t.Errorf("follow attempt 1 since line 1: %q, %v, %v", messages(lines), state, err)
	}
	// A start past every line ends the stream all the same.
	if _, err := e.client.FollowLogs(t.Context(), id, apiclient.LogQuery{Since: time.Now().Add(time.Hour)}, func(l schemas.LogLine) error {
		t.Errorf("line %+v from the future", l)
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestFollowLogsEvents reads the event stream as a browser's EventSource
// would, resuming after the id of a line with Last-Event-ID.
func TestFollowLogsEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateFailed)
	first := e.shipLog(logLine(id, 1, 0))
	second := e.shipLog(logLine(id, 1, 1))

	req, err := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/v1/instances/%d/logs?follow=true", e.srv.URL, id), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Last-Event-ID", fmt.Sprint(first))
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(logLine(id, 1, 1))
	want := fmt.Sprintf(": following the logs of instance %d\n\nid: %d\ndata: %s\n\nevent: end\ndata: {\"state\":\"FAILED\"}\n\n", id, second, data)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || string(body) != want {
		t.Errorf("follow answered %d %s:\n%s\nwant\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}

	// A follow of a missing instance is refused like any request.
	if _, err := e.client.FollowLogs(t.Context(), id+100, apiclient.LogQuery{}, func(schemas.LogLine) error { return nil }); !apiclient.IsNotFound(err) {
		t.Errorf("follow a missing instance: %v", err)
	}
}

// TestLogsOfOtherWorkersAreNotShown ships lines on an instance that worker
// w-1 holds: its own, one of an executor before the worker token (on
// ax.log.<instance>), and one shipped by w-evil whose body names w-1. The
// page and a follower show w-1's lines and the old one, never w-evil's.
func TestLogsOfOtherWorkersAreNotShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateSucceeded)
	ship := func(subject string, l schemas.LogLine) {
		t.Helper()
		if _, err := streams.Publish(context.WithoutCancel(t.Context()), e.js, subject, "", l); err != nil {
			t.Fatal(err)
		}
	}
	top := streams.Default()
	ship(top.Log(id, "w-1"), logLine(id, 1, 0))
	forged := logLine(id, 1, 1)
	forged.Message = "forged"
	ship(top.Log(id, "w-evil"), forged)
	ship(top.InstanceLogs(id)[0], logLine(id, 1, 2))

	status, body := e.do("GET", fmt.Sprintf("/v1/instances/%d/logs", id), "", nil)
	raw, _ := json.Marshal(body["lines"])
	var lines []schemas.LogLine
	if err := json.Unmarshal(raw, &lines); status != http.StatusOK || err != nil {
		t.Fatalf("logs: %d %v", status, body)
	}
	if got := messages(lines); got != "step 0, step 2" {
		t.Errorf("the page shows %q, want w-1's line and the old one", got)
	}
	var followed []schemas.LogLine
	if _, err := e.client.FollowLogs(t.Context(), id, apiclient.LogQuery{}, func(l schemas.LogLine) error {
		followed = append(followed, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := messages(followed); got != "step 0, step 2" {
		t.Errorf("a follower gets %q, want w-1's line and the old one", got)
	}
}

// TestLogsWaitForTheirAttemptsHolder ships a line of w-2 on an attempt no
// worker holds yet (its lines may come before its first report): the page
// ends before it, and shows it once w-2 holds the attempt.
func TestLogsWaitForTheirAttemptsHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.apply(echoTask)
	id := e.insertInstance("nightly-report", "ev-1", schemas.StateDispatched)
	if _, err := e.pool.Exec(t.Context(), `UPDATE instances SET worker_id = '' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	l := logLine(id, 1, 0)
	l.WorkerID = "w-2"
	e.shipLog(l)
	page := func() (string, any) {
		t.Helper()
		status, body := e.do("GET", fmt.Sprintf("/v1/instances/%d/logs", id), "", nil)
		raw, _ := json.Marshal(body["lines"])
		var lines []schemas.LogLine
		if err := json.Unmarshal(raw, &lines); status != http.StatusOK || err != nil {
			t.Fatalf("logs: %d %v", status, body)
		}
		return messages(lines), body["next"]
	}
	if got, next := page(); got != "" || next != float64(0) {
		t.Errorf("while no worker holds the attempt the page shows %q up to %v; want nothing, up to 0", got, next)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE instances SET worker_id = 'w-2', state = 'RUNNING' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got, _ := page(); got != "step 0" {
		t.Errorf("once w-2 holds the attempt the page shows %q, want its line", got)
	}
}
