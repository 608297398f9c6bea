package conformance

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ax-scheduler/ax/schemas"
)

// cancelVerdict judges the cancel check: final, the attempt's first final
// report, against order, the cancel order as the kit saw it on
// ax.control.<worker>, and sent, when the kit asked the API to cancel.
// The report must be failed and come within grace of the order.
//
// NATS keeps the order of one publisher's messages only. The server hands
// the dispatcher's order to each subscriber in turn, the worker's
// ax.control.<worker> before the kit's ax.control.* (a literal subject
// matches before a wildcard), and the worker's report comes from another
// connection: on a loaded host the kit may see a prompt worker's report
// before the order it answers. Such a report honours the order, at once,
// when it came after the kit asked for the cancel (no worker answers an
// order not yet given) and names the order's reason (the protocol's
// "cancelled: <reason>").
func cancelVerdict(sent time.Time, order seen, final wireReport, grace time.Duration) (observed string, pass bool) {
	took := final.at.Sub(order.at)
	if took >= 0 {
		return fmt.Sprintf("%s report %s after the cancel's delivery: %s", final.r.Kind, took.Round(time.Millisecond), final.r.Error),
			final.r.Kind == schemas.ReportFailed && took <= grace
	}
	var c schemas.Control
	_ = json.Unmarshal(order.data, &c)
	early := fmt.Sprintf("%s report %s before the kit saw the cancel's delivery", final.r.Kind, (-took).Round(time.Millisecond))
	switch {
	case final.at.Before(sent):
		return fmt.Sprintf("%s, and before the kit asked for the cancel: %s", early, final.r.Error), false
	case !strings.Contains(final.r.Error, c.Reason):
		return fmt.Sprintf("%s, not naming its reason %q: %s", early, c.Reason, final.r.Error), false
	}
	return fmt.Sprintf("%s (NATS orders one publisher's messages only: the worker had it first): %s", early, final.r.Error),
		final.r.Kind == schemas.ReportFailed
}
