package system

import (
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func TestLegal(t *testing.T) {
	tr := func(from, to schemas.State, attempt int) *transitionRow {
		return &transitionRow{from: from, to: to, attempt: attempt}
	}
	for _, c := range []struct {
		name       string
		prev, next *transitionRow
		want       bool
	}{
		{"creation", nil, tr(schemas.StateCreated, schemas.StateDispatched, 1), true},
		{"creation at a later attempt", nil, tr(schemas.StateCreated, schemas.StateDispatched, 2), false},
		{"first from RUNNING", nil, tr(schemas.StateRunning, schemas.StateSucceeded, 1), false},
		{"started", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateDispatched, schemas.StateRunning, 1), true},
		{"a gap", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateRunning, schemas.StateSucceeded, 1), false},
		{"DISPATCHED to SUCCEEDED", tr(schemas.StateCreated, schemas.StateDispatched, 1), tr(schemas.StateDispatched, schemas.StateSucceeded, 1), false},
		{"out of a terminal state", tr(schemas.StateRunning, schemas.StateSucceeded, 1), tr(schemas.StateSucceeded, schemas.StateRunning, 1), false},
		{"next attempt", tr(schemas.StateRunning, schemas.StateRetrying, 1), tr(schemas.StateRetrying, schemas.StateDispatched, 2), true},
		{"next attempt skips one", tr(schemas.StateRunning, schemas.StateRetrying, 1), tr(schemas.StateRetrying, schemas.StateDispatched, 3), false},
		{"attempt rises without a retry", tr(schemas.StateDispatched, schemas.StateRunning, 1), tr(schemas.StateRunning, schemas.StateSucceeded, 2), false},
	} {
		if got := legal(c.prev, c.next); got != c.want {
			t.Errorf("%s: legal = %v, want %v", c.name, got, c.want)
		}
	}
}
