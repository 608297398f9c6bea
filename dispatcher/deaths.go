package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

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
// after one death may share the next too, and cannot be told apart yet).
// Suspects of one death tied on its most deaths shared every death so
// far: they are retried apart, one after the other (apartGap), so that
// the next death tells them apart. One in QuarantineAfter deaths that
// alone has the most of its death's attempts is quarantined: FAILED,
// whatever its attempts left, with the reason "quarantined: N workers
// died while running it". Of a tie, none is quarantined: they are
// retried apart, and the next death names the one that kills. The
// innocent neighbours of a death are retried after a short jitter
// (deathSpread), each at its own moment, rather than together at once.
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

// apartGap is how far apart in time the retries of suspects tied on
// their death's most deaths start, one after the other (by instance id),
// in lease TTLs: the death of the one retried first (its run, then a lease
// TTL and the expiry marker) is judged before the next one starts, when
// its handler kills within a lease TTL.
const apartGap = 2

// deathJudge is the part of the reaper that decides what a worker's death
// costs each attempt it held (see [deathJudge.judgeDeaths]) and how long
// their retries wait ([deathJudge.deathWait]).
type deathJudge struct {
	store           *store.Store
	quarantineAfter int
	// leaseTTL is the leases bucket's TTL, in nanoseconds, as the reaper
	// read it at start: how long a suspect's retry waits at least.
	leaseTTL atomic.Int64
	rand     func() float64
	now      func() time.Time
	log      zerolog.Logger
	suspects prometheus.Counter
}

// verdict is what a death costs one of its attempts: its instance's
// deaths so far, and, for a suspect tied with others of its death on the
// most deaths, its place among them (1, 2, …; 0 for none), which sets how
// long its retry waits (see [deathJudge.deathWait]).
type verdict struct {
	deaths int
	apart  int
}

// judgeDeaths counts the death of each of dead, attempts whose lease
// expired unfinished, and decides what each costs (see [judge]). The
// attempts of one death are those whose leases named one worker
// (holders); an attempt of unknown holder is a death of its own. It
// records the suspects' events and returns the failures to apply and each
// attempt's verdict.
func (j *deathJudge) judgeDeaths(ctx context.Context, dead []store.Failure, holders *leaseBook) ([]store.Failure, map[[2]int64]verdict, error) {
	deaths, err := j.store.CountDeaths(ctx, dead)
	if err != nil {
		return nil, nil, err
	}
	worker := func(f store.Failure) string {
		if w := holders.holder([2]int64{f.InstanceID, int64(f.Attempt)}); w != "" {
			return w
		}
		return fmt.Sprintf("?%d", f.InstanceID)
	}
	verdicts := judge(dead, deaths, worker)
	var events []store.Event
	out := make([]store.Failure, 0, len(dead))
	for _, f := range dead {
		k := [2]int64{f.InstanceID, int64(f.Attempt)}
		v, ok := verdicts[k]
		if !ok {
			out = append(out, f) // ended meanwhile: the write changes nothing
			continue
		}
		w := worker(f)
		id, named := w, "worker "+w
		if w[0] == '?' {
			id, named = "", "a worker the lease did not name"
		}
		f = j.charge(f, v, id, named)
		if v.deaths >= suspectAfter {
			events = append(events, store.Event{InstanceID: f.InstanceID, Attempt: f.Attempt, Kind: SuspectEvent, Operator: store.OperatorReaper,
				Reason: fmt.Sprintf("%d workers died while running instance %d (the last, %s)", v.deaths, f.InstanceID, named), At: j.now()})
			j.suspects.Inc()
		}
		out = append(out, f)
	}
	if err := j.store.RecordEvents(ctx, events); err != nil {
		return nil, nil, err
	}
	return out, verdicts, nil
}

// judge gives each attempt of dead that deaths counts its verdict: by
// death (the attempts worker names one for), the suspects with the most
// deaths of their death, when more than one, are tied and numbered by
// instance id.
func judge(dead []store.Failure, deaths map[[2]int64]int, worker func(store.Failure) string) map[[2]int64]verdict {
	most := make(map[string]int) // by worker: the most deaths of one of its attempts
	for _, f := range dead {
		w := worker(f)
		most[w] = max(most[w], deaths[[2]int64{f.InstanceID, int64(f.Attempt)}])
	}
	tied := make(map[string][]store.Failure) // by worker: its suspects with the most deaths
	out := make(map[[2]int64]verdict, len(dead))
	for _, f := range dead {
		k := [2]int64{f.InstanceID, int64(f.Attempt)}
		n, ok := deaths[k]
		if !ok {
			continue
		}
		out[k] = verdict{deaths: n}
		if w := worker(f); n >= suspectAfter && n == most[w] {
			tied[w] = append(tied[w], f)
		}
	}
	for _, fs := range tied {
		if len(fs) < 2 {
			continue
		}
		slices.SortFunc(fs, func(a, b store.Failure) int { return cmp.Compare(a.InstanceID, b.InstanceID) })
		for i, f := range fs {
			k := [2]int64{f.InstanceID, int64(f.Attempt)}
			out[k] = verdict{deaths: out[k].deaths, apart: i + 1}
		}
	}
	return out
}

// charge sets what the death costs f by its verdict v: the instance
// (quarantined) when it alone has its death's most deaths and they reach
// QuarantineAfter, else no attempt. id and named name the worker that
// died.
func (j *deathJudge) charge(f store.Failure, v verdict, id, named string) store.Failure {
	n := v.deaths
	if n >= j.quarantineAfter && v.apart == 0 {
		f.Quarantine = true
		f.Reason = fmt.Sprintf("%s: %d workers died while running this instance (the last, %s: %s); it is failed so that it kills no more",
			store.QuarantinedReasonPrefix, n, named, f.Reason)
		j.log.Error().Int64("instance_id", f.InstanceID).Int("attempt", f.Attempt).Int("deaths", n).Str("worker_id", id).
			Msg("instance quarantined: workers keep dying while running it")
		return f
	}
	f.NotCounted = true
	f.Reason = fmt.Sprintf("%s: its worker died, %s (%s); %d worker death(s) while running this instance: a death spends no attempt",
		store.NotCountedReasonPrefix, named, f.Reason, n)
	switch {
	case n >= j.quarantineAfter:
		// Another of its death has as many: which one kills is not known.
		f.Reason += fmt.Sprintf("; suspect: %s, another attempt of this death has %d deaths too; retried apart from it", store.TiedReason, n)
	case n >= suspectAfter:
		// Its retry waits apart from the attempts it died beside.
		f.Reason += fmt.Sprintf("; suspect: retried apart, quarantined at %d deaths", j.quarantineAfter)
	}
	return f
}

// deathWait returns how long the retry of an attempt whose worker died
// waits, by its verdict v: a suspect (deaths ≥ suspectAfter) its task's
// backoff and at least a lease TTL, plus up to half a TTL at random, so
// that it runs apart from the attempts it died beside, and one of a tie
// apartGap TTLs after the one before it (without the random part, which
// could bring two together); another up to deathSpread at random.
func (j *deathJudge) deathWait(v verdict, backoffWait time.Duration) time.Duration {
	if v.deaths < suspectAfter {
		return time.Duration(j.rand() * float64(deathSpread))
	}
	ttl := time.Duration(j.leaseTTL.Load())
	if v.apart > 0 {
		return max(backoffWait, ttl) + time.Duration(v.apart-1)*apartGap*ttl
	}
	return max(backoffWait, ttl) + time.Duration(j.rand()*float64(ttl/2))
}
