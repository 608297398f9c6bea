package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// TestCancelVerdict checks the cancel check's judgement of the final
// report against the cancel order as the kit saw them: a report the kit
// saw a little before the order passes when it answers that order (NATS
// hands the order to the worker before the kit; the CI run of
// 2026-12-06 failed on one seen 0s before it), not when it came before
// the kit asked for the cancel or does not name the order's reason.
func TestCancelVerdict(t *testing.T) {
	sent := time.Now()
	order := seen{at: sent.Add(40 * time.Millisecond), subject: "ax.control.w1",
		data: []byte(`{"action":"cancel","instance_id":7,"attempt":1,"reason":"the instance was cancelled"}`)}
	final := func(after time.Duration, kind schemas.ReportKind, reason string) wireReport {
		return wireReport{seen: seen{at: order.at.Add(after)},
			r: schemas.Report{InstanceID: 7, Attempt: 1, WorkerID: "w1", Kind: kind, Error: reason}}
	}
	const cancelled = "cancelled: the instance was cancelled"
	for _, tc := range []struct {
		name   string
		final  wireReport
		pass   bool
		saying string
	}{
		{"after the order", final(3*time.Millisecond, schemas.ReportFailed, cancelled), true, "3ms after the cancel's delivery"},
		{"at the grace", final(5*time.Second, schemas.ReportFailed, cancelled), true, "5s after"},
		{"past the grace", final(5*time.Second+time.Millisecond, schemas.ReportFailed, cancelled), false, "after"},
		{"succeeded", final(time.Millisecond, schemas.ReportSucceeded, ""), false, "succeeded report"},
		{"seen just before the order", final(-300*time.Microsecond, schemas.ReportFailed, cancelled), true, "the worker had it first"},
		{"seen before, the handler's error too", final(-time.Millisecond, schemas.ReportFailed, cancelled+" (handler returned: context canceled)"), true, "the worker had it first"},
		{"seen before, succeeded", final(-time.Millisecond, schemas.ReportSucceeded, ""), false, "not naming its reason"},
		{"seen before, another failure", final(-time.Millisecond, schemas.ReportFailed, "boom"), false, "not naming its reason"},
		{"before the kit asked", final(-41*time.Millisecond, schemas.ReportFailed, cancelled), false, "before the kit asked for the cancel"},
	} {
		observed, pass := cancelVerdict(sent, order, tc.final, 5*time.Second)
		if pass != tc.pass || !strings.Contains(observed, tc.saying) {
			t.Errorf("%s: cancelVerdict = %q, %v; want %v, saying %q", tc.name, observed, pass, tc.pass, tc.saying)
		}
	}
}
