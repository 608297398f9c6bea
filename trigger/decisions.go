package trigger

import (
	"fmt"
	"os"
	"time"

	"github.com/ax-scheduler/ax/store"
)

// maxPendingDecisions bounds the decisions waiting to be written while
// PostgreSQL is away; past it the oldest are dropped (the log keeps them).
const maxPendingDecisions = 10_000

// actor names this trigger replica in its decisions.
var actor = func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("trigger@%s:%d", host, os.Getpid())
}()

// recordMisfire queues the record of a misfire decision (table
// decisions), which ax explain reads: the persister writes it in the
// background with the trigger states, so the run loop never waits for it.
func (s *Service) recordMisfire(e *entry, m missed, d decision) {
	count := fmt.Sprint(m.count)
	if !m.exact {
		count = "about " + count
	}
	first, last := time.Unix(0, m.first).UTC(), time.Unix(0, m.last).UTC()
	why := fmt.Sprintf("%s ticks missed from %s to %s (the trigger did not fire them in time: it was down, stalled, "+
		"or the task was paused or disabled); misfire %s: ", count, first.Format(time.RFC3339), last.Format(time.RFC3339), e.misfire)
	switch {
	case len(d.fire) == 0:
		why += "none fired"
	case len(d.fire) == 1:
		why += "fired " + time.Unix(0, d.fire[0]).UTC().Format(time.RFC3339) + " late"
	default:
		why += fmt.Sprintf("fired %d late, %s to %s", len(d.fire), time.Unix(0, d.fire[0]).UTC().Format(time.RFC3339),
			time.Unix(0, d.fire[len(d.fire)-1]).UTC().Format(time.RFC3339))
	}
	if d.skipped > 0 {
		why += fmt.Sprintf(", skipped %d (%s to %s)", d.skipped, time.Unix(0, d.firstSkipped).UTC().Format(time.RFC3339),
			time.Unix(0, d.lastSkipped).UTC().Format(time.RFC3339))
	}
	s.persist.decide(store.Decision{Task: e.task.name, TriggerIndex: int(e.trigger), Kind: store.DecisionMisfire,
		First: first, Last: last, Actor: actor, Reason: why, At: s.now().UTC()})
}

// decide queues d for the next flush.
func (p *persister) decide(d store.Decision) {
	p.mu.Lock()
	if len(p.decisions) == maxPendingDecisions {
		p.decisions = p.decisions[1:]
	}
	p.decisions = append(p.decisions, d)
	p.mu.Unlock()
	p.signal()
}

// flushDecisions writes the queued decisions; on failure they go back to
// the front of the queue.
func (p *persister) flushDecisions(write func([]store.Decision) error) error {
	p.mu.Lock()
	ds := p.decisions
	p.decisions = nil
	p.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	if err := write(ds); err != nil {
		p.mu.Lock()
		p.decisions = append(ds, p.decisions...)
		if n := len(p.decisions) - maxPendingDecisions; n > 0 {
			p.decisions = p.decisions[n:]
		}
		p.mu.Unlock()
		return err
	}
	return nil
}
