package dispatcher

import (
	"fmt"
	"testing"

	"github.com/ax-scheduler/ax/schemas"
)

func workersNamed(ids ...string) []schemas.Worker {
	ws := make([]schemas.Worker, len(ids))
	for i, id := range ids {
		ws[i] = schemas.Worker{ID: id}
	}
	return ws
}

// TestRendezvousMovesMinimally checks that a worker that joins takes only
// the keys it wins, one that leaves gives up only its own, and the keys
// spread over the workers.
func TestRendezvousMovesMinimally(t *testing.T) {
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("customer-%d", i)
	}
	mapping := func(ws []schemas.Worker) map[string]string {
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = rendezvous(k, ws)
		}
		return m
	}
	three := mapping(workersNamed("w1", "w2", "w3"))
	counts := make(map[string]int)
	for _, w := range three {
		counts[w]++
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		if counts[id] < len(keys)/3*8/10 {
			t.Errorf("worker %s won %d of %d keys: the spread is uneven (%v)", id, counts[id], len(keys), counts)
		}
	}
	four := mapping(workersNamed("w1", "w2", "w3", "w4"))
	moved := 0
	for _, k := range keys {
		if four[k] != three[k] {
			moved++
			if four[k] != "w4" {
				t.Fatalf("key %s moved from %s to %s when w4 joined", k, three[k], four[k])
			}
		}
	}
	if moved < len(keys)/4*8/10 || moved > len(keys)/4*12/10 {
		t.Errorf("w4 took %d of %d keys, want about a quarter", moved, len(keys))
	}
	less := mapping(workersNamed("w1", "w3", "w4"))
	for _, k := range keys {
		if four[k] != "w2" && less[k] != four[k] {
			t.Fatalf("key %s moved from %s to %s when w2 left", k, four[k], less[k])
		}
		if less[k] == "w2" {
			t.Fatalf("key %s still on w2, which left", k)
		}
	}
}
