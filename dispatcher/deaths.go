package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/store"
)

// Worker deaths: a handler that kills its process (os.Exit, a panic on a
// goroutine it started, running out of memory) takes with it every
// attempt its worker ran. The reaper cannot tell from one death which
// attempt killed the worker, so it charges none of them: an attempt whose
// worker died spends none of the instance's max_attempts (it moves to
// RETRYING with max_attempts one higher, as a hand-back does). Each
// instance counts the workers that died while running it
// ([store.Store.CountDeaths]); the poison is the instance present in every
// death, its neighbours each in one. An instance in suspectAfter deaths is
// a suspect: an event on its timeline, a metric, and its retry waits a
// lease TTL and more, so that it runs apart from the attempts it died
// beside (it still spends no attempt: two instances retried together
// after one death may share the next too, and cannot be told apart yet). One in QuarantineAfter deaths, the most of its death's
// attempts, is quarantined: FAILED, whatever its attempts left, with the
// reason "quarantined: N workers died while running it". The innocent
// neighbours of a death are retried after a short jitter (deathSpread),
// each at its own moment, rather than together at once.
// See docs/execution.md, "Worker deaths".

// DefaultQuarantineAfter is the worker deaths after which an instance is
// quarantined (see [Options.QuarantineAfter]).
const DefaultQuarantineAfter = 3

// suspectAfter is the worker deaths that make an instance a suspect.
const suspectAfter = 2

// deathSpread bounds the random wait before the retry of an attempt whose
// worker died and that is not a suspect: the attempts of one death are
// retried apart, each at its own moment (held in memory by the dispatcher
// that takes its firing, to the millisecond), not in one batch that one
// worker pulls. It stays well under a second: it adds to the recovery
// from a crash (lease TTL + the expiry marker's ~0.3 s).
const deathSpread = 250 * time.Millisecond

// SuspectEvent is the kind of the timeline event of an instance that
// several workers died while running.
const SuspectEvent = "suspect"

// judgeDeaths counts the death of each of dead, attempts whose lease
// expired unfinished, and decides what each costs: no attempt, or, for the
// instance with the most deaths of its death once they reach
// QuarantineAfter, the instance (quarantined). The attempts of one death are those whose leases named
// one worker (holders); an attempt of unknown holder is a death of its
// own. It records the suspects' events and returns the failures to apply
// and each attempt's deaths.
func (s *Service) judgeDeaths(ctx context.Context, dead []store.Failure, holders *leaseBook) ([]store.Failure, map[[2]int64]int, error) {
	deaths, err := s.opts.Store.CountDeaths(ctx, dead)
	if err != nil {
		return nil, nil, err
	}
	worker := func(f store.Failure) string {
		if w := holders.holder([2]int64{f.InstanceID, int64(f.Attempt)}); w != "" {
			return w
		}
		return fmt.Sprintf("?%d", f.InstanceID)
	}
	most := make(map[string]int) // by worker: the most deaths of one of its attempts
	for _, f := range dead {
		w := worker(f)
		most[w] = max(most[w], deaths[[2]int64{f.InstanceID, int64(f.Attempt)}])
	}
	var events []store.Event
	out := make([]store.Failure, 0, len(dead))
	for _, f := range dead {
		k := [2]int64{f.InstanceID, int64(f.Attempt)}
		n, ok := deaths[k]
		if !ok {
			out = append(out, f) // ended meanwhile: the write changes nothing
			continue
		}
		w := worker(f)
		id, named := w, "worker "+w
		if w[0] == '?' {
			id, named = "", "a worker the lease did not name"
		}
		if n >= s.opts.QuarantineAfter && n == most[w] {
			f.Quarantine = true
			f.Reason = fmt.Sprintf("%s: %d workers died while running this instance (the last, %s: %s); it is failed so that it kills no more",
				store.QuarantinedReasonPrefix, n, named, f.Reason)
			s.log.Error().Int64("instance_id", f.InstanceID).Int("attempt", f.Attempt).Int("deaths", n).Str("worker_id", id).
				Msg("instance quarantined: workers keep dying while running it")
		} else {
			f.NotCounted = true
			f.Reason = fmt.Sprintf("%s: its worker died, %s (%s); %d worker death(s) while running this instance: a death spends no attempt",
				store.NotCountedReasonPrefix, named, f.Reason, n)
			if n >= suspectAfter {
				// Its retry waits apart from the attempts it died beside.
				f.Reason += fmt.Sprintf("; suspect: retried apart, quarantined at %d deaths", s.opts.QuarantineAfter)
			}
		}
		if n >= suspectAfter {
			events = append(events, store.Event{InstanceID: f.InstanceID, Attempt: f.Attempt, Kind: SuspectEvent, Operator: store.OperatorReaper,
				Reason: fmt.Sprintf("%d workers died while running instance %d (the last, %s)", n, f.InstanceID, named), At: s.now()})
			s.metrics.suspects.Inc()
		}
		out = append(out, f)
	}
	if err := s.opts.Store.RecordEvents(ctx, events); err != nil {
		return nil, nil, err
	}
	return out, deaths, nil
}

// deathWait returns how long the retry of an attempt whose worker died
// waits: a suspect (deaths ≥ suspectAfter) its task's backoff and at least
// a lease TTL, plus up to half a TTL at random, so that it runs apart from
// the attempts it died beside; another up to deathSpread at random.
func (s *Service) deathWait(deaths int, backoffWait time.Duration) time.Duration {
	if deaths < suspectAfter {
		return time.Duration(s.opts.RandFunc() * float64(deathSpread))
	}
	ttl := time.Duration(s.leaseTTL.Load())
	return max(backoffWait, ttl) + time.Duration(s.opts.RandFunc()*float64(ttl/2))
}
