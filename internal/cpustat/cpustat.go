// Package cpustat reads CPU time from Linux's /proc, for the benchmarks: the
// whole machine's busy time (from /proc/stat) and that of a process tree
// such as a PostgreSQL server (from /proc/<pid>/stat). CPU time per unit of
// work is the figure that holds from one machine to another, where a rate
// does not. Beside the CPU it reads the page faults the CPU went to, and
// what a fault costs on this machine: memory a process touches for the
// first time costs a fault a page, and a virtual machine whose host backs
// its memory lazily makes that cost large.
package cpustat

import (
	"errors"
	"fmt"
	"math"
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

// Usage is what a process (or a tree of them) spent so far.
type Usage struct {
	// CPU is user and system time.
	CPU time.Duration
	// Faults are minor page faults: pages the kernel mapped in without
	// I/O, most of them memory touched for the first time.
	Faults int64
}

// Sub returns the usage from an earlier reading to u.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, Faults: u.Faults - earlier.Faults}
}

// Self returns what this process spent so far.
func Self() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("read this process's CPU time: %w", err)
	}
	return Usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Faults: ru.Minflt}, nil
}

// proc is what readProc takes from /proc/<pid>/stat.
type proc struct {
	ppid int
	// own is the process's own usage; children is that of its children
	// that have exited and been waited for.
	own, children Usage
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
	// f[0] is field 3 (state): ppid is field 4, minflt and cminflt 10
	// and 11, utime..cstime 14..17.
	if len(f) < 15 {
		return proc{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return proc{
		ppid:     int(num(4)),
		own:      Usage{CPU: ticks(num(14) + num(15)), Faults: num(10)},
		children: Usage{CPU: ticks(num(16) + num(17)), Faults: num(11)},
		comm:     string(data[open+1 : end]),
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

// Tree returns what process root and its children spent: its own, its
// exited children's (which the kernel adds to it when it waits for them),
// and its live children's. For a PostgreSQL postmaster that is the whole
// server: every backend and background process is its child.
func Tree(root int) (Usage, error) {
	r, err := readProc(root)
	if err != nil {
		return Usage{}, fmt.Errorf("read the CPU time of process %d: %w", root, err)
	}
	sum := Usage{CPU: r.own.CPU + r.children.CPU, Faults: r.own.Faults + r.children.Faults}
	entries, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return Usage{}, err
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
			sum.CPU += p.own.CPU
			sum.Faults += p.own.Faults
		}
	}
	return sum, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

// FaultCost measures what a page fault costs this machine: the time to
// touch each page of fresh anonymous memory once (the kernel maps a zeroed
// page in for each touch), per page, the least of three tries of pages
// pages each so that a busy moment does not count.
func FaultCost(pages int) (time.Duration, error) {
	size := pages * os.Getpagesize()
	best := time.Duration(math.MaxInt64)
	for range 3 {
		mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return 0, fmt.Errorf("measure a page fault: %w", err)
		}
		// A small page each fault, whatever the kernel's transparent
		// huge pages setting: the figure is a 4 KiB page's.
		_ = syscall.Madvise(mem, syscall.MADV_NOHUGEPAGE)
		start := time.Now()
		for i := 0; i < size; i += os.Getpagesize() {
			mem[i] = 1
		}
		best = min(best, time.Since(start))
		if err := syscall.Munmap(mem); err != nil {
			return 0, fmt.Errorf("measure a page fault: %w", err)
		}
	}
	return best / time.Duration(pages), nil
}

// SyscallCost measures what the least system call costs this machine
// (getppid), the least of three tries of n calls each: a cost every
// message a process sends or receives pays a few times, which a virtual
// machine's mitigations (page-table isolation) can make ten times larger.
func SyscallCost(n int) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		start := time.Now()
		for range n {
			syscall.Getppid()
		}
		best = min(best, time.Since(start))
	}
	return best / time.Duration(n)
}
