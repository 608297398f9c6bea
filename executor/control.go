package executor

import (
	"github.com/nats-io/nats.go"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/streams"
)

// onControl handles a message on the worker's control subject. A cancel
// names an attempt (attempt 0: whichever attempt of the instance runs here)
// and ends its context; the attempt then fails with the reason, to be
// retried by the task's policy.
func (s *Service) onControl(m *nats.Msg) {
	c, err := streams.Decode[schemas.Control](m.Subject, m.Data)
	if err != nil {
		s.log.Warn("undecodable control message; ignoring it", "error", err)
		return
	}
	if c.Action == schemas.ControlRefuse {
		s.log.Error("the dispatchers refuse this worker", "reason", c.Reason, "speaks", schemas.ExecutorProtocol)
		return
	}
	if c.Action != schemas.ControlCancel {
		s.log.Warn("unknown control action; ignoring it", "action", string(c.Action))
		return
	}
	found := s.leases.find(c.InstanceID, c.Attempt)
	if len(found) == 0 {
		s.log.Info("cancel of an attempt that does not run here; ignoring it", "instance_id", c.InstanceID, "attempt", c.Attempt, "reason", c.Reason)
		return
	}
	for _, a := range found {
		a.log.Info("cancelling attempt", "reason", c.Reason)
		a.cancel(cancelError{reason: c.Reason})
	}
}
