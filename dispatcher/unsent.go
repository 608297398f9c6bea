package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-scheduler/ax/store"
)

// A failure the reaper applies is a guarded write followed by publishes:
// the next attempts of those with attempts left, the firings chained after
// those that ended, the waiting instances their slots promote. Once the
// write has committed, the attempts are no longer DISPATCHED or RUNNING,
// so no candidate list (a lapsed lease's, an overdue attempt's, a fence
// question's) names them again: a publish that then fails (a stream
// without its leader, a lost connection) would leave the instance
// RETRYING with no retry on its way, for ever. So a failure whose write
// committed is kept until everything it sets going is published, and the
// reaper's loop applies the kept ones again first on every step (one whose
// write failed changed nothing: its caller names its attempts again). Applying one again is safe: the
// guarded write changes nothing the second time, its outcomes (the
// instance RETRYING, or ended, at that attempt) set the same firings going,
// and their message ids dedupe what the first try did publish.
//
// A dispatcher that dies between the write and the publish keeps nothing:
// the reaper of every dispatcher looks, at start and each recoverEvery,
// for instances that the reaper moved to RETRYING more than recoverAge
// ago, whose retry no schedule in AX_FIRINGS holds, and sends their
// retries again (see [reaper.recoverRetries]).

// reaped is a failure of attempts as the reaper applies it: see
// [reaper.failAttempts] for its fields.
type reaped struct {
	failures []store.Failure
	workers  map[[2]int64]string
	holders  *leaseBook
	deaths   map[[2]int64]verdict
	cause    string
}

// unsentFailures are the failures whose application failed, kept for the
// reaper's loop; safe for concurrent use (the fence and the dispatch of
// attempts fail attempts too).
type unsentFailures struct {
	mu   sync.Mutex
	kept []reaped
	// wake tells the reaper's loop that a failure was kept.
	wake chan struct{}
}

func newUnsentFailures() *unsentFailures {
	return &unsentFailures{wake: make(chan struct{}, 1)}
}

// keep keeps fs and, when wake, wakes the reaper's loop: a failure kept
// by another goroutine (the fence, the dispatch) is applied again at once,
// one the loop itself failed to apply again after its retry delay.
func (u *unsentFailures) keep(wake bool, fs ...reaped) {
	u.mu.Lock()
	u.kept = append(u.kept, fs...)
	u.mu.Unlock()
	if !wake {
		return
	}
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// take returns the failures kept and forgets them.
func (u *unsentFailures) take() []reaped {
	u.mu.Lock()
	defer u.mu.Unlock()
	kept := u.kept
	u.kept = nil
	return kept
}

// len returns how many failures are kept.
func (u *unsentFailures) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.kept)
}

// applyUnsent applies the failures kept, in the order they were kept; one
// that fails again is kept again (with those after it, untried), and its
// error returned. The holders of each applied are forgotten: its expiries
// are dealt with.
func (rp *reaper) applyUnsent(ctx context.Context) error {
	kept := rp.unsent.take()
	for i, f := range kept {
		if _, err := rp.apply(ctx, f); err != nil {
			rp.unsent.keep(false, kept[i:]...)
			return err
		}
		f.holders.forget(f.failures)
	}
	return nil
}

// recoverAge is how long an instance stays RETRYING by the reaper's write,
// with no schedule of its retry waiting, before the reaper takes its retry
// for lost: the reaper that wrote it publishes the retry within moments
// or keeps it to publish again, and a retry due within holdWindow, which
// travels with no schedule, is started within it.
const recoverAge = 15 * time.Second

// recoverEvery is how often the reaper looks for lost retries.
const recoverEvery = time.Minute

// recoverRetries sends again the retries of instances the reaper moved to
// RETRYING more than recoverAge ago whose retry is on no way: no schedule
// of it waits in AX_FIRINGS, and it was not started — their dispatcher
// died between the write and the publish. Each is applied as the reaper
// applies a failure (the write changes nothing, see above): an attempt
// that outlived its timeout waits by the task's backoff again, one whose
// worker died by the death judge's wait for its deaths so far; a retry
// that was on its way after all is deduped by its message id or started
// once (the guarded move from RETRYING). A pass looks at up to a batch
// of instances from id after on, and returns where the next pass begins:
// after the last it looked at when there may be more, else 0 (the next
// pass begins again), so that retries waiting long as schedules never hide
// those after them.
func (rp *reaper) recoverRetries(ctx context.Context, after int64) (int64, error) {
	found, err := rp.store.ReapedRetries(ctx, recoverAge, after, rp.batchSize)
	if err != nil || len(found) == 0 {
		return 0, err
	}
	next := int64(0)
	if len(found) == rp.batchSize {
		next = found[len(found)-1].InstanceID
	}
	return next, rp.sendLostRetries(ctx, found)
}

// sendLostRetries sends the retries of found whose schedule does not wait
// in AX_FIRINGS (see [reaper.recoverRetries]).
func (rp *reaper) sendLostRetries(ctx context.Context, found []store.ReapedRetry) error {
	firings, err := rp.js.Stream(ctx, rp.top.FiringsStream())
	if err != nil {
		return fmt.Errorf("recover retries: %w", err)
	}
	var lapsed, overdue []store.Failure
	deaths := make(map[[2]int64]verdict)
	for _, r := range found {
		_, err := firings.GetLastMsgForSubject(ctx, rp.top.Sched(retryEventID(r.InstanceID, r.Attempt+1)))
		if err == nil {
			continue // its schedule waits
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("recover retries: look for the schedule of instance %d: %w", r.InstanceID, err)
		}
		f := store.Failure{InstanceID: r.InstanceID, Attempt: r.Attempt, Reason: r.Reason, At: rp.now()}
		if strings.HasPrefix(r.Reason, timeoutPrefix) {
			overdue = append(overdue, f)
			continue
		}
		lapsed = append(lapsed, f)
		deaths[[2]int64{r.InstanceID, int64(r.Attempt)}] = verdict{deaths: r.Deaths}
	}
	if n := len(lapsed) + len(overdue); n > 0 {
		rp.metrics.retriesRecovered.Add(float64(n))
		rp.log.Warn().Int("instances", n).Msg("retries of attempts the reaper failed were never sent (a dispatcher died between its write and the publish); sending them")
	}
	if len(lapsed) > 0 {
		if err := rp.failAttempts(ctx, lapsed, nil, nil, deaths, "retry recovered"); err != nil {
			return err
		}
	}
	if len(overdue) > 0 {
		// A map of workers, empty, marks attempts that outlived their timeout.
		return rp.failAttempts(ctx, overdue, map[[2]int64]string{}, nil, nil, "retry recovered")
	}
	return nil
}
