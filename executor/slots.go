package executor

import (
	"fmt"

	"github.com/ax-scheduler/ax/schemas"
)

// slotsOf returns how many of the worker's slots an attempt of d takes:
// the task's execution.slots (at least 1), and never more than the worker
// has, so that a worker with fewer slots than a heavy task declares still
// runs it, alone.
func (s *Service) slotsOf(d *schemas.Dispatch) int {
	return min(max(d.Slots, 1), s.opts.Slots)
}

// takeSlots takes n of the worker's slots and reports true, or reports
// false and takes none when fewer than n are free: a heavy attempt waits
// for a worker (this one later, or another) with room for it, and never
// runs beside more work than the worker's slots hold. The caller holds
// s.mu.
func (s *Service) takeSlots(n int) bool {
	if s.held+n > s.opts.Slots {
		return false
	}
	s.held += n
	return true
}

// shortOfSlots says why an attempt of n slots was given back.
func (s *Service) shortOfSlots(n int) string {
	return fmt.Sprintf("the attempt takes %d slots and the worker has %d of %d free", n, s.opts.Slots-s.Busy(), s.opts.Slots)
}
