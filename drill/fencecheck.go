package drill

import (
	"errors"
	"fmt"

	"github.com/ax-scheduler/ax/executor/fencehttp"
	"github.com/ax-scheduler/ax/schemas"
)

// fenceCheckName is the check of the fencing token on the node crash.
const fenceCheckName = "fence: the crashed attempt's write is refused"

// noteFence keeps the attempt's fencing token on its call.
func (d *taskDrill) noteFence(c *call, token uint64) {
	d.mu.Lock()
	c.fence = token
	d.mu.Unlock()
}

// fenceCheck judges the fencing token on the crashed instance: attempt 1's
// handler outlives its worker's crash (a zombie), and attempt 2 runs
// elsewhere. Each writes through a fence helper (fencehttp's guard, in
// memory) in the order the crash makes, attempt 2 first: the helper must
// take attempt 2's write and refuse the zombie's.
func (d *taskDrill) fenceCheck(inst schemas.Instance) {
	const expected = "attempt 2's token above attempt 1's; after attempt 2 wrote, attempt 1's write refused"
	if inst.Attempt < 2 {
		d.report.Add(Check{Name: fenceCheckName, Expected: expected, Observed: "not verified: no second attempt ran", Info: true})
		return
	}
	c1, ok1 := d.callOf(callKey{inst.ID, 1})
	c2, ok2 := d.callOf(callKey{inst.ID, 2})
	if !ok1 || !ok2 {
		d.report.Expect(fenceCheckName, expected, "attempt 1 or 2 did not run on a drill executor", false)
		return
	}
	guard := fencehttp.NewGuard(nil)
	resource := fmt.Sprintf("instance/%d", inst.ID)
	err2 := guard.Admit(resource, c2.fence)
	err1 := guard.Admit(resource, c1.fence)
	outcome := func(err error) string {
		if err != nil {
			return "refused"
		}
		return "taken"
	}
	observed := fmt.Sprintf("tokens %d then %d: attempt 2's write %s, attempt 1's %s", c1.fence, c2.fence, outcome(err2), outcome(err1))
	d.report.Expect(fenceCheckName, expected, observed,
		c1.fence > 0 && c2.fence > c1.fence && err2 == nil && errors.Is(err1, fencehttp.ErrStale))
}
