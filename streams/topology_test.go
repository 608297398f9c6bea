package streams

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/ax-scheduler/ax/schemas"
)

func TestSchedFiring(t *testing.T) {
	t.Parallel()
	top := Default()
	for _, tt := range []struct {
		task, eventID, want string
	}{
		{"ship", "order-42", "ax.sched.ship.order-42"},
		{"ship", "idem-order.42", "ax.sched.ship.idem-order.42"},
		{"ship", "cron:ship@2024-05-01T00:00:00Z", "ax.sched.ship.cron:ship@2024-05-01T00:00:00Z"},
		{"ship", "a*b>c", "ax.sched.ship.a*b>c"},
		// Not a run of valid tokens: the digest stands in.
		{"ship", "a..b", "ax.sched.ship.h"},
		{"ship", "order.*", "ax.sched.ship.h"},
		{"ship", ">", "ax.sched.ship.h"},
		{"ship", ".x", "ax.sched.ship.h"},
	} {
		got := top.SchedFiring(tt.task, tt.eventID)
		if strings.HasSuffix(tt.want, ".h") {
			if !strings.HasPrefix(got, "ax.sched.ship.") || len(got) != len("ax.sched.ship.")+64 {
				t.Errorf("SchedFiring(%q, %q) = %q, want the hex digest of the event id", tt.task, tt.eventID, got)
			}
		} else if got != tt.want {
			t.Errorf("SchedFiring(%q, %q) = %q, want %q", tt.task, tt.eventID, got, tt.want)
		}
		if !server.IsValidPublishSubject(got) {
			t.Errorf("SchedFiring(%q, %q) = %q is not a valid subject to publish to", tt.task, tt.eventID, got)
		}
	}
	// Two tasks never share a schedule, nor two event ids.
	if top.SchedFiring("a", "x") == top.SchedFiring("b", "x") || top.SchedFiring("a", "a..b") == top.SchedFiring("a", "a..c") {
		t.Error("SchedFiring collides")
	}
}

func TestFenceFrom(t *testing.T) {
	t.Parallel()
	top := Default()
	if pool, worker, id, ok := top.FenceFrom(top.Fence("gpu", "w1", 42)); !ok || pool != "gpu" || worker != "w1" || id != 42 {
		t.Errorf("FenceFrom(Fence(gpu, w1, 42)) = %q, %q, %d, %v", pool, worker, id, ok)
	}
	for _, subject := range []string{
		"ax.fence.gpu.w1", "ax.fence.gpu.w1.x", "ax.fence.gpu.w1.0", "ax.fence.gpu.w1.-3",
		"ax.fence..w1.4", "ax.fence.gpu.w1.4.5", "ax.report.gpu.w1.4", "bx.fence.gpu.w1.4",
	} {
		if _, _, _, ok := top.FenceFrom(subject); ok {
			t.Errorf("FenceFrom(%q) is ok, want not a fence subject", subject)
		}
	}
}

func TestReportBatchFrom(t *testing.T) {
	t.Parallel()
	top := Default()
	if pool, worker, ok := top.ReportBatchFrom(top.ReportBatch("gpu", "w1")); !ok || pool != "gpu" || worker != "w1" {
		t.Errorf("ReportBatchFrom(ReportBatch(gpu, w1)) = %q, %q, %v", pool, worker, ok)
	}
	if _, _, ok := top.ReportFrom(top.ReportBatch("gpu", "w1")); ok {
		t.Error("ReportFrom takes a batch subject for a single report's")
	}
	for _, subject := range []string{
		"ax.report.gpu.w1", "ax.report.gpu.w1.4", "ax.report..w1.batch", "ax.report.gpu..batch",
		"ax.report.gpu.w1.batch.x", "bx.report.gpu.w1.batch", "ax.fence.gpu.w1.batch",
	} {
		if _, _, ok := top.ReportBatchFrom(subject); ok {
			t.Errorf("ReportBatchFrom(%q) is ok, want not a batch subject", subject)
		}
	}
}

// TestSubjectsAllocateOnce pins the cost of the subjects every message of
// the hot path names: one allocation, the string itself.
func TestSubjectsAllocateOnce(t *testing.T) {
	top := Default()
	for name, f := range map[string]func() string{
		"Trigger":  func() string { return top.Trigger("nightly-report") },
		"Dispatch": func() string { return top.Dispatch("default", schemas.PriorityNormal, "noop") },
		"Ready":    func() string { return top.Ready("default", schemas.PriorityNormal, "noop") },
	} {
		if got := testing.AllocsPerRun(100, func() { _ = f() }); got != 1 {
			t.Errorf("%s: %v allocations, want 1", name, got)
		}
	}
	if got, want := top.Dispatch("default", schemas.PriorityNormal, "a.b"), "ax.dispatch.default.normal.a.b"; got != want {
		t.Errorf("Dispatch = %q, want %q", got, want)
	}
}

// TestGrantKeys checks that a grant key parses back into its worker, pool
// and handler (a handler with dots included), and that a heartbeat's key
// is no grant key.
func TestGrantKeys(t *testing.T) {
	for _, c := range []struct{ worker, pool, handler string }{
		{"w1", "default", "builtin.echo"},
		{"w-2", "gpu+eu", "img.resize.big"},
		{"w_3", "p", "h"},
	} {
		key := GrantKey(c.worker, c.pool, c.handler)
		w, p, h, ok := ParseGrantKey(key)
		if !ok || w != c.worker || p != c.pool || h != c.handler {
			t.Errorf("ParseGrantKey(%q) = %q %q %q %t, want %q %q %q", key, w, p, h, ok, c.worker, c.pool, c.handler)
		}
	}
	for _, key := range []string{"w1", "w1.default", ".default.h", "w1..h", "w1.default."} {
		if _, _, _, ok := ParseGrantKey(key); ok {
			t.Errorf("ParseGrantKey(%q) is a grant key", key)
		}
	}
	top := Default()
	if got := top.GrantSubject("w1", "default", "a.b"); got != "$KV.ax-workers.w1.default.a.b" {
		t.Errorf("GrantSubject = %q", got)
	}
}

// TestLogFrom checks that a log subject gives the worker that shipped the
// line, none for the subject of executors before the worker token.
func TestLogFrom(t *testing.T) {
	top := Default()
	for _, c := range []struct {
		subject, worker string
		ok              bool
	}{
		{top.Log(7, "w1"), "w1", true},
		{"ax.log.7", "", true},
		{"ax.log.7.w1.x", "", false},
		{"ax.log.x.w1", "", false},
		{"ax.report.default.w1.7", "", false},
	} {
		if w, ok := top.LogFrom(c.subject); w != c.worker || ok != c.ok {
			t.Errorf("LogFrom(%q) = %q %t, want %q %t", c.subject, w, ok, c.worker, c.ok)
		}
	}
}

// TestTopologyIsZero: only the zero Topology is zero, the one an Options
// field left unset holds; every topology NewTopology makes names subjects.
func TestTopologyIsZero(t *testing.T) {
	custom, err := NewTopology("acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		top  Topology
		zero bool
	}{{Topology{}, true}, {Default(), false}, {custom, false}} {
		if got := tc.top.IsZero(); got != tc.zero {
			t.Errorf("Topology{prefix: %q}.IsZero() = %t, want %t", tc.top.prefix, got, tc.zero)
		}
	}
}
