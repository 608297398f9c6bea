package dispatcher

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// A delayed firing (run_at or delay) travels as a one-shot JetStream message
// schedule that the server publishes to ax.trigger.<task> at its time — no
// service polls for due work. The server publishes a schedule 0–250 ms after
// its time (its scheduling timer runs at most every 250 ms), too coarse for
// the bar of p99 ≤ 100 ms, so a schedule is set scheduleLead before the due
// time, and the dispatcher holds the firing that arrives early, un-acked, in
// memory until its run_at: an instance is never created before its time.
const (
	// holdWindow is how far ahead of its run_at a firing is held in memory;
	// one due later is re-published as a schedule. It must exceed
	// scheduleLead with room for a late schedule and a slow batch.
	holdWindow = 2 * time.Second
	// scheduleLead is how early a schedule publishes a delayed firing.
	scheduleLead = 500 * time.Millisecond
	// holdBatches is how many batches of held firings may be in flight at once.
	holdBatches = 4
)

// holder keeps the firings that are due within holdWindow until their time.
// It is safe for concurrent use.
type holder struct {
	mu     sync.Mutex
	queue  firingQueue
	closed bool
	// wake tells the hold loop that an earlier firing may have arrived.
	wake chan struct{}
}

func newHolder() *holder { return &holder{wake: make(chan struct{}, 1)} }

// add holds f until its due time. Once the holder is closed (the
// dispatcher stops), f is returned to JetStream for redelivery instead.
func (h *holder) add(f firing) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = f.msg.Nak()
		return
	}
	heap.Push(&h.queue, f)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// next returns the earliest due time held; ok is false when none is.
func (h *holder) next() (due time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return time.Time{}, false
	}
	return h.queue[0].due(), true
}

// popDue removes and returns the firings due at or before t.
func (h *holder) popDue(t time.Time) []firing {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []firing
	for len(h.queue) > 0 && !h.queue[0].due().After(t) {
		out = append(out, heap.Pop(&h.queue).(firing))
	}
	return out
}

// close returns every firing held to JetStream for redelivery (to another
// dispatcher, which holds it in turn) and makes add refuse new ones.
func (h *holder) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, f := range h.queue {
		_ = f.msg.Nak()
	}
	h.queue = nil
}

// holdLoop fires the held firings at their due time, those due together in
// one batch, until ctx ends; batches run on work, up to holdBatches at once,
// so that one slow batch (a commit waiting on the disk) does not hold up the
// firings due after it. A timer wakes it for the earliest firing: it never
// fires one before its run_at by the dispatcher's clock (NowFunc). It
// returns once its batches have finished.
func (it *intake) holdLoop(ctx, work context.Context) error {
	defer it.held.close()
	var batches sync.WaitGroup
	defer batches.Wait()
	slots := make(chan struct{}, holdBatches)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		now := it.now()
		if next, ok := it.held.next(); ok && !next.After(now) {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			// Everything due by now, also what fell due while all slots were busy.
			due := it.held.popDue(it.now())
			it.log.Debug().Int("firings", len(due)).Msg("held firings due")
			batches.Go(func() {
				defer func() { <-slots }()
				if rest := it.fire(work, due, nil); rest != nil {
					rest()
				}
			})
			continue
		}
		var ring <-chan time.Time
		if next, ok := it.held.next(); ok {
			timer.Reset(next.Sub(now))
			ring = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-it.held.wake:
		case <-ring:
		}
		timer.Stop()
	}
}

// firingQueue is a min-heap of firings by due time.
type firingQueue []firing

func (q firingQueue) Len() int           { return len(q) }
func (q firingQueue) Less(i, j int) bool { return q[i].due().Before(q[j].due()) }
func (q firingQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *firingQueue) Push(x any)        { *q = append(*q, x.(firing)) }
func (q *firingQueue) Pop() any {
	old := *q
	n := len(old)
	f := old[n-1]
	old[n-1] = firing{}
	*q = old[:n-1]
	return f
}
