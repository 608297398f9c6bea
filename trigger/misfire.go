package trigger

// scanLimit is how many missed ticks of one trigger are counted one by one;
// past it the count is estimated and the latest ticks are found by looking
// back from the cutoff, so that a per-second trigger down for a month costs
// no more than one down for twenty minutes.
const scanLimit = 1000

// missed summarizes the ticks a trigger missed.
type missed struct {
	// count is how many ticks were missed; an estimate when !exact.
	count int64
	exact bool
	// first and last are the oldest and the latest missed tick.
	first, last int64
	// tail holds the latest missed ticks, oldest first: up to keep+1 of them.
	tail []int64
}

// collectMissed walks the ticks of sc from first (a tick at or before
// cutoff) up to cutoff, keeping the latest keep+1 of them, and returns them
// with the first tick after cutoff (never when there is none).
func collectMissed(sc *schedule, first, cutoff int64, keep int) (missed, int64) {
	size := keep + 1
	if sc.every > 0 {
		n := (cutoff-first)/sc.every + 1
		last := first + (n-1)*sc.every
		m := missed{count: n, exact: true, first: first, last: last}
		k := min(n, int64(size))
		for i := k - 1; i >= 0; i-- {
			m.tail = append(m.tail, last-i*sc.every)
		}
		return m, last + sc.every
	}

	r := newRing(size)
	m := missed{first: first, exact: true}
	t := first
	for t <= cutoff && m.count < scanLimit {
		r.push(t)
		m.count++
		m.last = t
		t = sc.next(t)
	}
	if t > cutoff {
		m.tail = r.slice()
		return m, t
	}

	// Too many to count: look back from the cutoff in windows that double
	// until one holds size ticks, or reaches back to the ticks counted.
	period := max((m.last-m.first)/(m.count-1), 1e9)
	span := period * int64(size+1)
	for {
		from := max(cutoff-span, m.last)
		if from == m.last {
			// The window meets the ticks counted: go on counting them.
			for t <= cutoff {
				r.push(t)
				m.count++
				m.last = t
				t = sc.next(t)
			}
			m.tail = r.slice()
			return m, t
		}
		tr := newRing(size)
		var n int64
		last := int64(0)
		u := sc.next(from)
		for u <= cutoff {
			tr.push(u)
			n++
			last = u
			u = sc.next(u)
		}
		if n >= int64(size) {
			m.count += (from-m.last)/period + n
			m.exact = false
			m.last = last
			m.tail = tr.slice()
			return m, u
		}
		span *= 2
	}
}

// ring keeps the latest pushed values, up to its size.
type ring struct {
	buf []int64
	n   int
}

func newRing(size int) *ring { return &ring{buf: make([]int64, size)} }

func (r *ring) push(v int64) {
	r.buf[r.n%len(r.buf)] = v
	r.n++
}

// slice returns the values kept, oldest first.
func (r *ring) slice() []int64 {
	if r.n <= len(r.buf) {
		return append([]int64(nil), r.buf[:r.n]...)
	}
	i := r.n % len(r.buf)
	return append(append([]int64(nil), r.buf[i:]...), r.buf[:i]...)
}

// decision is what a misfire policy makes of missed ticks.
type decision struct {
	// fire are the ticks to fire late, oldest first.
	fire []int64
	// skipped counts the ticks not fired: the oldest ones, from
	// firstSkipped to lastSkipped.
	skipped                   int64
	firstSkipped, lastSkipped int64
}

// decide applies e's misfire policy to m: skip fires none, fire_once the
// latest, catch_up the latest max_catch_up oldest first.
func decide(e *entry, m missed) decision {
	k := min(int64(e.keep()), m.count)
	d := decision{skipped: m.count - k}
	if k > 0 {
		d.fire = m.tail[len(m.tail)-int(k):]
	}
	if d.skipped > 0 {
		d.firstSkipped = m.first
		d.lastSkipped = m.last
		if k > 0 {
			d.lastSkipped = m.tail[len(m.tail)-int(k)-1]
		}
	}
	return d
}
