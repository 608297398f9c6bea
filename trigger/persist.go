package trigger

import (
	"context"
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
	wake    chan struct{}
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

// unsaved returns the state of key saved but not yet written.
func (p *persister) unsaved(key store.TriggerKey) (store.TriggerState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op, ok := p.pending[key]
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
	p.mu.Lock()
	batch := p.pending
	p.pending = make(map[store.TriggerKey]stateOp)
	p.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
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
	if err != nil {
		p.mu.Lock()
		for key, op := range batch {
			if _, newer := p.pending[key]; !newer {
				p.pending[key] = op
			}
		}
		p.mu.Unlock()
		return err
	}
	return nil
}
