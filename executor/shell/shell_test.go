package shell_test

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/executor/executortest"
	"github.com/ax-scheduler/ax/executor/shell"
	"github.com/ax-scheduler/ax/internal/wait"
	"github.com/ax-scheduler/ax/schemas"
)

// cron makes the attempt a cron firing's, the only kind the shell runs.
var cron = executortest.WithTask(func(j *executor.Job) { j.EventID = "cron:t:0:2026-03-02T10:00:00Z" })

func mux() *executor.Mux {
	m := executor.NewMux()
	shell.Register(m)
	return m
}

// TestShellRunsCommand runs a real /bin/sh: the payload's environment on
// cron's base, its directory and standard input; each output line is a
// task log line (stderr at warn); exit 0 succeeds.
func TestShellRunsCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{
		Command: `echo "greeting=$GREETING path=$PATH"; pwd; cat; echo oops >&2`,
		Stdin:   "line one\nline two\n",
		Env:     map[string]string{"GREETING": "hello world"},
		Dir:     dir,
	}, cron)
	if !res.Succeeded() || string(res.Output) != `{"exit_code":0}` {
		t.Fatalf("report %+v", res.Report)
	}
	want := []string{"greeting=hello world path=/usr/bin:/bin", dir, "line one", "line two"}
	var out []string
	for _, l := range res.Logs {
		if l.Level == "warn" {
			if l.Message != "oops" {
				t.Errorf("stderr line %q", l.Message)
			}
			continue
		}
		out = append(out, l.Message)
	}
	if !slices.Equal(out, want) {
		t.Errorf("stdout lines %q, want %q", out, want)
	}
}

// TestShellExitCode fails the attempt with the command's exit code, not
// permanently: the task's retry policy decides.
func TestShellExitCode(t *testing.T) {
	t.Parallel()
	res := executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{Command: "echo before; exit 3"}, cron)
	if res.Succeeded() || !strings.Contains(res.Report.Error, "exited with code 3") || res.Report.Permanent {
		t.Fatalf("report %+v", res.Report)
	}
	res = executortest.Call(t, mux(), schemas.HandlerShell, map[string]string{"cmd": "typo"}, cron)
	if res.Succeeded() || !res.Report.Permanent || !strings.Contains(res.Report.Error, `needs "command"`) {
		t.Fatalf("payload without command: %+v", res.Report)
	}
}

// TestShellRunsCronFiringsOnly refuses a firing that is not a cron
// tick's: its payload is the firer's, not the definition's, and could
// name any command. The command must not run.
func TestShellRunsCronFiringsOnly(t *testing.T) {
	t.Parallel()
	mark := filepath.Join(t.TempDir(), "ran")
	res := executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{Command: "touch " + mark})
	if res.Succeeded() || !res.Report.Permanent || !strings.Contains(res.Report.Error, "cron firings only") {
		t.Fatalf("manual firing: %+v", res.Report)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the command of a manual firing ran (%v)", err)
	}
}

// TestShellTimeoutKillsGroup ends the attempt at its timeout and kills
// the whole process group: a child the shell left in the background is
// gone too.
func TestShellTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res := executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{
		Command: `sleep 300 & echo $! > ` + pidFile + `; wait`,
	}, cron, executortest.WithTimeout(time.Second))
	if res.Succeeded() || !strings.Contains(res.Report.Error, "timeout") || res.Err == nil || !strings.Contains(res.Err.Error(), "process group killed") {
		t.Fatalf("report %+v", res.Report)
	}
	if d := time.Since(start); d > time.Second+shell.KillGrace+5*time.Second {
		t.Errorf("the attempt took %s", d)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := wait.Until(ctx, func() (bool, error) {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil
	}); err != nil {
		t.Fatalf("the background sleep (pid %d) outlived its attempt: %v", pid, err)
	}
}

// TestShellUser runs the command as the payload's user when the executor
// is root, and refuses, permanently and saying why, when it is not.
func TestShellUser(t *testing.T) {
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the test needs the user nobody: %v", err)
	}
	res := executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{Command: "id -u", User: "nobody"}, cron)
	if os.Geteuid() != 0 {
		if res.Succeeded() || !res.Report.Permanent || !strings.Contains(res.Report.Error, "only an executor running as root may switch users") {
			t.Fatalf("as a non-root executor: %+v", res.Report)
		}
		return
	}
	if !res.Succeeded() || len(res.Logs) != 1 || res.Logs[0].Message != nobody.Uid {
		t.Fatalf("as root, run as nobody: %+v, logs %+v (want uid %s)", res.Report, res.Logs, nobody.Uid)
	}
	res = executortest.Call(t, mux(), schemas.HandlerShell, schemas.ShellPayload{Command: "true", User: "no-such-user-ax"}, cron)
	if res.Succeeded() || !res.Report.Permanent || !strings.Contains(res.Report.Error, "no-such-user-ax") {
		t.Fatalf("unknown user: %+v", res.Report)
	}
}

// TestShellOffByDefault: the built-in handlers do not include the shell.
func TestShellOffByDefault(t *testing.T) {
	t.Parallel()
	m := executor.NewMux()
	executor.RegisterBuiltins(m)
	if _, ok := m.Handler(schemas.HandlerShell); ok {
		t.Fatal("RegisterBuiltins registers builtin.shell; it must be enabled per executor")
	}
}
