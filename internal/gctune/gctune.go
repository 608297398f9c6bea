// Package gctune sets the Go garbage collector for AX's services at start-up.
//
// Go's default (GOGC=100) collects each time the heap doubles its live
// size. AX's services keep a small live heap (a few megabytes: connections,
// caches, the batches in flight) and allocate fast and briefly under load
// (messages decoded, encoded and dropped), so at GOGC=100 they collect
// hundreds of times a second and the collector takes a large share of the
// CPU of a burst. At [DefaultPercent] the heap grows to five times its live
// size between collections: a few tens of megabytes more, a fraction of
// the collections.
//
// Five times a large live heap is not a few tens of megabytes: a process
// that embeds the NATS server (ax dev) holds its streams' block caches,
// and a dispatcher may hold a large backlog. Memory a process grows into
// costs a page fault a page the first time it is touched (and again after
// the runtime returns it to the system), which on a virtual machine whose
// host backs its memory lazily is ~10 µs a page. So the default is kept
// only while the heap's growth between collections stays within
// [Headroom]: after each collection GOGC is set from the live heap, down
// to Go's 100 (see [PercentFor]).
//
// What the operator sets wins: a GOGC in the environment is kept as the
// runtime read it, and GOMEMLIMIT (read by the runtime too) makes the
// collector run harder as the heap nears the limit, whatever GOGC says.
// Without GOMEMLIMIT, a memory limit of the process's cgroup (a container's
// memory limit) gives the soft limit [LimitShare] of it, so that the larger
// heap never grows the process into the container's out-of-memory kill.
package gctune

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultPercent is the GOGC AX's services run with when the environment
// sets none.
const DefaultPercent = 400

// Headroom is how far past the live heap the default lets the heap grow
// between collections before lowering GOGC: DefaultPercent holds while
// the live heap is at most a quarter of it (16 MiB).
const Headroom = 64 << 20

// MinPercent is the lowest GOGC the default lowers to: Go's own default.
const MinPercent = 100

// LimitShare is the share of a cgroup's memory limit that becomes the
// soft memory limit when GOMEMLIMIT is unset: the rest is left to what
// the Go runtime does not count (thread stacks, cgo, the binary) and to
// the page cache of the container.
const LimitShare = 0.9

// cgroupLimitFiles are where Linux states the memory limit of the
// process's cgroup: cgroup v2 (the limit, or "max"), then v1.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Setting is the collector's setting after [Apply].
type Setting struct {
	// Percent is GOGC in effect; -1 is off.
	Percent int
	// PercentFrom says where Percent comes from: "GOGC" (the environment)
	// or "default" (DefaultPercent, lowered as the live heap grows past a
	// quarter of Headroom).
	PercentFrom string
	// MemoryLimit is the soft memory limit in bytes; math.MaxInt64 is none.
	MemoryLimit int64
	// MemoryLimitFrom says where MemoryLimit comes from: "GOMEMLIMIT",
	// the cgroup file it was derived from, or "none".
	MemoryLimitFrom string
}

// String describes s for a log line or a benchmark's settings.
func (s Setting) String() string {
	gogc := strconv.Itoa(s.Percent)
	if s.Percent < 0 {
		gogc = "off"
	}
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		limit = fmt.Sprintf("%d MiB", s.MemoryLimit>>20)
	}
	from := s.PercentFrom
	if from == "default" {
		from = fmt.Sprintf("default, lowered to keep the growth within %d MiB, not below %d", Headroom>>20, MinPercent)
	}
	return fmt.Sprintf("GOGC=%s (%s), memory limit %s (%s)", gogc, from, limit, s.MemoryLimitFrom)
}

// Apply sets the collector for an AX service: GOGC=[DefaultPercent] unless
// the environment sets GOGC, and the soft memory limit from the cgroup
// unless the environment sets GOMEMLIMIT. It changes the whole process's
// runtime settings; call it once, at start-up, before the services run.
func Apply() Setting {
	s := apply(os.Getenv, cgroupLimitFiles)
	if s.PercentFrom == "default" {
		startTuner.Do(func() { tune(Headroom) })
	}
	return s
}

var startTuner sync.Once

// PercentFor returns the GOGC that lets a heap of live bytes grow by at
// most headroom between collections: DefaultPercent for a small live
// heap, never less than MinPercent.
func PercentFor(live, headroom uint64) int {
	if live == 0 {
		return DefaultPercent
	}
	return int(max(MinPercent, min(DefaultPercent, headroom*100/live)))
}

// tune sets GOGC by PercentFor after every collection until stop is
// called (Apply's tuner: for the life of the process). It runs on the
// runtime's cleanup goroutine, woken once a cycle by a sentinel the
// collection found unreachable.
func tune(headroom uint64) (stop func()) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	percent := -1
	var stopped atomic.Bool
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(tunerSentinel), func(struct{}) {
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := PercentFor(sample[0].Value.Uint64(), headroom); p != percent {
					percent = p
					debug.SetGCPercent(p)
				}
			}
			arm()
		}, struct{}{})
	}
	arm()
	return func() { stopped.Store(true) }
}

// tunerSentinel is allocated for each cycle of tune: big enough not to
// be a tiny allocation, which may share its block with live objects and
// stay reachable.
type tunerSentinel [16]byte

func apply(getenv func(string) string, limitFiles []string) Setting {
	s := Setting{PercentFrom: "GOGC", MemoryLimitFrom: "GOMEMLIMIT"}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultPercent)
		s.PercentFrom = "default"
	}
	s.Percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.Percent)
	if getenv("GOMEMLIMIT") == "" {
		s.MemoryLimitFrom = "none"
		for _, path := range limitFiles {
			if limit, ok := cgroupLimit(path); ok {
				debug.SetMemoryLimit(int64(float64(limit) * LimitShare))
				s.MemoryLimitFrom = path
				break
			}
		}
	}
	s.MemoryLimit = debug.SetMemoryLimit(-1)
	return s
}

// cgroupLimit reads a cgroup memory limit file: ok is false when there is
// none, it says "max", or it holds cgroup v1's "unlimited" (a number near
// math.MaxInt64, rounded down to a page).
func cgroupLimit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/2 {
		return 0, false
	}
	return n, true
}
