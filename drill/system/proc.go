package system

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process the drill started and may kill: a service of the
// sandbox (ax dispatcher, ax executor, the nats-server …). Its methods are
// safe for concurrent use. A Proc only ever signals the process it started,
// by its pid, and only while that process has not been reaped.
type Proc struct {
	// Name names the process in the drill's log and errors ("executor e2").
	Name string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once the process has been reaped
	exited error
}

// StartProc starts bin with args and env added to the drill's own
// environment; the process's output goes to out (nil: discarded).
func StartProc(name string, out io.Writer, env []string, bin string, args ...string) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exited = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not ended.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig unless the process has ended already.
func (p *Proc) signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d) with %v: %w", p.Name, p.Pid(), sig, err)
	}
	return nil
}

// Kill sends SIGKILL (kill -9: no goodbye, no drain) and waits until the
// process has ended.
func (p *Proc) Kill() error {
	if err := p.signal(syscall.SIGCONT); err != nil { // a stopped process ends too
		return err
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// Pause stops the process with SIGSTOP: it keeps its connections and its
// state, and does nothing until Resume.
func (p *Proc) Pause() error { return p.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.signal(syscall.SIGCONT) }

// Stop asks the process to drain and end with SIGTERM, and kills it when
// it has not ended after grace.
func (p *Proc) Stop(grace time.Duration) error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		return p.Kill()
	}
}

// PostgresProcesses returns the processes of the PostgreSQL server whose
// data folder is dataDir: the postmaster first, then its children (every
// backend; each is a process group of its own, so a signal to a group
// would miss them).
func PostgresProcesses(dataDir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("find the postmaster: %w", err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return nil, fmt.Errorf("find the postmaster: %s: %w", filepath.Join(dataDir, "postmaster.pid"), err)
	}
	procs := []int{postmaster}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("find the postmaster's children: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // it ended
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(postmaster) {
			procs = append(procs, pid)
		}
	}
	return procs, nil
}

// SignalAll sends sig to every process of procs; one that has ended
// already is no error.
func SignalAll(procs []int, sig syscall.Signal) error {
	for _, pid := range procs {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %d with %v: %w", pid, sig, err)
		}
	}
	return nil
}
