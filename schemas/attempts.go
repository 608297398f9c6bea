package schemas

import (
	"strings"
	"time"
)

// AttemptRun is one attempt of an instance as its transitions tell it:
// when it started and ended, on which worker, how it ended and why.
type AttemptRun struct {
	Attempt int `json:"attempt"`
	// StartedAt is when the attempt went RUNNING; nil when it never did
	// (it failed, was cancelled or retried before a worker started it).
	StartedAt *time.Time `json:"started_at,omitempty"`
	// EndedAt is when it left RUNNING (or DISPATCHED, never started); nil
	// while it runs or waits.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Worker is the worker that ran it, from its RUNNING transition.
	Worker string `json:"worker,omitempty"`
	// State is the state it ended in (SUCCEEDED, FAILED, RETRYING,
	// CANCELLED); the instance's current one while it has not ended.
	State State `json:"state"`
	// Error is the reason it ended with, unless it SUCCEEDED.
	Error string `json:"error,omitempty"`
	// DurationMS is EndedAt - StartedAt, in milliseconds, when both are set.
	DurationMS *int64 `json:"duration_ms,omitempty"`
}

// Attempts returns the attempts that transitions (one instance's, oldest
// first) tell, by attempt number: each attempt that reached a worker or
// ended. The instance page shows them as a table, so that a five-attempt
// instance reads as five runs, not as its last one.
func Attempts(transitions []Transition) []AttemptRun {
	var out []AttemptRun
	find := func(attempt int) *AttemptRun {
		for i := range out {
			if out[i].Attempt == attempt {
				return &out[i]
			}
		}
		out = append(out, AttemptRun{Attempt: attempt})
		return &out[len(out)-1]
	}
	for _, t := range transitions {
		if t.Attempt <= 0 {
			continue
		}
		switch {
		case t.To == StateRunning:
			a := find(t.Attempt)
			at := t.At
			a.StartedAt, a.State = &at, StateRunning
			a.Worker = strings.TrimPrefix(t.Operator, "worker:")
		case t.From == StateRunning || (t.From == StateDispatched && t.To != StateRunning && t.To != StateDispatched):
			a := find(t.Attempt)
			at := t.At
			a.EndedAt, a.State = &at, t.To
			if t.To != StateSucceeded {
				a.Error = t.Reason
			}
			if a.StartedAt != nil {
				ms := at.Sub(*a.StartedAt).Milliseconds()
				a.DurationMS = &ms
			}
		}
	}
	return out
}
