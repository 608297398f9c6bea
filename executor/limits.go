package executor

import (
	"fmt"
	"math"

	"golang.org/x/time/rate"
)

// HandlerOption sets how a worker runs one handler: pass it to [Mux.Handle].
// See [Concurrency] and [RateLimit].
type HandlerOption func(*handlerLimits)

// handlerLimits is what a handler's options asked for.
type handlerLimits struct {
	concurrency int        // most attempts at once per worker; 0: the worker's slots only
	rate        rate.Limit // attempts per second per worker; 0: no limit
	burst       int
}

// Concurrency bounds how many attempts of the handler one worker runs at
// once to n, inside the worker's Options.Slots: a slow handler then fills
// its own n slots, never the whole worker. An attempt fetched while the
// handler's slots are full is given back to JetStream for
// Options.RequeueDelay, for this or another worker to take later; it is
// never dropped. Without the option a handler may take every free slot of
// the worker.
//
// It panics when n < 1.
func Concurrency(n int) HandlerOption {
	if n < 1 {
		panic(fmt.Sprintf("executor: Concurrency(%d): a handler needs at least 1 slot", n))
	}
	return func(l *handlerLimits) { l.concurrency = n }
}

// RateLimit starts at most perSecond attempts of the handler per second on
// one worker, with bursts of up to burst attempts (a token bucket,
// golang.org/x/time/rate). An attempt waits for its turn in its slot
// before it starts: its lease, its started report and its timeout begin
// once it may run, so the wait does not count against the task's timeout.
// While it waits it holds one of the handler's slots and one of the
// worker's, so combine RateLimit with [Concurrency] to keep a throttled
// handler from filling the worker.
//
// It panics when perSecond is not a positive finite number or burst < 1.
func RateLimit(perSecond float64, burst int) HandlerOption {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		panic(fmt.Sprintf("executor: RateLimit(%v, %d): use a positive, finite number of attempts per second", perSecond, burst))
	}
	if burst < 1 {
		panic(fmt.Sprintf("executor: RateLimit(%v, %d): a burst of at least 1 is needed, or no attempt could ever start", perSecond, burst))
	}
	return func(l *handlerLimits) { l.rate, l.burst = rate.Limit(perSecond), burst }
}

// handlerState is one handler's limits on one worker at run time.
type handlerState struct {
	limits  handlerLimits
	limiter *rate.Limiter // nil: no rate limit
	busy    int           // slots taken; guarded by Service.mu
}

func newHandlerState(l handlerLimits) *handlerState {
	hs := &handlerState{limits: l}
	if l.rate > 0 {
		hs.limiter = rate.NewLimiter(l.rate, l.burst)
	}
	return hs
}

// full reports whether every slot of the handler is taken. The caller holds Service.mu.
func (hs *handlerState) full() bool {
	return hs.limits.concurrency > 0 && hs.busy >= hs.limits.concurrency
}
