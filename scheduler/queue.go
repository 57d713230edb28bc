package scheduler

import (
	"cmp"
	"math"
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
	// queuedMs counts every task by the millisecond it was queued in: a
	// value per distinct millisecond instead of a pointer per task, since
	// all it answers is the oldest (to a millisecond, the gauge's unit).
	queuedMs *btree.BTreeG[queuedCount]
	bases    map[int]int // tasks in ready by base priority
	clock    int64       // the now of the last Head (ns)
}

// queuedCount is how many held tasks were queued in millisecond ms.
type queuedCount struct {
	ms int64
	n  int
}

func lessQueuedCount(a, b queuedCount) bool { return a.ms < b.ms }

func queuedMsOf(e *queueEntry) int64 { return floorDiv(e.queuedAt, int64(time.Millisecond)) }

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
		queuedMs: btree.NewG(32, lessQueuedCount),
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

// Len is how many tasks the queue holds, backing-off ones included.
func (q *Queue) Len() int { return q.byID.Len() }

// Has reports whether the queue holds the task.
func (q *Queue) Has(id string) bool { return q.byID.Get(id) != nil }

// Ref returns the Ref of the task with id as it was put, and whether
// the queue holds the task.
func (q *Queue) Ref(id string) (any, bool) {
	if e := q.byID.Get(id); e != nil {
		return e.ref, true
	}
	return nil, false
}

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
	c, _ := q.queuedMs.Get(queuedCount{ms: queuedMsOf(e)})
	q.queuedMs.ReplaceOrInsert(queuedCount{ms: queuedMsOf(e), n: c.n + 1})
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
	if c, _ := q.queuedMs.Get(queuedCount{ms: queuedMsOf(e)}); c.n > 1 {
		q.queuedMs.ReplaceOrInsert(queuedCount{ms: c.ms, n: c.n - 1})
	} else {
		q.queuedMs.Delete(c)
	}
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

// OldestQueuedAt is the start of the millisecond holding the earliest
// QueuedAt among the tasks held (zero if the queue is empty): a wait
// worked out from it is never shorter than the oldest task's, and longer
// by less than a millisecond.
func (q *Queue) OldestQueuedAt() time.Time {
	c, ok := q.queuedMs.Min()
	if !ok {
		return time.Time{}
	}
	return time.UnixMilli(c.ms).UTC()
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
