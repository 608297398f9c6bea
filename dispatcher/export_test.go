package dispatcher

// testHooks let a test hold a batch of firings at a point of its way
// (see [intake.fire]); each is given the batch's firings. Unset, each
// does nothing.
type testHooks struct {
	// beforeWrites runs before the batch's first statement that writes.
	beforeWrites func([]firing)
	// waitsTurn runs when the batch, holding firings whose order matters,
	// waits for the batch before it to pass its turn before it writes.
	waitsTurn func([]firing)
	// beforeAcks runs before the batch awaits its publishes'
	// acknowledgements.
	beforeAcks func([]firing)
}

// setHooks makes s run h's hooks at their points; call it before Run.
func (s *Service) setHooks(h testHooks) {
	hooks := map[firingPoint]func([]firing){pointWrites: h.beforeWrites, pointTurn: h.waitsTurn, pointAcks: h.beforeAcks}
	s.intake.at = func(p firingPoint, firings []firing) {
		if hook := hooks[p]; hook != nil {
			hook(firings)
		}
	}
}
