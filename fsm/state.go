package fsm

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned by lookups of records that do not exist.
var ErrNotFound = errors.New("not found")

// State is a consistent, read-only view of the replicated state at one
// applied index. Taking it is O(1) (the store's trees are copy-on-write)
// and it never blocks Apply. Records returned must not be modified.
type State struct {
	st      *store
	index   uint64
	watches *watchHub
}

// Index is the Raft index of the last entry applied into this view.
func (s *State) Index() uint64 { return s.index }

// watch adds to ws (when not nil) a channel that closes once topic
// changes after this view's index.
func (s *State) watch(ws WatchSet, topic string) {
	if ws != nil {
		ws.Add(s.watches.watch(topic, s.index))
	}
}

// Task returns the task with the given id.
func (s *State) Task(id string) (*Task, error) {
	t, ok := s.st.task(id)
	if !ok {
		return nil, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	return t, nil
}

// TaskByIdempotencyKey returns the task submitted with key, if any.
func (s *State) TaskByIdempotencyKey(key string) (*Task, error) {
	t, ok := s.st.taskByKey(key)
	if !ok {
		return nil, fmt.Errorf("idempotency key %q: %w", key, ErrNotFound)
	}
	return t, nil
}

// TaskFilter selects tasks for listing.
type TaskFilter struct {
	State TaskState // empty: every state
	After string    // only ids greater than this (pagination cursor)
	Limit int       // 0: no limit
}

// Tasks lists tasks in id order (ids are time-ordered, so this is roughly
// submission order).
func (s *State) Tasks(f TaskFilter) ([]*Task, error) {
	var out []*Task
	add := func(t *Task) bool {
		out = append(out, t)
		return f.Limit <= 0 || len(out) < f.Limit
	}
	if f.State != 0 {
		s.st.tasksInState(f.State, f.After, add)
		return out, nil
	}
	s.st.tasks.AscendGreaterOrEqual(&Task{ID: f.After}, func(t *Task) bool {
		if f.After != "" && t.ID == f.After {
			return true
		}
		return add(t)
	})
	return out, nil
}

// CountTasks returns how many tasks are in each state.
func (s *State) CountTasks() (map[TaskState]int, error) {
	out := make(map[TaskState]int, len(s.st.taskCounts))
	for k, v := range s.st.taskCounts {
		out[k] = v
	}
	return out, nil
}

// Servers lists replica metadata in id order.
func (s *State) Servers() ([]*Server, error) {
	var out []*Server
	s.st.servers.Ascend(func(v *Server) bool { out = append(out, v); return true })
	return out, nil
}

// Server returns one replica's metadata.
func (s *State) Server(id string) (*Server, error) {
	v, ok := s.st.server(id)
	if !ok {
		return nil, fmt.Errorf("server %q: %w", id, ErrNotFound)
	}
	return v, nil
}

// Node returns one worker node.
func (s *State) Node(id string) (*Node, error) {
	n, ok := s.st.node(id)
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, ErrNotFound)
	}
	return n, nil
}

// Nodes lists worker nodes in id order.
func (s *State) Nodes() ([]*Node, error) {
	out := make([]*Node, 0, s.st.nodes.Len())
	s.st.nodes.Ascend(func(n *Node) bool { out = append(out, s.st.current(n)); return true })
	return out, nil
}

// AttemptsOfTask lists a task's attempts in id order.
func (s *State) AttemptsOfTask(taskID string) ([]*Attempt, error) {
	var out []*Attempt
	s.st.attemptsOfTask(taskID, func(a *Attempt) bool { out = append(out, a); return true })
	return out, nil
}

// PendingTasks lists tasks waiting for placement, in id order, and adds
// to ws (when not nil) a channel that closes when that set may change.
func (s *State) PendingTasks(ws WatchSet) ([]*Task, error) {
	s.watch(ws, topicPending)
	out := make([]*Task, 0, s.st.taskCounts[TaskPending])
	s.st.tasksInState(TaskPending, "", func(t *Task) bool { out = append(out, t); return true })
	return out, nil
}

// PendingCursor is a position in the feed of changes to the pending set
// (see PendingChanges). The zero cursor is before any view's.
type PendingCursor struct {
	feed *feedToken
	pos  uint64
}

// PendingChange is one entry of the pending feed: a task that entered,
// left or changed in the pending set, and whether it was pending after
// the change. A reader removes a task that left without looking it up.
type PendingChange struct {
	ID      string
	Pending bool
}

// PendingChanges returns the changes to the pending set after cursor and
// up to this view, in apply order (a task may repeat: its last change
// holds), and the cursor of this view. ok is false when the feed does
// not reach back to cursor (a zero cursor, a restore from a snapshot, or
// too many changes since): the caller then reads PendingTasks whole.
func (s *State) PendingChanges(c PendingCursor) (changes []PendingChange, next PendingCursor, ok bool) {
	next = PendingCursor{feed: s.st.feed, pos: s.st.feedBase + uint64(len(s.st.changes))}
	if c.feed != s.st.feed || c.pos < s.st.feedBase || c.pos > next.pos {
		return nil, next, false
	}
	return s.st.changes[c.pos-s.st.feedBase:], next, true
}

// WatchPending adds to ws a channel that closes when the pending set, or
// a pending task, changes after this view.
func (s *State) WatchPending(ws WatchSet) { s.watch(ws, topicPending) }

// WatchNodes adds to ws a channel that closes when any node changes.
func (s *State) WatchNodes(ws WatchSet) error {
	s.watch(ws, topicNodes)
	return nil
}

// Attempt returns one attempt.
func (s *State) Attempt(id string) (*Attempt, error) {
	a, ok := s.st.attempt(id)
	if !ok {
		return nil, fmt.Errorf("attempt %q: %w", id, ErrNotFound)
	}
	return a, nil
}

// LiveAttemptsOnNode lists a node's reserved and running attempts in id
// order, and adds a channel to ws that fires when that list changes.
func (s *State) LiveAttemptsOnNode(nodeID string, ws WatchSet) ([]*Attempt, error) {
	return s.attemptsOnNode(true, nodeID, ws), nil
}

// AttemptsOnNode lists a node's attempts (live and ended) in id order, and
// adds a channel to ws that fires when any of them changes.
func (s *State) AttemptsOnNode(nodeID string, ws WatchSet) ([]*Attempt, error) {
	return s.attemptsOnNode(false, nodeID, ws), nil
}

func (s *State) attemptsOnNode(live bool, nodeID string, ws WatchSet) []*Attempt {
	s.watch(ws, topicNodePre+nodeID)
	var out []*Attempt
	s.st.attemptsOnNode(live, nodeID, func(a *Attempt) bool { out = append(out, a); return true })
	return out
}

// AttemptsInState lists the attempts in one state, in id order.
func (s *State) AttemptsInState(state AttemptState) ([]*Attempt, error) {
	var out []*Attempt
	s.st.attemptsInState(state, func(a *Attempt) bool { out = append(out, a); return true })
	return out, nil
}

// FinishedTasks lists terminal tasks whose last event is before cutoff, at
// most limit of them, oldest states first (for retention). A stage's task
// is left out while its job runs: the job reads its stage's tasks to know
// when the stage is done, and a stage whose first instances finished long
// before its last would otherwise never end.
func (s *State) FinishedTasks(cutoff time.Time, limit int) ([]string, error) {
	var out []string
	for _, st := range []TaskState{TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled} {
		s.st.tasksInState(st, "", func(t *Task) bool {
			if last, ok := t.LastEvent(); ok && last.Time.Before(StampOf(cutoff)) && !s.st.ofLiveJob(t.ID) {
				out = append(out, t.ID)
			}
			return len(out) < limit
		})
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}
