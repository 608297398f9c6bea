package streams

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
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
