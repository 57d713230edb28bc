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
}

// QueueConfig tunes queue order.
type QueueConfig struct {
	// AgingGrace is how long a task waits before aging starts; below it
	// the order is pure priority with round-robin between submitters.
	AgingGrace time.Duration
	// AgingInterval is the wait that earns one point of priority after the
	// grace period; AgingCap bounds the points. With a cap of at least the
	// priority range, any task eventually reaches the head: no starvation.
	AgingInterval time.Duration
	AgingCap      int
	// FailurePenalty is the priority lost per failed attempt, so a task
	// that keeps failing cannot keep jumping the queue (seed 003 §2.2).
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
	p := t.Priority - t.Failures*cfg.FailurePenalty
	p = max(p, 0)
	if cfg.AgingInterval > 0 {
		waited := now.Sub(t.QueuedAt) - cfg.AgingGrace
		if waited > 0 {
			p += int(min(int64(waited/cfg.AgingInterval), int64(cfg.AgingCap)))
		}
	}
	return p
}

// Order returns the schedulable tasks (NotBefore reached) in the order
// they should be placed: effective priority first; among equal effective
// priority, submitters take turns (each submitter's first task, then each
// one's second, …) so that no submitter monopolises the head; within a
// submitter, submission order. The input is not modified.
func Order(tasks []QueuedTask, now time.Time, cfg QueueConfig) []QueuedTask {
	type keyed struct {
		t       *QueuedTask
		eff     int
		ordinal int
	}
	ks := make([]keyed, 0, len(tasks))
	for i := range tasks {
		t := &tasks[i]
		if now.Before(t.NotBefore) {
			continue
		}
		ks = append(ks, keyed{t: t, eff: EffectivePriority(t, now, &cfg)})
	}
	// Number each submitter's tasks within an effective priority level.
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(b.eff, a.eff); c != 0 {
			return c
		}
		if c := cmp.Compare(a.t.Submitter, b.t.Submitter); c != 0 {
			return c
		}
		return cmp.Compare(a.t.Seq, b.t.Seq)
	})
	for i := range ks {
		if i > 0 && ks[i].eff == ks[i-1].eff && ks[i].t.Submitter == ks[i-1].t.Submitter {
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
		return cmp.Compare(a.t.Seq, b.t.Seq)
	})
	out := make([]QueuedTask, len(ks))
	for i, k := range ks {
		out[i] = *k.t
	}
	return out
}
