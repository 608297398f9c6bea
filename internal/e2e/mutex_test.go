package e2e_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/ax-scheduler/ax/executor"
	"github.com/ax-scheduler/ax/schemas"
)

// TestMutexKeySerialisesRunsOfOneKey fires three runs for one shop and one
// for another: the task's mutex_key keeps the first shop's runs apart, while
// the other shop's run goes on beside them.
func TestMutexKeySerialisesRunsOfOneKey(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	mux := executor.NewMux()
	mux.HandleFunc("test.hold", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	s.executor("w1", mux, 8)
	s.apply(`
task_name: shop-sync
execution:
  handler: test.hold
concurrency:
  mutex_key: "shop-{{.shop_id}}"
`)
	var shop1 []int64
	for range 3 {
		shop1 = append(shop1, s.fire("shop-sync", map[string]int{"shop_id": 1}))
	}
	shop2 := s.fire("shop-sync", map[string]int{"shop_id": 2})

	type span struct{ start, end time.Time }
	spanOf := func(id int64) span {
		inst := s.waitState(id, schemas.StateSucceeded, 30*time.Second)
		return span{*inst.StartedAt, *inst.FinishedAt}
	}
	var spans []span
	for _, id := range shop1 {
		spans = append(spans, spanOf(id))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Errorf("shop 1 runs overlap: %v–%v and %v–%v", spans[i-1].start, spans[i-1].end, spans[i].start, spans[i].end)
		}
	}
	other := spanOf(shop2)
	if !other.start.Before(spans[len(spans)-1].start) {
		t.Errorf("shop 2 started at %v, after every shop 1 run had started: it waited for a mutex it does not share",
			other.start)
	}
}
