package trigger

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-scheduler/ax/store"
)

// persister saves trigger states in the background, so that a slow
// database never delays a firing. Saves of one trigger coalesce: only the
// latest tick is written. It is safe for concurrent use.
type persister struct {
	store *store.Store
	log   zerolog.Logger

	mu      sync.Mutex
	pending map[store.TriggerKey]stateOp
	// writing is the batch being written, nil between flushes.
	writing map[store.TriggerKey]stateOp
	// written counts the batches written; readers counts the reads of
	// the stored states in progress, by the value of written when each
	// began (see reading); recent holds the batches written since the
	// earliest of them began, which that read may not have seen.
	written uint64
	readers map[uint64]int
	recent  []writtenBatch
	wake    chan struct{}
	// decisions wait to be written to the decisions table (decisions.go).
	decisions []store.Decision
}

// writtenBatch is a batch of operations written to the store, the
// written-th.
type writtenBatch struct {
	written uint64
	ops     map[store.TriggerKey]stateOp
}

// stateOp is a pending write of one trigger's state: a save or a delete.
type stateOp struct {
	state store.TriggerState
	drop  bool
}

func newPersister(st *store.Store, log zerolog.Logger) *persister {
	return &persister{
		store:   st,
		log:     log,
		pending: make(map[store.TriggerKey]stateOp),
		readers: make(map[uint64]int),
		wake:    make(chan struct{}, 1),
	}
}

// save queues st. A pending save of the same schedule keeps the later tick.
func (p *persister) save(st store.TriggerState) {
	p.mu.Lock()
	old, ok := p.pending[st.Key()]
	if !ok || old.drop || old.state.Schedule != st.Schedule || old.state.Timezone != st.Timezone || st.LastTick.After(old.state.LastTick) {
		p.pending[st.Key()] = stateOp{state: st}
	}
	p.mu.Unlock()
	p.signal()
}

// drop queues the deletion of key's state.
func (p *persister) drop(key store.TriggerKey) {
	p.mu.Lock()
	p.pending[key] = stateOp{state: store.TriggerState{Task: key.Task, TriggerIndex: key.TriggerIndex}, drop: true}
	p.mu.Unlock()
	p.signal()
}

// reading is called before the stored trigger states are read, and
// returns the mark that unsaved and doneReading take for that read.
func (p *persister) reading() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readers[p.written]++
	return p.written
}

// doneReading ends the read of mark: the batches written since it began
// are forgotten once no earlier read is in progress.
func (p *persister) doneReading(mark uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.readers[mark]--; p.readers[mark] <= 0 {
		delete(p.readers, mark)
	}
	if len(p.readers) == 0 {
		clear(p.recent)
		p.recent = p.recent[:0]
		return
	}
	earliest := uint64(math.MaxUint64)
	for m := range p.readers {
		earliest = min(earliest, m)
	}
	n := 0
	for n < len(p.recent) && p.recent[n].written <= earliest {
		n++
	}
	p.recent = slices.Delete(p.recent, 0, n)
}

// unsaved returns the state of key that this service saved and that the
// stored states read since mark (see reading) may lack: one not yet
// written, being written, or written after the read began. The states
// read and unsaved's together are the latest: a trigger replanned from
// them never fires a tick again that this service fired.
func (p *persister) unsaved(key store.TriggerKey, mark uint64) (store.TriggerState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op, ok := p.pending[key]
	if !ok {
		op, ok = p.writing[key]
	}
	for i := len(p.recent) - 1; !ok && i >= 0 && p.recent[i].written > mark; i-- {
		op, ok = p.recent[i].ops[key]
	}
	return op.state, ok && !op.drop
}

func (p *persister) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run writes what is queued until stop ends, then writes what is left on
// work (which outlives stop by the shutdown timeout). A failed write is
// logged and tried again after retryDelay.
func (p *persister) run(stop, work context.Context) {
	for {
		select {
		case <-stop.Done():
			if err := p.flush(work); err != nil {
				p.log.Error().Err(err).Msg("trigger state not saved at shutdown; the ticks since the last save count as missed at the next start")
			}
			return
		case <-p.wake:
		}
		if err := p.flush(work); err != nil {
			p.log.Error().Err(err).Msg("saving trigger state failed; trying again")
			t := time.NewTimer(retryDelay) // the database recovers in real time
			select {
			case <-stop.Done():
			case <-t.C:
			}
			t.Stop()
			p.signal()
		}
	}
}

// flush writes every pending operation. On failure the operations go back
// to the queue, behind any newer ones.
func (p *persister) flush(ctx context.Context) error {
	if err := p.flushDecisions(func(ds []store.Decision) error { return p.store.RecordDecisions(ctx, ds) }); err != nil {
		return err
	}
	p.mu.Lock()
	batch := p.pending
	if len(batch) == 0 {
		p.mu.Unlock()
		return nil
	}
	p.pending, p.writing = make(map[store.TriggerKey]stateOp), batch
	p.mu.Unlock()
	var (
		saves []store.TriggerState
		drops []store.TriggerKey
	)
	for key, op := range batch {
		if op.drop {
			drops = append(drops, key)
		} else {
			saves = append(saves, op.state)
		}
	}
	err := p.store.DeleteTriggerStates(ctx, drops)
	if err == nil {
		err = p.store.SaveTriggerStates(ctx, saves)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writing = nil
	if err != nil {
		for key, op := range batch {
			if _, newer := p.pending[key]; !newer {
				p.pending[key] = op
			}
		}
		return err
	}
	p.written++
	if len(p.readers) > 0 {
		p.recent = append(p.recent, writtenBatch{written: p.written, ops: batch})
	}
	return nil
}
