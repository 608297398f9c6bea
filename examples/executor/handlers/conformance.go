package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-scheduler/ax/executor"
)

// ConformancePrefix is the prefix of the conformance handlers' names that
// ax conformance executor fires by default.
const ConformancePrefix = "conformance."

// RegisterConformance registers on m, each named prefix + its name, the
// handlers that ax conformance executor fires at a pool: echo, fail,
// permanent, sleep and log, as docs/executor-protocol.md ("Conformance
// handlers") specifies them for a worker in any language. The handler
// "missing", which the kit fires too, must not be registered. It panics
// when a name is taken.
func RegisterConformance(m *executor.Mux, prefix string) {
	m.HandleFunc(prefix+"echo", conformanceEcho)
	m.Handle(prefix+"fail", executor.JSON(conformanceFail))
	m.HandleFunc(prefix+"permanent", conformancePermanent)
	m.Handle(prefix+"sleep", executor.JSON(conformanceSleep))
	m.Handle(prefix+"log", executor.JSON(conformanceLog))
}

// conformanceEcho returns the payload as it came; no payload, no output.
func conformanceEcho(_ context.Context, t *executor.Job) (any, error) {
	if len(t.Payload) == 0 {
		return nil, nil
	}
	return t.Payload, nil
}

type conformanceFailures struct {
	Failures *int `json:"failures"`
}

// conformanceFail fails its first failures attempts (default 2), deciding
// from the attempt number alone, then succeeds with {"attempt": n}.
func conformanceFail(_ context.Context, t *executor.Job, p conformanceFailures) (any, error) {
	n := 2
	if p.Failures != nil {
		n = *p.Failures
	}
	if t.Attempt <= n {
		return nil, fmt.Errorf("conformance: attempt %d fails on purpose", t.Attempt)
	}
	return map[string]int{"attempt": t.Attempt}, nil
}

// conformancePermanent fails without retry.
func conformancePermanent(context.Context, *executor.Job) (any, error) {
	return nil, executor.Permanent(errors.New("conformance: permanent failure"))
}

type conformanceSleepFor struct {
	MS *int64 `json:"ms"`
}

// conformanceSleep sleeps ms milliseconds (default 1000) and succeeds with
// {"slept_ms": ms}, or stops at once and fails with the cause when its
// context ends first (a cancel, the deadline, a shutdown past its timeout).
func conformanceSleep(ctx context.Context, _ *executor.Job, p conformanceSleepFor) (any, error) {
	ms := int64(1000)
	if p.MS != nil {
		ms = *p.MS
	}
	timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return map[string]int64{"slept_ms": ms}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

type conformanceLines struct {
	Lines *int `json:"lines"`
}

// conformanceLog writes lines log lines (default 3), "conformance line i
// of n" at level info with the field i, and succeeds with {"lines": n}.
func conformanceLog(ctx context.Context, _ *executor.Job, p conformanceLines) (any, error) {
	n := 3
	if p.Lines != nil {
		n = *p.Lines
	}
	log := executor.Logger(ctx)
	for i := 1; i <= n; i++ {
		log.Info(fmt.Sprintf("conformance line %d of %d", i, n), "i", i)
	}
	return json.RawMessage(fmt.Sprintf(`{"lines":%d}`, n)), nil
}
