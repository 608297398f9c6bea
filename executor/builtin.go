package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Names of the built-in handlers registered by [RegisterBuiltins].
const (
	BuiltinEcho  = "builtin.echo"
	BuiltinSleep = "builtin.sleep"
	BuiltinFail  = "builtin.fail"
)

// RegisterBuiltins registers AX's built-in handlers on m, for trying AX out
// and for testing a deployment end to end:
//
//   - builtin.echo succeeds; its output is the payload as it is.
//   - builtin.sleep sleeps for the payload's seconds ({"seconds": 1.5}, a
//     number >= 0) and outputs {"slept_seconds": 1.5}. It logs a line when
//     it starts and one per whole second slept ("slept 1s of 1.5s"), and
//     reports its progress with each (milliseconds slept of the whole, see
//     [Job.Progress]). It fails, with the context's error wrapped, when
//     its context ends first.
//   - builtin.fail always fails, not permanently, with the payload's message
//     ({"message": "disk full"}) as the error text, or a default text.
//
// It panics if one of these names is already registered on m.
func RegisterBuiltins(m *Mux) {
	m.HandleFunc(BuiltinEcho, echo)
	m.Handle(BuiltinSleep, JSON(sleep))
	m.HandleFunc(BuiltinFail, fail)
}

func echo(_ context.Context, t *Job) (any, error) {
	if len(t.Payload) == 0 {
		return nil, nil
	}
	return t.Payload, nil
}

type sleepPayload struct {
	Seconds *float64 `json:"seconds"`
}

type sleepOutput struct {
	SleptSeconds float64 `json:"slept_seconds"`
}

func sleep(ctx context.Context, t *Job, p sleepPayload) (any, error) {
	if p.Seconds == nil {
		return nil, Permanent(errors.New(`builtin.sleep: the payload needs "seconds", a number >= 0, e.g. {"seconds": 1.5}`))
	}
	sec := *p.Seconds
	if sec < 0 || math.IsNaN(sec) || sec > math.MaxInt64/float64(time.Second) {
		return nil, Permanent(fmt.Errorf(`builtin.sleep: "seconds" is %v; use a number >= 0 and below 292 years`, sec))
	}
	d := time.Duration(sec * float64(time.Second))
	log := Logger(ctx)
	log.Info("sleeping "+d.String(), "seconds", sec)
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for slept := 1; ; slept++ {
		select {
		case <-timer.C:
			return sleepOutput{SleptSeconds: sec}, nil
		case <-tick.C:
			msg := fmt.Sprintf("slept %ds of %s", slept, d)
			log.Info(msg, "slept_seconds", slept, "seconds", sec)
			if err := t.Progress(ctx, min(time.Since(start), d).Milliseconds(), d.Milliseconds(), msg); err != nil {
				log.Debug("progress not reported", "error", err)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("builtin.sleep: interrupted after %s of %s: %w",
				time.Since(start).Round(time.Millisecond), d, ctx.Err())
		}
	}
}

func fail(_ context.Context, t *Job) (any, error) {
	var p struct {
		Message string `json:"message"`
	}
	if len(t.Payload) > 0 {
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return nil, fmt.Errorf(`builtin.fail: failed as asked (payload ignored: %w; use {"message": "…"})`, err)
		}
	}
	if p.Message == "" {
		return nil, errors.New("builtin.fail: failed as asked")
	}
	return nil, errors.New(p.Message)
}
