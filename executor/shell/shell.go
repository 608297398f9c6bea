// Package shell is AX's shell handler, builtin.shell: it runs a task's
// command line ([schemas.ShellPayload]) with /bin/sh -c, as cron runs a
// crontab line, on the executors whose operator enabled it (ax executor
// --enable-shell). It is off by default because it runs whatever command
// a task definition holds: enable it only on executors of a pool that
// only trusted operators' tasks reach (ax import crontab --tags).
//
// The command runs in its own process group with the payload's
// environment on top of cron's base (PATH=/usr/bin:/bin, HOME, LOGNAME,
// USER and SHELL of its user), in its directory (default the user's
// home), its standard input the payload's stdin. Each line it writes to
// standard output is an info line of the task log, each line to standard
// error a warn line. Exit code 0 succeeds with {"exit_code": 0}; another
// code fails the attempt with the code (retried by the task's policy). At
// the attempt's timeout or cancel, the whole process group gets SIGTERM,
// then SIGKILL after [KillGrace].
//
// It runs cron firings only (their event ids are AX's own, cron:…),
// whose payload the dispatcher takes from the task's definition: a firing
// by hand, by an event or from the bus names a payload of its own, which
// could be any command, and is refused.
//
// A payload that names a user runs the command as that user, which needs
// an executor running as root; otherwise the attempt fails permanently
// with the reason, rather than run as someone else.
package shell

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// KillGrace is how long a command's process group has between SIGTERM
// and SIGKILL once its attempt ended.
const KillGrace = 2 * time.Second

// maxLine is the longest output line shipped whole; longer ones are cut.
const maxLine = 16 << 10

// Register registers the shell handler on m under [schemas.HandlerShell].
// It panics if that name is taken.
func Register(m *executor.Mux) { m.HandleFunc(schemas.HandlerShell, run) }

// Output is what a successful command reports.
type Output struct {
	ExitCode int `json:"exit_code"`
}

func run(ctx context.Context, job *executor.Job) (any, error) {
	if !strings.HasPrefix(job.EventID, schemas.CronEventIDPrefix) {
		return nil, executor.Permanent(errors.New("builtin.shell runs a task's cron firings only, whose command the task's definition holds (the dispatcher takes it from there); " +
			"a firing by hand or by an event could name any command: let the cron trigger fire it, or give the command to a handler of your own"))
	}
	var p schemas.ShellPayload
	if err := json.Unmarshal(job.Payload, &p); err != nil || strings.TrimSpace(p.Command) == "" {
		return nil, executor.Permanent(errors.New(`builtin.shell: the payload needs "command", a shell command line, e.g. {"command": "echo hello"}`))
	}
	cmd, err := command(p)
	if err != nil {
		return nil, executor.Permanent(fmt.Errorf("builtin.shell: %w", err))
	}
	log := executor.Logger(ctx)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("builtin.shell: %w", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("builtin.shell: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("builtin.shell: start %s: %w", cmd.Path, err)
	}
	var lines sync.WaitGroup
	lines.Add(2)
	go ship(&lines, stdout, func(l string) { log.Info(l, "stream", "stdout") })
	go ship(&lines, stderr, func(l string) { log.Warn(l, "stream", "stderr") })

	stopped := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The group: the shell and whatever it started.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-stopped:
			case <-time.After(KillGrace):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			close(killed)
		case <-stopped:
		}
	}()
	// Reading the pipes to their end before Wait: a process of the group
	// that outlives the shell holds them open until the group is killed.
	lines.Wait()
	err = cmd.Wait()
	close(stopped)
	if ctx.Err() != nil {
		<-killed
		return nil, fmt.Errorf("builtin.shell: command stopped (process group killed): %w", context.Cause(ctx))
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return Output{ExitCode: 0}, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return nil, fmt.Errorf("builtin.shell: command killed by signal %s", ws.Signal())
		}
		return nil, fmt.Errorf("builtin.shell: command exited with code %d", exit.ExitCode())
	default:
		return nil, fmt.Errorf("builtin.shell: %w", err)
	}
}

// command prepares p's command: its shell, user, environment, directory
// and input, in a process group of its own.
func command(p schemas.ShellPayload) (*exec.Cmd, error) {
	sh := p.Shell
	if sh == "" {
		sh = "/bin/sh"
	}
	cmd := exec.Command(sh, "-c", p.Command)
	attr := &syscall.SysProcAttr{Setpgid: true}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("look up the executor's user: %w", err)
	}
	if p.User != "" && p.User != u.Username {
		want, err := user.Lookup(p.User)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", p.User, err)
		}
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("the command is to run as %s, and this executor runs as %s: only an executor running as root may switch users; run it as root or drop \"user\" from the payload", p.User, u.Username)
		}
		uid, _ := strconv.ParseUint(want.Uid, 10, 32)
		gid, _ := strconv.ParseUint(want.Gid, 10, 32)
		cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if ids, err := want.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := strconv.ParseUint(id, 10, 32); err == nil {
					cred.Groups = append(cred.Groups, uint32(g))
				}
			}
		}
		attr.Credential = cred
		u = want
	}
	cmd.SysProcAttr = attr
	env := map[string]string{"PATH": "/usr/bin:/bin", "HOME": u.HomeDir, "LOGNAME": u.Username, "USER": u.Username, "SHELL": sh}
	for k, v := range p.Env {
		env[k] = v
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = p.Dir
	if cmd.Dir == "" {
		cmd.Dir = env["HOME"]
	}
	if st, err := os.Stat(cmd.Dir); err != nil || !st.IsDir() {
		if p.Dir != "" {
			return nil, fmt.Errorf("working directory %q: not a directory on this executor", p.Dir)
		}
		cmd.Dir = "/"
	}
	cmd.Stdin = strings.NewReader(p.Stdin)
	return cmd, nil
}

// ship sends each line read from r to emit, cut at maxLine.
func ship(wg *sync.WaitGroup, r io.Reader, emit func(string)) {
	defer wg.Done()
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			emit(strings.TrimRight(string(line), "\r\n"))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// The rest of the long line comes as the next piece.
			continue
		}
		if err != nil {
			return
		}
	}
}
