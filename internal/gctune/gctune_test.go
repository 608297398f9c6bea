package gctune

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// The tests change the process's collector settings, so none runs in
// parallel, and each puts them back.
func restoreRuntime(t *testing.T) {
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func TestApply(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	v2 := file("memory.max", "536870912\n")
	v2Max := file("memory.max-unlimited", "max\n")
	v1Unlimited := file("memory.limit_in_bytes", "9223372036854771712\n")
	missing := filepath.Join(dir, "absent")
	for _, tc := range []struct {
		name string
		env  map[string]string
		// runtime is what the runtime read from env at start-up.
		runtimePercent int
		runtimeLimit   int64
		files          []string
		want           Setting
	}{
		{
			name: "nothing set, no cgroup limit", runtimePercent: 100, runtimeLimit: math.MaxInt64,
			files: []string{missing, v2Max, v1Unlimited},
			want:  Setting{Percent: DefaultPercent, PercentFrom: "default", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"},
		},
		{
			name: "a cgroup limit", runtimePercent: 100, runtimeLimit: math.MaxInt64,
			files: []string{missing, v2},
			want:  Setting{Percent: DefaultPercent, PercentFrom: "default", MemoryLimit: 483183820, MemoryLimitFrom: v2},
		},
		{
			name: "GOGC set", env: map[string]string{"GOGC": "150"}, runtimePercent: 150, runtimeLimit: math.MaxInt64,
			files: []string{missing},
			want:  Setting{Percent: 150, PercentFrom: "GOGC", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"},
		},
		{
			name: "GOGC off", env: map[string]string{"GOGC": "off"}, runtimePercent: -1, runtimeLimit: math.MaxInt64,
			files: []string{missing},
			want:  Setting{Percent: -1, PercentFrom: "GOGC", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"},
		},
		{
			name: "GOMEMLIMIT set wins over the cgroup's", env: map[string]string{"GOMEMLIMIT": "100MiB"}, runtimePercent: 100, runtimeLimit: 100 << 20,
			files: []string{v2},
			want:  Setting{Percent: DefaultPercent, PercentFrom: "default", MemoryLimit: 100 << 20, MemoryLimitFrom: "GOMEMLIMIT"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restoreRuntime(t)
			debug.SetGCPercent(tc.runtimePercent)
			debug.SetMemoryLimit(tc.runtimeLimit)
			got := apply(func(name string) string { return tc.env[name] }, tc.files)
			if got != tc.want {
				t.Fatalf("apply = %+v, want %+v", got, tc.want)
			}
			if p := debug.SetGCPercent(-1); p != tc.want.Percent {
				t.Errorf("the runtime's GOGC is %d after apply, want %d", p, tc.want.Percent)
			}
			if l := debug.SetMemoryLimit(-1); l != tc.want.MemoryLimit {
				t.Errorf("the runtime's memory limit is %d after apply, want %d", l, tc.want.MemoryLimit)
			}
		})
	}
}

func TestSettingString(t *testing.T) {
	for _, tc := range []struct {
		s    Setting
		want string
	}{
		{Setting{400, "default", math.MaxInt64, "none"}, "GOGC=400 (default, lowered to keep the growth within 64 MiB, not below 100), memory limit none (none)"},
		{Setting{-1, "GOGC", 512 << 20, "GOMEMLIMIT"}, "GOGC=off (GOGC), memory limit 512 MiB (GOMEMLIMIT)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, Headroom, DefaultPercent},
		{4 << 20, Headroom, DefaultPercent},
		{16 << 20, Headroom, DefaultPercent},
		{32 << 20, Headroom, 200},
		{64 << 20, Headroom, MinPercent},
		{1 << 30, Headroom, MinPercent},
	} {
		if got := PercentFor(tc.live, tc.headroom); got != tc.want {
			t.Errorf("PercentFor(%d MiB, %d MiB) = %d, want %d", tc.live>>20, tc.headroom>>20, got, tc.want)
		}
	}
}

// TestTunerFollowsTheLiveHeap holds a live heap past the tuner's headroom,
// and lets it go: GOGC follows, collection by collection.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	restoreRuntime(t)
	debug.SetGCPercent(DefaultPercent)
	stop := tune(4 << 20)
	defer stop()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	await := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			runtime.GC()
			metrics.Read(gogc)
			if got := gogc[0].Value.Uint64(); got == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("GOGC is %d a minute of collections later, want %d", got, want)
			}
			time.Sleep(time.Millisecond) // the tuner runs after the cycle, on the cleanup goroutine
		}
	}
	live := make([]byte, 16<<20)
	live[0] = 1
	await(MinPercent)
	runtime.KeepAlive(live)
	live = nil
	await(DefaultPercent)
}
