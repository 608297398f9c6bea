package schemas

import (
	"fmt"
	"strings"
)

// State is the state of a task instance. The state machine is
//
//	CREATED → DISPATCHED → RUNNING → SUCCEEDED | FAILED | RETRYING
//	RETRYING → DISPATCHED (the next attempt)
//
// plus WAITING (held by max_running_instances with the serial strategy),
// SKIPPED (discarded by strategy, disabled task, payload version mismatch),
// CANCELLED, and SHADOW (a firing of a task in shadow mode, recorded and
// never run: see docs/migrate.md).
type State string

// The instance states.
const (
	StateCreated    State = "CREATED"
	StateWaiting    State = "WAITING"
	StateDispatched State = "DISPATCHED"
	StateRunning    State = "RUNNING"
	StateRetrying   State = "RETRYING"
	StateSucceeded  State = "SUCCEEDED"
	StateFailed     State = "FAILED"
	StateSkipped    State = "SKIPPED"
	StateCancelled  State = "CANCELLED"
	// StateShadow ends a firing of a task in shadow mode at its creation:
	// recorded on its tick, never dispatched. It is no run and no failure.
	StateShadow State = "SHADOW"
)

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateSkipped, StateCancelled, StateShadow:
		return true
	}
	return false
}

// Valid reports whether s is one of the instance states.
func (s State) Valid() bool {
	switch s {
	case StateCreated, StateWaiting, StateDispatched, StateRunning, StateRetrying,
		StateSucceeded, StateFailed, StateSkipped, StateCancelled, StateShadow:
		return true
	}
	return false
}

// transitions are the state machine's edges: from each state, the states a
// transition may lead to. The empty state is before the instance exists.
var transitions = map[State][]State{
	"":              {StateCreated, StateWaiting, StateDispatched, StateSkipped, StateCancelled, StateFailed},
	StateCreated:    {StateWaiting, StateDispatched, StateSkipped, StateCancelled, StateFailed, StateShadow},
	StateWaiting:    {StateCreated, StateDispatched, StateSkipped, StateCancelled, StateFailed},
	StateDispatched: {StateDispatched, StateRunning, StateRetrying, StateFailed, StateCancelled, StateSkipped},
	StateRunning:    {StateSucceeded, StateFailed, StateRetrying, StateCancelled},
	StateRetrying:   {StateDispatched, StateWaiting, StateFailed, StateCancelled},
}

// CanTransition reports whether the state machine has an edge from from to
// to (from "" is an instance's creation). A terminal state has none.
// Fault drills check every recorded transition against it.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// StateTable renders the state machine's edges as a Markdown table, one row
// per state in the order of the lifecycle, for docs/architecture.md (a test
// holds the doc to it).
func StateTable() string {
	var b strings.Builder
	b.WriteString("| from | may move to |\n|---|---|\n")
	for _, from := range []State{"", StateCreated, StateWaiting, StateDispatched, StateRunning, StateRetrying,
		StateSucceeded, StateFailed, StateSkipped, StateCancelled, StateShadow} {
		name := "`" + string(from) + "`"
		if from == "" {
			name = "(creation)"
		}
		to := make([]string, len(transitions[from]))
		for i, s := range transitions[from] {
			to[i] = "`" + string(s) + "`"
		}
		next := strings.Join(to, ", ")
		if next == "" {
			next = "— (terminal)"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", name, next)
	}
	return b.String()
}
