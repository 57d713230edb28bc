package cluster

import (
	"fmt"

	"herd/fsm"
	"herd/scheduler"
)

// leaderQueue is the leader's indexed copy of the pending set, kept
// current from the FSM's pending feed: a pass reads what changed since the
// last one instead of the whole backlog. A new leader builds it once.
//
// It also counts the queued tasks by submitter and shape, so that a pass
// that finds a shape fits nowhere knows which submitters have nothing
// else waiting (see pass.ruleOut), and lists the tasks queued since the
// last pass took the list (their first explanation is due).
type leaderQueue struct {
	cfg    scheduler.QueueConfig
	q      *scheduler.Queue
	cursor fsm.PendingCursor

	subs   map[string]int                 // submitter → queued tasks
	shapes map[*fsm.TaskShape]*shapeCount // shape → queued tasks with no failures on a node
	fresh  []string                       // queued since takeFresh
}

// shapeCount counts a shape's queued tasks by submitter. Most shapes have
// one submitter (a shape holds the command, so a backlog of distinct
// commands is a shape a task), which it keeps without a map of its own.
type shapeCount struct {
	sub    string
	n      int
	others map[string]int // submitters other than sub
}

// add adds d to sub's count and reports whether the shape has no task
// left.
func (c *shapeCount) add(sub string, d int) bool {
	if sub == c.sub {
		c.n += d
	} else {
		if c.others == nil {
			c.others = map[string]int{}
		}
		if c.others[sub] += d; c.others[sub] == 0 {
			delete(c.others, sub)
		}
	}
	if c.n == 0 && len(c.others) > 0 {
		// Keep a submitter inline while any is left.
		for s, n := range c.others {
			c.sub, c.n = s, n
			delete(c.others, s)
			break
		}
	}
	return c.n == 0
}

// each calls f with each submitter's count.
func (c *shapeCount) each(f func(sub string, n int)) {
	if c.n != 0 {
		f(c.sub, c.n)
	}
	for s, n := range c.others {
		f(s, n)
	}
}

func newLeaderQueue(cfg scheduler.QueueConfig) *leaderQueue {
	lq := &leaderQueue{cfg: cfg}
	lq.reset()
	return lq
}

// reset empties the queue and its counts.
func (lq *leaderQueue) reset() {
	lq.q = scheduler.NewQueue(lq.cfg)
	lq.subs = map[string]int{}
	lq.shapes = map[*fsm.TaskShape]*shapeCount{}
	lq.fresh = nil
}

// put queues t, or replaces its earlier record.
func (lq *leaderQueue) put(t *fsm.Task) {
	if old, ok := lq.q.Ref(t.ID); ok {
		lq.count(old.(*fsm.Task), -1)
	} else {
		lq.fresh = append(lq.fresh, t.ID)
	}
	lq.q.Put(queuedTask(t))
	lq.count(t, 1)
}

// remove drops the task with id; it reports whether it was queued.
func (lq *leaderQueue) remove(id string) bool {
	old, ok := lq.q.Ref(id)
	if !ok {
		return false
	}
	lq.count(old.(*fsm.Task), -1)
	return lq.q.Remove(id)
}

// count adds d to t's counts.
func (lq *leaderQueue) count(t *fsm.Task, d int) {
	sub := t.Spec.Submitter
	if lq.subs[sub] += d; lq.subs[sub] == 0 {
		delete(lq.subs, sub)
	}
	if t.HasNodeFailures() {
		return
	}
	shape := t.Spec.TaskShape
	c := lq.shapes[shape]
	if c == nil {
		c = &shapeCount{sub: sub}
		lq.shapes[shape] = c
	}
	if c.add(sub, d) {
		delete(lq.shapes, shape)
	}
}

// takeFresh returns the tasks queued since the last call, oldest first.
func (lq *leaderQueue) takeFresh() []string {
	f := lq.fresh
	lq.fresh = nil
	return f
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
		lq.reset()
		for _, t := range pending {
			lq.put(t)
		}
		lq.cursor = next
		return true, nil
	}
	for _, c := range changes {
		// A task the change left pending is read from the view: a later
		// change in the same feed may have taken it out again.
		if c.Pending {
			if t, err := st.Task(c.ID); err == nil && t.State == fsm.TaskPending {
				lq.put(t)
				continue
			}
		}
		if lq.remove(c.ID) {
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
