package trigger

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/ax-scheduler/ax/schemas"
	"github.com/ax-scheduler/ax/schemas/taskdef"
)

// task is a task with cron triggers in the heap. Its name is the one string
// of the task's name the service keeps: the map key and every entry share it.
type task struct {
	name    string
	entries []*entry
}

// entry is one cron trigger of an enabled task. It is kept small (24
// bytes) because there is one per cron trigger; its next tick lives in the
// heap's array, where comparing two needs no pointer.
type entry struct {
	task  *task
	sched *schedule
	// index is the entry's position in the heap, -1 when out of it.
	index int32
	// trigger is the trigger's index in the task's triggers (at most 32).
	trigger    uint8
	misfire    misfire
	maxCatchUp uint16
}

// never is the next tick of a trigger that has none within five years: it
// stays at the bottom of the heap until its task changes.
const never = math.MaxInt64

// misfire is a [schemas.Misfire] in a byte.
type misfire uint8

const (
	misfireSkip misfire = iota
	misfireFireOnce
	misfireCatchUp
)

func toMisfire(m schemas.Misfire) misfire {
	switch m {
	case schemas.MisfireFireOnce:
		return misfireFireOnce
	case schemas.MisfireCatchUp:
		return misfireCatchUp
	}
	return misfireSkip
}

func (m misfire) String() string {
	switch m {
	case misfireFireOnce:
		return string(schemas.MisfireFireOnce)
	case misfireCatchUp:
		return string(schemas.MisfireCatchUp)
	}
	return string(schemas.MisfireSkip)
}

// keep is how many of the latest missed ticks the policy fires.
func (e *entry) keep() int {
	switch e.misfire {
	case misfireFireOnce:
		return 1
	case misfireCatchUp:
		return int(e.maxCatchUp)
	}
	return 0
}

// item is a node of the heap: an entry and its next tick, in Unix nanoseconds.
type item struct {
	next int64
	e    *entry
}

// tickHeap is a min-heap of cron triggers by next tick, for container/heap.
type tickHeap []item

func (h tickHeap) Len() int           { return len(h) }
func (h tickHeap) Less(i, j int) bool { return h[i].next < h[j].next }
func (h tickHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].e.index, h[j].e.index = int32(i), int32(j)
}

func (h *tickHeap) Push(x any) {
	it := x.(item)
	it.e.index = int32(len(*h))
	*h = append(*h, it)
}

func (h *tickHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = item{}
	*h = old[:len(old)-1]
	it.e.index = -1
	return it
}

// due appends to buf the items whose tick is at or before now, earliest
// first, up to limit of them (0: all). They form a subtree at the root (a
// node's children tick no earlier than it), so finding them reads k items,
// not the whole heap.
func (h tickHeap) due(now int64, buf []item, limit int) []item {
	if len(h) == 0 || h[0].next > now {
		return buf
	}
	start := len(buf)
	buf = append(buf, h[0])
	stack := []int{0}
	for len(stack) > 0 && (limit == 0 || len(buf)-start < limit) {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) && h[c].next <= now {
				buf = append(buf, h[c])
				stack = append(stack, c)
			}
		}
	}
	if limit > 0 && len(buf)-start > limit {
		buf = buf[:start+limit]
	}
	slices.SortFunc(buf[start:], func(a, b item) int { return cmp.Compare(a.next, b.next) })
	return buf
}

// schedule is a parsed schedule shared by every trigger with the same
// expression and zone: the heap holds each distinct schedule once.
type schedule struct {
	*taskdef.CronSchedule
	key  string
	zone string
	// every is the period of an "@every" schedule in nanoseconds, else 0.
	every int64
	refs  int
}

func scheduleKey(tr schemas.Trigger) string { return tr.Timezone + "\x00" + tr.Schedule }

// next returns the first tick after t, in Unix nanoseconds, or never when
// there is none within five years.
func (s *schedule) next(t int64) int64 {
	if s.every > 0 {
		k := t / s.every
		if t < 0 && t%s.every != 0 {
			k--
		}
		return (k + 1) * s.every
	}
	n := s.Next(time.Unix(0, t))
	if n.IsZero() {
		return never
	}
	return n.UnixNano()
}

// acquire returns the shared schedule of tr, parsing it on first use.
func (s *Service) acquire(tr schemas.Trigger) (*schedule, error) {
	key := scheduleKey(tr)
	if sc, ok := s.schedules[key]; ok {
		sc.refs++
		return sc, nil
	}
	cs, err := taskdef.ParseCronSchedule(tr.Schedule, tr.Timezone)
	if err != nil {
		return nil, err
	}
	sc := &schedule{CronSchedule: cs, key: key, zone: tr.Timezone, every: int64(cs.Every()), refs: 1}
	s.schedules[key] = sc
	return sc, nil
}

// release drops a reference to sc and forgets it after the last one.
func (s *Service) release(sc *schedule) {
	sc.refs--
	if sc.refs == 0 {
		delete(s.schedules, sc.key)
	}
}
