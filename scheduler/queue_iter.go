package scheduler

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// QueueIter yields the schedulable tasks in Order's order, computing only
// as far as it is read. It is valid until the queue next changes.
type QueueIter struct{ it *queueIter }

// Iter starts reading the queue in order at now; tasks backing off until
// after now are left out.
func (q *Queue) Iter(now time.Time) *QueueIter {
	q.advance(now.UnixNano())
	return &QueueIter{it: q.newIter(now)}
}

// Skip leaves the submitter's remaining tasks out of this reading. The
// other submitters' tasks keep their order (a submitter's turns depend on
// its own tasks only), and the skipped ones cost a seek per range of the
// index instead of a step per task: a reader that knows it can use none
// of a deep backlog's tasks passes it whole.
func (i *QueueIter) Skip(submitter string) {
	it := i.it
	id, ok := it.q.subs.byName[submitter]
	if !ok {
		return
	}
	if it.skip == nil {
		it.skip = map[uint32]bool{}
	}
	it.skip[id] = true
	it.subs = slices.DeleteFunc(it.subs, func(m *mergeCursor) bool { return m.sub == id })
	it.round = slices.DeleteFunc(it.round, func(e *queueEntry) bool { return e.sub == id })
}

// Next returns the next task, or false when none is left.
func (i *QueueIter) Next() (QueuedTask, bool) {
	e := i.it.next()
	if e == nil {
		return QueuedTask{}, false
	}
	return i.it.q.task(e), true
}

// queueIter yields ready tasks in queue order, one level of effective
// priority at a time; within a level, submitters take turns.
type queueIter struct {
	q     *Queue
	tick  int64
	bases []baseCursor    // one per base priority present
	subs  []*mergeCursor  // the current level's submitters still holding tasks
	round []*queueEntry   // the current turn, in submission order, not yet yielded
	skip  map[uint32]bool // submitters left out (see Skip)
}

// baseCursor walks one base priority's grid intervals from the oldest
// (highest effective priority) on; group is the next run of intervals
// sharing one effective priority.
type baseCursor struct {
	base     int
	lo, hi   int64 // the group's intervals, inclusive
	eff      int
	done     bool
	nextFrom int64 // the first interval after the group
}

func (q *Queue) newIter(now time.Time) *queueIter {
	it := &queueIter{q: q, tick: agingTick(now.UnixNano(), &q.cfg)}
	for b := range q.bases {
		c := baseCursor{base: b, nextFrom: math.MinInt64}
		it.nextGroup(&c)
		if !c.done {
			it.bases = append(it.bases, c)
		}
	}
	// Map order must not leak into the result: fix the cursors' order.
	slices.SortFunc(it.bases, func(a, b baseCursor) int { return cmp.Compare(a.base, b.base) })
	return it
}

// nextGroup moves c to its next group of intervals: from the first
// present interval at or after c.nextFrom, as far as the effective
// priority stays the same (everything aged to the cap, or everything
// not aged at all, is one group).
func (it *queueIter) nextGroup(c *baseCursor) {
	if c.nextFrom == math.MaxInt64 { // the last group was open-ended
		c.done = true
		return
	}
	first, ok := it.firstAtOrAfter(c.base, c.nextFrom)
	if !ok {
		c.done = true
		return
	}
	cfg := &it.q.cfg
	c.lo = first
	c.eff = c.base + agingPoints(first, it.tick, cfg)
	switch {
	case cfg.AgingInterval <= 0 || cfg.AgingCap <= 0 || first >= it.tick:
		c.hi = math.MaxInt64 // not aged: every later interval too
	case it.tick-first >= int64(cfg.AgingCap):
		c.hi = it.tick - int64(cfg.AgingCap) // aged to the cap
	default:
		c.hi = first
	}
	if c.hi == math.MaxInt64 {
		c.nextFrom = math.MaxInt64
	} else {
		c.nextFrom = c.hi + 1
	}
}

// firstAtOrAfter is the first interval at or after from that holds a
// ready task of base priority base.
func (it *queueIter) firstAtOrAfter(base int, from int64) (int64, bool) {
	var found *queueEntry
	it.q.ready.AscendGreaterOrEqual(it.q.probe(base, from, 0, 0), func(e *queueEntry) bool {
		found = e
		return false
	})
	if found == nil || it.q.base(found) != base {
		return 0, false
	}
	return it.q.bucket(found), true
}

func (it *queueIter) next() *queueEntry {
	for {
		if len(it.round) > 0 {
			e := it.round[0]
			it.round = it.round[1:]
			return e
		}
		if len(it.subs) > 0 {
			it.nextRound()
			continue
		}
		if !it.nextLevel() {
			return nil
		}
	}
}

// nextRound takes each remaining submitter's next task at this level, in
// submission order: one turn of the round-robin.
func (it *queueIter) nextRound() {
	keep := it.subs[:0]
	for _, s := range it.subs {
		it.round = append(it.round, s.pop())
		if !s.empty() {
			keep = append(keep, s)
		}
	}
	clear(it.subs[len(keep):])
	it.subs = keep
	slices.SortFunc(it.round, func(a, b *queueEntry) int { return compareEntrySeq(a, b) })
}

// nextLevel opens the highest effective priority left: every base's
// group at that priority, split into its submitters' ranges.
func (it *queueIter) nextLevel() bool {
	top := -1
	for i := range it.bases {
		if !it.bases[i].done {
			top = max(top, it.bases[i].eff)
		}
	}
	if top < 0 {
		return false
	}
	bySub := map[uint32]*mergeCursor{}
	for i := range it.bases {
		c := &it.bases[i]
		if c.done || c.eff != top {
			continue
		}
		it.openRanges(c.base, c.lo, c.hi, bySub)
		it.nextGroup(c)
	}
	for _, m := range bySub {
		it.subs = append(it.subs, m)
	}
	// A fixed order (the turn is sorted anyway, but keep it reproducible).
	slices.SortFunc(it.subs, func(a, b *mergeCursor) int { return cmp.Compare(a.sub, b.sub) })
	return true
}

// openRanges adds a cursor for every (interval, submitter) range of base
// within [lo, hi]. It walks the ranges in one pass, buffering the first
// tasks of each, and seeks past a range only when it is long.
func (it *queueIter) openRanges(base int, lo, hi int64, bySub map[uint32]*mergeCursor) {
	q := it.q
	pivot := q.probe(base, lo, 0, 0)
	for pivot != nil {
		var r *rangeCursor
		next := pivot
		pivot = nil
		q.ready.AscendGreaterOrEqual(next, func(e *queueEntry) bool {
			if q.base(e) != base || q.bucket(e) > hi {
				return false
			}
			if it.skip[e.sub] {
				// A skipped submitter's range: seek past it.
				pivot = q.probe(base, q.bucket(e), e.sub, math.MaxUint64)
				return false
			}
			if r == nil || !q.sameRange(r.buf[0], e) {
				r = &rangeCursor{q: q, buf: make([]*queueEntry, 0, 4)}
				m := bySub[e.sub]
				if m == nil {
					m = &mergeCursor{sub: e.sub}
					bySub[e.sub] = m
				}
				r.buf = append(r.buf, e)
				m.push(r)
				return true
			}
			if len(r.buf) == rangeBuffer {
				// A long range: its cursor reads on by itself; seek past
				// it (no task has the largest Seq).
				r.more = true
				pivot = q.probe(base, q.bucket(e), e.sub, math.MaxUint64)
				return false
			}
			r.buf = append(r.buf, e)
			return true
		})
	}
}

// rangeBuffer is how many tasks of a range a cursor reads at a time.
const rangeBuffer = 16

func (q *Queue) sameRange(a, b *queueEntry) bool {
	return a.sub == b.sub && q.base(a) == q.base(b) && q.bucket(a) == q.bucket(b)
}

// rangeCursor walks one (base, interval, submitter) range in submission
// order, rangeBuffer tasks per read of the tree.
type rangeCursor struct {
	q    *Queue
	buf  []*queueEntry
	pos  int
	more bool // the range may go on past buf
}

func (r *rangeCursor) head() *queueEntry { return r.buf[r.pos] }

// pop takes the current task; it reports whether the range has more.
func (r *rangeCursor) pop() (*queueEntry, bool) {
	e := r.buf[r.pos]
	r.pos++
	if r.pos < len(r.buf) {
		return e, true
	}
	if !r.more {
		return e, false
	}
	last := r.buf[len(r.buf)-1]
	r.buf, r.pos, r.more = r.buf[:0], 0, false
	r.q.ready.AscendGreaterOrEqual(last, func(x *queueEntry) bool {
		if x == last {
			return true
		}
		if !r.q.sameRange(last, x) {
			return false
		}
		if len(r.buf) == rangeBuffer {
			r.more = true
			return false
		}
		r.buf = append(r.buf, x)
		return true
	})
	return e, len(r.buf) > 0
}

// mergeCursor merges one submitter's ranges at a level into submission
// order (a min-heap on each range's current task).
type mergeCursor struct {
	sub  uint32
	heap []*rangeCursor
}

func (m *mergeCursor) empty() bool { return len(m.heap) == 0 }

func (m *mergeCursor) less(i, j int) bool {
	return compareEntrySeq(m.heap[i].head(), m.heap[j].head()) < 0
}

func (m *mergeCursor) push(r *rangeCursor) {
	m.heap = append(m.heap, r)
	for i := len(m.heap) - 1; i > 0; {
		p := (i - 1) / 2
		if !m.less(i, p) {
			break
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
}

func (m *mergeCursor) pop() *queueEntry {
	e, more := m.heap[0].pop()
	if !more {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap[last] = nil
		m.heap = m.heap[:last]
	}
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(m.heap) && m.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(m.heap) && m.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		m.heap[i], m.heap[small] = m.heap[small], m.heap[i]
		i = small
	}
	return e
}
