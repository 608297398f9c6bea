package schemas

import (
	"os"
	"strings"
	"testing"
)

// TestDocsGiveTheStateTable checks that docs/architecture.md shows the state
// machine that CanTransition holds.
func TestDocsGiveTheStateTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	if table := StateTable(); !strings.Contains(string(doc), table) {
		t.Errorf("docs/architecture.md does not hold the state table of schemas.CanTransition; replace it with:\n%s", table)
	}
}

// TestTerminalStatesHaveNoEdges holds Terminal and the table to each other.
func TestTerminalStatesHaveNoEdges(t *testing.T) {
	t.Parallel()
	for _, s := range []State{StateCreated, StateWaiting, StateDispatched, StateRunning, StateRetrying,
		StateSucceeded, StateFailed, StateSkipped, StateCancelled, StateShadow} {
		if got := len(transitions[s]) == 0; got != s.Terminal() {
			t.Errorf("%s: no edges out is %t, Terminal is %t", s, got, s.Terminal())
		}
	}
}
