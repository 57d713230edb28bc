package cluster

import (
	"fmt"

	"herd/fsm"
	"herd/scheduler"
)

// leaderQueue is the leader's indexed copy of the pending set, kept
// current from the FSM's pending feed: a pass reads what changed since the
// last one instead of the whole backlog. A new leader builds it once.
type leaderQueue struct {
	cfg    scheduler.QueueConfig
	q      *scheduler.Queue
	cursor fsm.PendingCursor
}

func newLeaderQueue(cfg scheduler.QueueConfig) *leaderQueue {
	return &leaderQueue{cfg: cfg, q: scheduler.NewQueue(cfg)}
}

// sync brings the queue to the view st. left is called for each task that
// was queued and is no longer pending; after a rebuild (rebuilt true) the
// caller checks what it remembers against the queue instead.
func (lq *leaderQueue) sync(st *fsm.State, left func(id string)) (rebuilt bool, err error) {
	ids, next, ok := st.PendingChanges(lq.cursor)
	if !ok {
		pending, err := st.PendingTasks(nil)
		if err != nil {
			return false, fmt.Errorf("read the pending tasks: %w", err)
		}
		lq.q = scheduler.NewQueue(lq.cfg)
		for _, t := range pending {
			lq.q.Put(queuedTask(t))
		}
		lq.cursor = next
		return true, nil
	}
	for _, id := range ids {
		if t, err := st.Task(id); err == nil && t.State == fsm.TaskPending {
			lq.q.Put(queuedTask(t))
		} else if lq.q.Remove(id) {
			left(id)
		}
	}
	lq.cursor = next
	return false, nil
}

func queuedTask(t *fsm.Task) scheduler.QueuedTask {
	return scheduler.QueuedTask{
		ID: t.ID, Priority: t.Spec.Priority, Submitter: t.Spec.Submitter, QueuedAt: t.QueuedAt,
		Seq: t.CreateIndex, Failures: t.Failures, NotBefore: t.NotBefore,
	}
}
