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
	changes, next, ok := st.PendingChanges(lq.cursor)
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
	for _, c := range changes {
		// A task the change left pending is read from the view: a later
		// change in the same feed may have taken it out again.
		if c.Pending {
			if t, err := st.Task(c.ID); err == nil && t.State == fsm.TaskPending {
				lq.q.Put(queuedTask(t))
				continue
			}
		}
		if lq.q.Remove(c.ID) {
			left(c.ID)
		}
	}
	lq.cursor = next
	return false, nil
}

func queuedTask(t *fsm.Task) scheduler.QueuedTask {
	return scheduler.QueuedTask{
		ID: t.ID, Priority: t.Spec.Priority, Submitter: t.Spec.Submitter, QueuedAt: t.QueuedAt.Time(),
		Seq: t.CreateIndex, Failures: int(t.Failures), NotBefore: t.NotBefore().Time(), Ref: t,
	}
}
