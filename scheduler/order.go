package scheduler

import (
	"cmp"
	"slices"
	"time"
)

// QueuedTask is a pending task as queue ordering sees it.
type QueuedTask struct {
	ID        string
	Priority  int // 0..100, higher first
	Submitter string
	QueuedAt  time.Time // when it (re)entered the queue
	Seq       uint64    // submission order (the Raft index that created it)
	Failures  int       // failed attempts so far
	NotBefore time.Time // retry backoff: not schedulable before this time
	// Ref is the caller's own value for the task, kept with it and handed
	// back as is (the leader keeps the task's record, so that a pass does
	// not look it up again).
	Ref any
}

// QueueConfig tunes queue order.
type QueueConfig struct {
	// AgingGrace is how long a task waits before aging starts; below it
	// the order is pure priority with round-robin between submitters.
	AgingGrace time.Duration
	// AgingInterval is the wait that earns one point of priority after the
	// grace period; AgingCap bounds the points. With a cap of at least the
	// priority range, any task eventually reaches the head: no starvation.
	// Points are counted on a fixed grid of the clock (multiples of
	// AgingInterval since the Unix epoch), so a task earns its first point
	// up to one interval early, and every task queued within one interval
	// ages in step: the order of tasks then changes only at grid ticks,
	// which is what lets Queue keep the backlog indexed.
	AgingInterval time.Duration
	AgingCap      int
	// FailurePenalty is the priority lost per failed attempt, so a task
	// that keeps failing cannot keep jumping the queue (docs/scheduling.md,
	// "Queue order").
	FailurePenalty int
}

// DefaultQueueConfig: aging after 2 minutes, +1 per 10 s up to +100
// (a priority-0 task outranks fresh priority-100 work after ~19 minutes),
// and -10 per failure.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{AgingGrace: 2 * time.Minute, AgingInterval: 10 * time.Second, AgingCap: 100, FailurePenalty: 10}
}

// EffectivePriority is the priority a task is ordered by at now.
func EffectivePriority(t *QueuedTask, now time.Time, cfg *QueueConfig) int {
	return effective(t, now.UnixNano(), cfg)
}

// effective is EffectivePriority on nanosecond clocks: the queue computes
// it for every pending task, and integer arithmetic on nanoseconds is
// several times cheaper than time.Time's.
func effective(t *QueuedTask, nowNs int64, cfg *QueueConfig) int {
	return basePriority(t.Priority, t.Failures, cfg) + agingPoints(agingBucket(t.QueuedAt.UnixNano(), cfg), agingTick(nowNs, cfg), cfg)
}

// basePriority is the priority before aging: less a penalty per failure,
// never below zero.
func basePriority(priority, failures int, cfg *QueueConfig) int {
	return max(priority-failures*cfg.FailurePenalty, 0)
}

// agingBucket is the grid interval a task was queued in (0 when aging is
// off).
func agingBucket(queuedAtNs int64, cfg *QueueConfig) int64 {
	if cfg.AgingInterval <= 0 || cfg.AgingCap <= 0 {
		return 0
	}
	return floorDiv(queuedAtNs, int64(cfg.AgingInterval))
}

// agingTick is the grid interval that now, less the grace, falls in: a
// task of bucket b has earned tick-b points (within 0..AgingCap).
func agingTick(nowNs int64, cfg *QueueConfig) int64 {
	if cfg.AgingInterval <= 0 || cfg.AgingCap <= 0 {
		return 0
	}
	return floorDiv(nowNs-int64(cfg.AgingGrace), int64(cfg.AgingInterval))
}

func agingPoints(bucket, tick int64, cfg *QueueConfig) int {
	return int(min(max(tick-bucket, 0), int64(cfg.AgingCap)))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// waiting reports a task still backing off at now.
func waiting(t *QueuedTask, nowNs int64) bool {
	return !t.NotBefore.IsZero() && nowNs < t.NotBefore.UnixNano()
}

// Order returns the schedulable tasks (NotBefore reached) in the order
// they should be placed: effective priority first; among equal effective
// priority, submitters take turns (each submitter's first task, then each
// one's second, …) so that no submitter monopolises the head; within a
// submitter, submission order (then id: the order is total). The input
// is not modified.
func Order(tasks []QueuedTask, now time.Time, cfg QueueConfig) []QueuedTask {
	// Sort compact keys, not tasks: submitters are interned to small ints
	// (only grouping by submitter matters, not their names' order), and a
	// task is touched again only to break a Seq tie by id.
	type keyed struct {
		seq     uint64
		idx     int32
		eff     int32
		sub     int32
		ordinal int32
	}
	subs := map[string]int32{}
	ks := make([]keyed, 0, len(tasks))
	nowNs := now.UnixNano()
	for i := range tasks {
		t := &tasks[i]
		if waiting(t, nowNs) {
			continue
		}
		sub, ok := subs[t.Submitter]
		if !ok {
			sub = int32(len(subs))
			subs[t.Submitter] = sub
		}
		ks = append(ks, keyed{seq: t.Seq, idx: int32(i), eff: int32(effective(t, nowNs, &cfg)), sub: sub})
	}
	bySeq := func(a, b keyed) int {
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return cmp.Compare(tasks[a.idx].ID, tasks[b.idx].ID)
	}
	// Number each submitter's tasks within an effective priority level.
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(b.eff, a.eff); c != 0 {
			return c
		}
		if c := cmp.Compare(a.sub, b.sub); c != 0 {
			return c
		}
		return bySeq(a, b)
	})
	for i := range ks {
		if i > 0 && ks[i].eff == ks[i-1].eff && ks[i].sub == ks[i-1].sub {
			ks[i].ordinal = ks[i-1].ordinal + 1
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(b.eff, a.eff); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ordinal, b.ordinal); c != 0 {
			return c
		}
		return bySeq(a, b)
	})
	out := make([]QueuedTask, len(ks))
	for i, k := range ks {
		out[i] = tasks[k.idx]
	}
	return out
}

// compareSeq orders by submission, then id: tasks submitted in one batch
// entry share a Seq, and the order must be total.
func compareSeq(a, b *QueuedTask) int {
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// Head returns the first k tasks of Order(tasks, now, cfg) without
// ordering the rest: a leader with a deep backlog places a few thousand
// tasks per pass and must not sort a hundred thousand to find them. It
// makes a few linear passes (effective priority per task, a count per
// level), fully orders only the levels above the one where the k-th task
// falls, and at that level takes just enough of each submitter's oldest
// tasks to fill the round-robin. The result equals Order's prefix.
func Head(tasks []QueuedTask, now time.Time, cfg QueueConfig, k int) []QueuedTask {
	if k <= 0 {
		return nil
	}
	effs := make([]int32, len(tasks))
	top := 0
	nowNs := now.UnixNano()
	for i := range tasks {
		t := &tasks[i]
		if waiting(t, nowNs) {
			effs[i] = -1
			continue
		}
		e := effective(t, nowNs, &cfg)
		effs[i] = int32(e)
		top = max(top, e)
	}
	if top > 1<<16 {
		out := Order(tasks, now, cfg) // absurd priorities: no level table
		return out[:min(k, len(out))]
	}
	counts := make([]int, top+1)
	for _, e := range effs {
		if e >= 0 {
			counts[e]++
		}
	}
	// The threshold level holds the k-th task; every level above it is
	// taken whole.
	threshold, above := -1, 0
	for lvl := top; lvl >= 0; lvl-- {
		if above+counts[lvl] >= k {
			threshold = lvl
			break
		}
		above += counts[lvl]
	}
	if threshold < 0 { // fewer than k schedulable: all of them
		return Order(tasks, now, cfg)
	}
	need := k - above

	// Above the threshold: ordered exactly as Order does.
	whole := make([]QueuedTask, 0, above)
	perSubmitter := map[string]int{} // tasks at the threshold, by submitter
	for i := range tasks {
		switch e := int(effs[i]); {
		case e > threshold:
			whole = append(whole, tasks[i])
		case e == threshold:
			perSubmitter[tasks[i].Submitter]++
		}
	}
	out := Order(whole, now, cfg)

	// At the threshold, the round-robin's first `need` tasks come from
	// each submitter's `rounds` oldest, where rounds is the fewest turns
	// that yield `need` tasks.
	rounds := roundsFor(perSubmitter, need)
	oldest := map[string]*seqHeap{}
	for i := range tasks {
		if int(effs[i]) != threshold {
			continue
		}
		t := &tasks[i]
		h := oldest[t.Submitter]
		if h == nil {
			h = &seqHeap{limit: rounds}
			oldest[t.Submitter] = h
		}
		h.offer(t)
	}
	var level []QueuedTask
	for _, h := range oldest {
		for _, t := range h.items {
			level = append(level, *t)
		}
	}
	level = Order(level, now, cfg)
	return append(out, level[:need]...)
}

// roundsFor is the fewest round-robin turns R with Σ min(count, R) ≥ need.
func roundsFor(counts map[string]int, need int) int {
	lo, hi := 1, need
	for lo < hi {
		mid := (lo + hi) / 2
		got := 0
		for _, c := range counts {
			got += min(c, mid)
		}
		if got >= need {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// seqHeap keeps the `limit` oldest tasks offered to it (a
// max-heap in compareSeq order, so the newest kept is evicted first).
type seqHeap struct {
	limit int
	items []*QueuedTask
}

func (h *seqHeap) offer(t *QueuedTask) {
	if len(h.items) < h.limit {
		h.items = append(h.items, t)
		h.up(len(h.items) - 1)
		return
	}
	if compareSeq(t, h.items[0]) >= 0 {
		return
	}
	h.items[0] = t
	h.down(0)
}

func (h *seqHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if compareSeq(h.items[p], h.items[i]) >= 0 {
			return
		}
		h.items[p], h.items[i] = h.items[i], h.items[p]
		i = p
	}
}

func (h *seqHeap) down(i int) {
	for {
		l, big := 2*i+1, i
		if l < len(h.items) && compareSeq(h.items[l], h.items[big]) > 0 {
			big = l
		}
		if r := l + 1; r < len(h.items) && compareSeq(h.items[r], h.items[big]) > 0 {
			big = r
		}
		if big == i {
			return
		}
		h.items[i], h.items[big] = h.items[big], h.items[i]
		i = big
	}
}
