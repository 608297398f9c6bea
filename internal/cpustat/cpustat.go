// Package cpustat reads CPU time from Linux's /proc, for the benchmarks: the
// whole machine's busy time (from /proc/stat) and that of a process tree
// such as a PostgreSQL server (from /proc/<pid>/stat). CPU time per unit of
// work is the figure that holds from one machine to another, where a rate
// does not.
package cpustat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times: 100 on
// every architecture Go supports.
const clockTicks = 100

// Tick is the resolution of /proc's CPU times: a reading moves in steps of
// one Tick a core.
const Tick = time.Second / clockTicks

// Machine is a reading of the machine's CPU time since boot, summed over
// its cores.
type Machine struct {
	// Busy is every state but idle and iowait; Total includes them.
	Busy, Total time.Duration
}

// ReadMachine reads the first line of /proc/stat.
func ReadMachine() (Machine, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, fmt.Errorf("read the machine's CPU time: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return Machine{}, fmt.Errorf("read the machine's CPU time: /proc/stat starts with %q, want the cpu line", line)
	}
	// user nice system idle iowait irq softirq steal; guest time is
	// already inside user.
	var busy, total int64
	for i, f := range fields[1:9] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("read the machine's CPU time: /proc/stat: %q: %w", line, err)
		}
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return Machine{Busy: ticks(busy), Total: ticks(total)}, nil
}

// Sub returns the CPU time from an earlier reading to m.
func (m Machine) Sub(earlier Machine) Machine {
	return Machine{Busy: m.Busy - earlier.Busy, Total: m.Total - earlier.Total}
}

// Cores returns the number of CPUs /proc/stat lists.
func Cores() int {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	return n
}

// LoadAverage returns the 1, 5 and 15 minute load averages as /proc/loadavg
// prints them, or "unknown".
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if err != nil || len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Self returns the user and system CPU time of this process so far.
func Self() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("read this process's CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// proc is what readProc takes from /proc/<pid>/stat.
type proc struct {
	ppid int
	// cpu is the process's own user and system time; children is that of
	// its children that have exited and been waited for.
	cpu, children time.Duration
	comm          string
}

func readProc(pid int) (proc, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, err
	}
	// The command name, in parentheses, may hold spaces.
	open, end := strings.IndexByte(string(data), '('), strings.LastIndexByte(string(data), ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[end+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return proc{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return proc{
		ppid: int(num(4)), cpu: ticks(num(14) + num(15)), children: ticks(num(16) + num(17)),
		comm: string(data[open+1 : end]),
	}, nil
}

// Parent returns the parent of process pid, and the parent's command name.
func Parent(pid int) (ppid int, comm string, err error) {
	p, err := readProc(pid)
	if err != nil {
		return 0, "", err
	}
	pp, err := readProc(p.ppid)
	if err != nil {
		return 0, "", err
	}
	return p.ppid, pp.comm, nil
}

// Tree returns the CPU time of process root and its children: its own, its
// exited children's (which the kernel adds to it when it waits for them),
// and its live children's. For a PostgreSQL postmaster that is the whole
// server: every backend and background process is its child.
func Tree(root int) (time.Duration, error) {
	r, err := readProc(root)
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of process %d: %w", root, err)
	}
	sum := r.cpu + r.children
	entries, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(filepath.Base(e))
		if err != nil || pid == root {
			continue
		}
		p, err := readProc(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // exited meanwhile
		}
		if err == nil && p.ppid == root {
			sum += p.cpu
		}
	}
	return sum, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
