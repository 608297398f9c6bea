package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/api/apiclient"
	"github.com/ax-scheduler/ax/drill/system/systemtest"
	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// logsOf reads every task log line of an instance through the API.
func (s *system) logsOf(id int64) []schemas.LogLine {
	s.t.Helper()
	var lines []schemas.LogLine
	q := apiclient.LogQuery{}
	for {
		page, err := s.client.Logs(context.Background(), id, q)
		if err != nil {
			s.t.Fatalf("read the logs of instance %d: %v", id, err)
		}
		lines = append(lines, page.Lines...)
		if !page.More {
			return lines
		}
		q.After = page.Next
	}
}

// TestTaskLogsOfASucceededRun: the lines a handler logs are readable through
// the API, in order and with their fields, as soon as the instance has
// succeeded, and a follower gets the same lines and the final state.
func TestTaskLogsOfASucceededRun(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.chatty", func(ctx context.Context, task *executor.Job) (any, error) {
		log := executor.Logger(ctx)
		for i := range 20 {
			log.Info("copied row", "row", i, "table", "orders")
		}
		log.Warn("done", "partial", false)
		return nil, nil
	})
	s.executor("w1", mux, 4)
	s.apply(`
task_name: chatty
execution:
  handler: test.chatty
`)
	id := s.fire("chatty", nil)
	s.waitState(id, schemas.StateSucceeded, 60*time.Second)

	lines := s.logsOf(id)
	if len(lines) != 21 {
		t.Fatalf("%d lines when the instance succeeded, want 21: %+v", len(lines), lines)
	}
	for i, l := range lines {
		level, msg, fields := "info", "copied row", fmt.Sprintf(`{"row":%d,"table":"orders"}`, i)
		if i == 20 {
			level, msg, fields = "warn", "done", `{"partial":false}`
		}
		if l.InstanceID != id || l.Task != "chatty" || l.Attempt != 1 || l.WorkerID != "w1" ||
			l.Level != level || l.Message != msg || string(l.Fields) != fields || l.Time.IsZero() {
			t.Errorf("line %d = %+v", i, l)
		}
	}

	var followed []schemas.LogLine
	state, err := s.client.FollowLogs(context.Background(), id, apiclient.LogQuery{}, func(l schemas.LogLine) error {
		followed = append(followed, l)
		return nil
	})
	if err != nil || state != schemas.StateSucceeded || len(followed) != len(lines) {
		t.Errorf("follow: %d lines, %v, %v; want %d lines and SUCCEEDED", len(followed), state, err, len(lines))
	}
}

// TestTaskLogsOutliveAKilledExecutor kills an executor process mid-run:
// every line builtin.sleep logged before the kill (the start line and one
// per second slept) is readable afterwards, with no executor alive, through
// the API and with ax logs, and a follower ends when the instance does.
func TestTaskLogsOutliveAKilledExecutor(t *testing.T) {
	t.Parallel()
	bin := systemtest.BuildAX(t)
	s := newSystem(t)
	s.apply(`
task_name: sleeper
execution:
  handler: builtin.sleep
`)
	// Its own log at warn: the task log ships at every level all the same.
	victim := exec.Command(bin, "executor", "--require-nats-auth=false", "--nats-url", s.srv.URL, "--worker-id", "victim", "--log-level", "warn")
	victim.Stdout, victim.Stderr = os.Stderr, os.Stderr
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		_ = victim.Wait()
	})

	id := s.fire("sleeper", map[string]float64{"seconds": 60})
	s.waitState(id, schemas.StateRunning, 30*time.Second)
	var seen []schemas.LogLine
	waitFor(t, `"slept 2s" in the logs`, 60*time.Second, func() (bool, error) {
		seen = s.logsOf(id)
		return slices.ContainsFunc(seen, func(l schemas.LogLine) bool { return l.Message == "slept 2s of 1m0s" }), nil
	})
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()

	after := s.logsOf(id)
	if len(after) < len(seen) || len(after) < 3 {
		t.Fatalf("after the kill %d lines, before it %d: %+v", len(after), len(seen), after)
	}
	for i, l := range after {
		msg, fields := "sleeping 1m0s", `{"seconds":60}`
		if i > 0 {
			msg, fields = fmt.Sprintf("slept %ds of 1m0s", i), fmt.Sprintf(`{"slept_seconds":%d,"seconds":60}`, i)
		}
		if l.Message != msg || string(l.Fields) != fields || l.Level != "info" || l.WorkerID != "victim" || l.Attempt != 1 || l.Task != "sleeper" {
			t.Errorf("line %d = %+v, want %q %s", i, l, msg, fields)
		}
	}
	for i, l := range seen {
		if a := after[i]; a.Message != l.Message || !a.Time.Equal(l.Time) {
			t.Errorf("line %d read before the kill was %+v, after it %+v", i, l, a)
		}
	}

	// The lease expires: the worker's death spends no attempt, so the
	// instance waits for a worker at attempt 2, and the operator cancels
	// it. ax logs reads the same lines, and a follower ends with the
	// instance.
	waitFor(t, "attempt 2 dispatched after the lease expired", 60*time.Second, func() (bool, error) {
		inst, err := s.store.GetInstance(context.Background(), id)
		return err == nil && inst.Attempt == 2 && inst.State == schemas.StateDispatched, err
	})
	if _, err := s.client.Cancel(context.Background(), id, "no executor left"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	s.waitState(id, schemas.StateCancelled, 30*time.Second)
	out, err := exec.Command(bin, "logs", fmt.Sprint(id), "--api", s.apiURL, "--token", s.admin).Output()
	if err != nil {
		t.Fatalf("ax logs: %v", err)
	}
	printed := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(printed) != len(after)+1 || printed[0] != "--- attempt 1 on worker victim" ||
		!strings.HasSuffix(printed[1], " INFO  sleeping 1m0s seconds=60") || !strings.HasSuffix(printed[2], " INFO  slept 1s of 1m0s slept_seconds=1 seconds=60") {
		t.Errorf("ax logs printed\n%s", out)
	}
	follow := exec.Command(bin, "logs", fmt.Sprint(id), "-f", "-o", "json", "--api", s.apiURL, "--token", s.admin)
	var stderr strings.Builder
	follow.Stderr = &stderr
	out, err = follow.Output()
	if err != nil {
		t.Fatalf("ax logs -f: %v\n%s", err, stderr.String())
	}
	jsonLines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	var last schemas.LogLine
	if err := json.Unmarshal([]byte(jsonLines[len(jsonLines)-1]), &last); err != nil || len(jsonLines) != len(after) ||
		last.Message != after[len(after)-1].Message {
		t.Errorf("ax logs -f -o json printed\n%s(%v)", out, err)
	}
}
