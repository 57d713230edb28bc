package scheduler

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/google/btree"

	"herd/internal/idtable"
)

// Queue keeps a backlog indexed for queue order, so that the head of a
// deep backlog costs what is taken from it, not a pass over all of it.
// Its head is exactly Order's prefix over the tasks it holds. The leader
// keeps one up to date from the changes to the pending set instead of
// re-reading every pending task on each scheduling pass.
//
// The index rests on aging on a clock grid (see QueueConfig): tasks of
// one base priority (priority less the failure penalty) queued in one
// grid interval always share an effective priority, so the tasks are
// kept ordered by (base, interval, submitter, submission) and a level of
// effective priority is a handful of ranges of that order. Tasks still
// backing off wait in a second index by the time they become due.
//
// A Queue is not safe for concurrent use.
type Queue struct {
	cfg     QueueConfig
	byID    *idtable.Table[queueEntry]
	subs    submitters
	ready   *btree.BTreeG[*queueEntry] // by (base, bucket, submitter, seq, id)
	delayed *btree.BTreeG[*queueEntry] // not yet due at clock: by (notBefore, id)
	// released holds the ready tasks that have a NotBefore, so that a
	// clock that steps back can put them back to waiting.
	released *btree.BTreeG[*queueEntry] // by (notBefore, id)
	byQueued *btree.BTreeG[*queueEntry] // every task, by (queuedAt, id)
	bases    map[int]int                // tasks in ready by base priority
	clock    int64                      // the now of the last Head (ns)
}

// queueEntry is one task as the queue keeps it: what ordering needs, in
// 64 bytes (a leader holds one per pending task). Its base priority and
// grid interval are worked out from it when compared rather than kept.
type queueEntry struct {
	id        string
	ref       any
	seq       uint64
	queuedAt  int64  // ns
	notBefore int64  // ns; 0: none
	sub       uint32 // the submitter, numbered by the queue (see submitters)
	priority  int16  // clamped to 0..MaxQueuePriority
	failures  int16  // clamped likewise
}

// MaxQueuePriority bounds the priorities and failure counts a Queue keeps
// apart (larger ones are kept as this); the FSM allows 0..100.
const MaxQueuePriority = math.MaxInt16

func clampPriority(v int) int16 { return int16(min(max(v, 0), MaxQueuePriority)) }

// task rebuilds the QueuedTask the entry was made from.
func (q *Queue) task(e *queueEntry) QueuedTask {
	t := QueuedTask{
		ID: e.id, Submitter: q.subs.name(e.sub), Seq: e.seq, Priority: int(e.priority), Failures: int(e.failures),
		QueuedAt: time.Unix(0, e.queuedAt).UTC(), Ref: e.ref,
	}
	if e.notBefore != 0 {
		t.NotBefore = time.Unix(0, e.notBefore).UTC()
	}
	return t
}

// base is the entry's priority before aging.
func (q *Queue) base(e *queueEntry) int {
	return basePriority(int(e.priority), int(e.failures), &q.cfg)
}

// bucket is the grid interval the entry was queued in.
func (q *Queue) bucket(e *queueEntry) int64 { return agingBucket(e.queuedAt, &q.cfg) }

// probe is a search key in the ready order: the first place a task of
// base priority base, queued in interval bucket, of submitter sub with
// Seq seq (and the smallest id) would take.
func (q *Queue) probe(base int, bucket int64, sub uint32, seq uint64) *queueEntry {
	return &queueEntry{priority: clampPriority(base), queuedAt: bucketStart(bucket, &q.cfg), sub: sub, seq: seq}
}

// bucketStart is the first time in grid interval b (so that agingBucket
// gives b back); an interval beyond the clock's range gives its end.
func bucketStart(b int64, cfg *QueueConfig) int64 {
	if cfg.AgingInterval <= 0 || cfg.AgingCap <= 0 {
		return 0
	}
	iv := int64(cfg.AgingInterval)
	switch {
	case b <= floorDiv(math.MinInt64, iv):
		return math.MinInt64
	case b > floorDiv(math.MaxInt64, iv):
		return math.MaxInt64
	}
	return b * iv
}

// submitters numbers the submitters of the queued tasks: an entry keeps
// four bytes instead of a string, and a number is given back once its
// submitter has no task left, so the table stays as small as the set of
// submitters waiting.
type submitters struct {
	byName map[string]uint32
	names  []string
	counts []int
	free   []uint32
}

func (s *submitters) add(name string) uint32 {
	if id, ok := s.byName[name]; ok {
		s.counts[id]++
		return id
	}
	var id uint32
	if n := len(s.free); n > 0 {
		id, s.free = s.free[n-1], s.free[:n-1]
		s.names[id], s.counts[id] = name, 1
	} else {
		id = uint32(len(s.names))
		s.names, s.counts = append(s.names, name), append(s.counts, 1)
	}
	if s.byName == nil {
		s.byName = map[string]uint32{}
	}
	s.byName[name] = id
	return id
}

func (s *submitters) drop(id uint32) {
	if s.counts[id]--; s.counts[id] == 0 {
		delete(s.byName, s.names[id])
		s.names[id] = ""
		s.free = append(s.free, id)
	}
}

func (s *submitters) name(id uint32) string { return s.names[id] }

// compareEntrySeq orders by submission, then id (as compareSeq).
func compareEntrySeq(a, b *queueEntry) int {
	if c := cmp.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// NewQueue returns an empty queue ordering by cfg.
func NewQueue(cfg QueueConfig) *Queue {
	q := &Queue{
		cfg:      cfg,
		byID:     idtable.New(func(e *queueEntry) string { return e.id }),
		delayed:  btree.NewG(32, lessNotBefore),
		released: btree.NewG(32, lessNotBefore),
		byQueued: btree.NewG(32, lessQueued),
		bases:    map[int]int{},
		clock:    math.MinInt64,
	}
	q.ready = btree.NewG(32, q.lessReady)
	return q
}

func (q *Queue) lessReady(a, b *queueEntry) bool {
	if ba, bb := q.base(a), q.base(b); ba != bb {
		return ba < bb
	}
	if ba, bb := q.bucket(a), q.bucket(b); ba != bb {
		return ba < bb
	}
	if a.sub != b.sub {
		return a.sub < b.sub
	}
	return compareEntrySeq(a, b) < 0
}

func lessNotBefore(a, b *queueEntry) bool {
	if a.notBefore != b.notBefore {
		return a.notBefore < b.notBefore
	}
	return a.id < b.id
}

func lessQueued(a, b *queueEntry) bool {
	if a.queuedAt != b.queuedAt {
		return a.queuedAt < b.queuedAt
	}
	return a.id < b.id
}

// Len is how many tasks the queue holds, backing-off ones included.
func (q *Queue) Len() int { return q.byID.Len() }

// Has reports whether the queue holds the task.
func (q *Queue) Has(id string) bool { return q.byID.Get(id) != nil }

// Put adds a task, or replaces the one with its ID.
func (q *Queue) Put(t QueuedTask) {
	q.Remove(t.ID)
	e := &queueEntry{
		id: t.ID, sub: q.subs.add(t.Submitter), seq: t.Seq, queuedAt: t.QueuedAt.UnixNano(),
		priority: clampPriority(t.Priority), failures: clampPriority(t.Failures), ref: t.Ref,
	}
	if !t.NotBefore.IsZero() {
		e.notBefore = t.NotBefore.UnixNano()
	}
	q.byID.Put(e)
	q.byQueued.ReplaceOrInsert(e)
	if e.notBefore != 0 && e.notBefore > q.clock {
		q.delayed.ReplaceOrInsert(e)
		return
	}
	q.makeReady(e)
}

// Remove drops a task; it reports whether the queue held it.
func (q *Queue) Remove(id string) bool {
	e := q.byID.Delete(id)
	if e == nil {
		return false
	}
	q.subs.drop(e.sub)
	q.byQueued.Delete(e)
	if _, waiting := q.delayed.Delete(e); !waiting {
		q.unready(e)
	}
	return true
}

func (q *Queue) makeReady(e *queueEntry) {
	q.ready.ReplaceOrInsert(e)
	q.bases[q.base(e)]++
	if e.notBefore != 0 {
		q.released.ReplaceOrInsert(e)
	}
}

func (q *Queue) unready(e *queueEntry) {
	q.ready.Delete(e)
	if b := q.base(e); q.bases[b] <= 1 {
		delete(q.bases, b)
	} else {
		q.bases[b]--
	}
	if e.notBefore != 0 {
		q.released.Delete(e)
	}
}

// advance moves tasks between waiting and ready for the clock at nowNs:
// only those due between the previous clock and this one change.
func (q *Queue) advance(nowNs int64) {
	var moved []*queueEntry
	if nowNs >= q.clock {
		q.delayed.Ascend(func(e *queueEntry) bool {
			if e.notBefore > nowNs {
				return false
			}
			moved = append(moved, e)
			return true
		})
		for _, e := range moved {
			q.delayed.Delete(e)
			q.makeReady(e)
		}
	} else {
		q.released.AscendGreaterOrEqual(&queueEntry{notBefore: nowNs + 1}, func(e *queueEntry) bool {
			moved = append(moved, e)
			return true
		})
		for _, e := range moved {
			q.unready(e)
			q.delayed.ReplaceOrInsert(e)
		}
	}
	q.clock = nowNs
}

// NextDue is when the earliest task still backing off at the last Iter
// (or Head) becomes due (zero if none is).
func (q *Queue) NextDue() time.Time {
	e, ok := q.delayed.Min()
	if !ok {
		return time.Time{}
	}
	return q.task(e).NotBefore
}

// OldestQueuedAt is the earliest QueuedAt among the tasks held (zero if
// the queue is empty).
func (q *Queue) OldestQueuedAt() time.Time {
	e, ok := q.byQueued.Min()
	if !ok {
		return time.Time{}
	}
	return q.task(e).QueuedAt
}

// Head returns the first k tasks of Order over the queue's tasks at now
// (all of them when k exceeds the schedulable ones). Its cost grows with
// k and with the number of (base priority, grid interval, submitter)
// ranges it opens, not with the backlog.
func (q *Queue) Head(now time.Time, k int) []QueuedTask {
	if k <= 0 {
		return nil
	}
	it := q.Iter(now)
	out := make([]QueuedTask, 0, min(k, q.ready.Len()))
	for len(out) < k {
		t, ok := it.Next()
		if !ok {
			break
		}
		out = append(out, t)
	}
	return out
}

// QueueIter yields the schedulable tasks in Order's order, computing only
// as far as it is read. It is valid until the queue next changes.
type QueueIter struct{ it *queueIter }

// Iter starts reading the queue in order at now; tasks backing off until
// after now are left out.
func (q *Queue) Iter(now time.Time) *QueueIter {
	q.advance(now.UnixNano())
	return &QueueIter{it: q.newIter(now)}
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
	bases []baseCursor   // one per base priority present
	subs  []*mergeCursor // the current level's submitters still holding tasks
	round []*queueEntry  // the current turn, in submission order, not yet yielded
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
