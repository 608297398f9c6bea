package dispatcher

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/streams"
)

// chainHeadroom keeps a chain firing this far under the NATS max payload, so
// that the dispatch message made of it (the same parents, a few more
// fields) fits too.
const chainHeadroom = 4 << 10

// maxReason is the longest reason a trigger event may carry
// (trigger.schema.json).
const maxReason = 1024

// addChainFiring adds to batch the firing of a chained task whose parents
// all ended (see [store.Store.ChainFirings]), once those ends were
// committed. Publishing a firing again is harmless: its event id makes it
// one firing, in JetStream and in PostgreSQL. Its reason lists how the
// parents ended ("after a (SUCCEEDED), b (FAILED)"), and
// it carries their outputs unless together they do not fit in a message.
func (s *Service) addChainFiring(batch *streams.AsyncBatch, f store.ChainFiring) error {
	names := make([]string, 0, len(f.Parents))
	for name := range f.Parents {
		names = append(names, name)
	}
	slices.Sort(names)
	ends := make([]string, len(names))
	for i, name := range names {
		ends[i] = fmt.Sprintf("%s (%s)", name, f.Parents[name].State)
	}
	ev := schemas.TriggerEvent{
		EventID: schemas.ChainEventID(f.Task, f.RunID),
		Task:    f.Task,
		Source:  schemas.SourceChain,
		FiredAt: s.now(),
		RunID:   f.RunID,
		Parents: f.Parents,
		Reason:  "after " + strings.Join(ends, ", "),
	}
	subject := s.top.AXTrigger(f.Task)
	m, err := streams.NewMsg(subject, streams.TriggerMsgID(f.Task, ev.EventID), ev)
	if err != nil {
		return fmt.Errorf("encode chain firing of %s in %s: %w", f.Task, f.RunID, err)
	}
	if limit := s.opts.Conn.MaxPayload() - chainHeadroom; int64(len(m.Data)) > limit {
		// The parents' outputs cannot travel: the task still fires, so
		// the run goes on, and its CREATED transition says why they are
		// missing.
		size := len(m.Data)
		stripped := make(map[string]schemas.ParentResult, len(f.Parents))
		for name, p := range f.Parents {
			p.Output = nil
			stripped[name] = p
		}
		ev.Parents = stripped
		ev.Reason = fmt.Sprintf("parents' outputs left out: with them the firing has %d bytes, over the %d the NATS max payload allows; return smaller outputs (a reference to the data); %s",
			size, limit, ev.Reason)
		s.log.Warn().Str("task", f.Task).Str("run_id", f.RunID).Int("bytes", size).
			Msg("chain firing too large; parents' outputs left out")
		if m, err = streams.NewMsg(subject, ev.EventID, ev); err != nil {
			return fmt.Errorf("encode chain firing of %s in %s: %w", f.Task, f.RunID, err)
		}
	}
	if len(ev.Reason) > maxReason {
		ev.Reason = truncate(ev.Reason, maxReason)
		if m, err = streams.NewMsg(subject, ev.EventID, ev); err != nil {
			return fmt.Errorf("encode chain firing of %s in %s: %w", f.Task, f.RunID, err)
		}
	}
	batch.Add(m)
	return nil
}

// truncate cuts s to at most n bytes, at a rune boundary, ending in "…".
func truncate(s string, n int) string {
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// chainSkip returns why a chain firing must not run its task, or "" when
// every parent's on condition holds. after is the task's current
// definition's; a parent the firing does not name is not judged.
func chainSkip(after []schemas.After, parents map[string]schemas.ParentResult) string {
	var reasons []string
	for _, a := range after {
		p, ok := parents[a.Task]
		if !ok {
			continue
		}
		if on := cmp.Or(a.On, schemas.DefaultAfterCondition); !on.Holds(p.State) {
			reasons = append(reasons, fmt.Sprintf("parent %s ended %s but the task runs after it on %s", a.Task, p.State, on))
		}
	}
	return strings.Join(reasons, "; ")
}

// attemptEnds returns the run ends among attempts: those in a terminal state.
func attemptEnds(attempts []store.Attempt) []store.RunEnd {
	var out []store.RunEnd
	for _, a := range attempts {
		// A SHADOW instance ran nothing: nothing chained after it fires.
		if a.State.Terminal() && a.State != schemas.StateShadow {
			out = append(out, store.RunEnd{Task: a.Task, RunID: a.RunID, NoParent: a.ParentID == 0})
		}
	}
	return out
}

// outcomeEnd returns the run end an outcome of a final report or a failure
// tells of: the instance is terminal at the attempt the report spoke of,
// by this report or by an earlier delivery of it, whose chain firings a
// crash may have lost.
func outcomeEnd(o store.Outcome) (store.RunEnd, bool) {
	if !o.Found || !o.State.Terminal() || o.CurrentAttempt != o.Attempt {
		return store.RunEnd{}, false
	}
	return store.RunEnd{Task: o.Task, RunID: o.RunID, NoParent: o.ParentID == 0}, true
}
