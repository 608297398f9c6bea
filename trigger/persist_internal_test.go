package trigger

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/schemas/taskdef"
	"github.com/ax-scheduler/ax/store"
	"github.com/ax-scheduler/ax/store/storetest"
)

// TestUnsavedCoversWritesDuringARead reads the stored trigger states while
// the persister writes a tick: the read finds the older state (it began
// first), and the write is done before the replan looks. unsaved must
// still tell the tick written, or the trigger would fire it again
// (TestReplansOnTaskChange, once in about fifty runs).
func TestUnsavedCoversWritesDuringARead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(storetest.New(t).Pool)
	task, err := taskdef.ParseTask([]byte("task_name: tx\nexecution: {handler: h}\ntriggers: [{type: cron, schedule: '*/10 * * * * *'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyTask(ctx, task, "test"); err != nil {
		t.Fatal(err)
	}
	state := func(at string) store.TriggerState {
		tick, _ := time.Parse(time.RFC3339, at)
		return store.TriggerState{Task: "tx", Schedule: "*/10 * * * * *", Timezone: "UTC", LastTick: tick}
	}
	p := newPersister(st, zerolog.Nop())
	p.save(state("2024-05-01T10:00:30Z"))
	if err := p.flush(ctx); err != nil {
		t.Fatal(err)
	}

	mark := p.reading()
	states, err := st.GetTriggerStates(ctx, []string{"tx"})
	if err != nil {
		t.Fatal(err)
	}
	p.save(state("2024-05-01T10:00:40Z")) // the tick fired meanwhile
	if err := p.flush(ctx); err != nil {
		t.Fatal(err)
	}
	key := store.TriggerKey{Task: "tx"}
	if got := states[key].LastTick; !got.Equal(state("2024-05-01T10:00:30Z").LastTick) {
		t.Fatalf("the read found last tick %v", got)
	}
	got, ok := p.unsaved(key, mark)
	if !ok || !got.LastTick.Equal(state("2024-05-01T10:00:40Z").LastTick) {
		t.Errorf("unsaved says %v (%t), want the tick written during the read", got.LastTick, ok)
	}
	p.doneReading(mark)
	if len(p.recent) != 0 || len(p.readers) != 0 {
		t.Errorf("after the read, %d batches and %d reads are kept", len(p.recent), len(p.readers))
	}

	// A read that begins after the write finds it in the store.
	mark = p.reading()
	defer p.doneReading(mark)
	if got, ok := p.unsaved(key, mark); ok {
		t.Errorf("unsaved says %v for a read after the write", got.LastTick)
	}
}
