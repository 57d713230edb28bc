package fsm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/btree"

	"herd/scheduler"
)

// CheckInvariants verifies the promise over the whole state:
//   - no node is over capacity: its reservations fit its resources and
//     its live attempts fit its slots;
//   - each node's reserved totals equal the sum of its live attempts, and
//     usage is recorded only for nodes that exist;
//   - no task has more than one live attempt, its current one, but a
//     speculative task racing its current attempt and its backup, on two
//     nodes; a task is scheduled or running exactly when it has one (the
//     state index relies on it);
//   - a task's current attempt, when it names one, is a live attempt of
//     that task: a PENDING or finished task holds none;
//   - nothing is negative: reservations, attempt counts, a task's
//     attempts and failures (failures never exceed attempts);
//   - the store's indexes hold exactly its current records.
//
// Tests call it after every Apply; a running replica checks its state
// when an operator asks (herd operator debug check-state). It is
// O(state) and only reads.
func (s *State) CheckInvariants() error {
	errs := []error{s.st.checkIndexes()}
	nodes, err := s.Nodes()
	if err != nil {
		return err
	}
	s.st.usage.Ascend(func(u *nodeUsage) bool {
		if _, ok := s.st.nodeRecord(u.NodeID); !ok {
			errs = append(errs, fmt.Errorf("usage recorded for node %s, which has no record", u.NodeID))
		}
		return true
	})
	reserved := map[string]scheduler.Resources{}
	live := map[string]int{}
	liveByTask := map[string][]string{}
	s.st.attempts.Ascend(func(a *Attempt) bool {
		if a.State.Live() {
			reserved[a.NodeID] = reserved[a.NodeID].Add(a.Resources)
			live[a.NodeID]++
			liveByTask[a.TaskID] = append(liveByTask[a.TaskID], a.ID)
		}
		return true
	})
	for _, n := range nodes {
		if r := n.Reserved; r.CPUMillis < 0 || r.MemoryMB < 0 || r.GPU < 0 || r.DiskMB < 0 || n.RunningAttempts < 0 {
			errs = append(errs, fmt.Errorf("node %s: negative books: %+v reserved in %d attempts", n.ID, n.Reserved, n.RunningAttempts))
		}
		if n.Reserved != reserved[n.ID] || n.RunningAttempts != live[n.ID] {
			errs = append(errs, fmt.Errorf("node %s: books say %+v reserved in %d attempts, live attempts hold %+v in %d",
				n.ID, n.Reserved, n.RunningAttempts, reserved[n.ID], live[n.ID]))
		}
		if !n.Resources.Covers(n.Reserved) {
			errs = append(errs, fmt.Errorf("node %s over capacity: %+v reserved of %+v", n.ID, n.Reserved, n.Resources))
		}
		if n.RunningAttempts > n.Slots {
			errs = append(errs, fmt.Errorf("node %s over its slots: %d live attempts, %d slots", n.ID, n.RunningAttempts, n.Slots))
		}
	}
	for taskID, ids := range liveByTask {
		t, err := s.Task(taskID)
		if err != nil {
			errs = append(errs, fmt.Errorf("live attempt %s of missing task %s", ids[0], taskID))
			continue
		}
		if len(ids) > 2 || len(ids) == 2 && !(t.Spec.TaskShape != nil && t.Spec.Speculative && t.CurrentSlow() && slices.Contains(ids, t.CurrentAttempt())) {
			errs = append(errs, fmt.Errorf("task %s has %d live attempts: %v (current %q)", taskID, len(ids), ids, t.CurrentAttempt()))
			continue
		}
		if len(ids) == 2 {
			a, _ := s.st.attempt(ids[0])
			b, _ := s.st.attempt(ids[1])
			if a.NodeID == b.NodeID {
				errs = append(errs, fmt.Errorf("task %s races two attempts on one node %s", taskID, a.NodeID))
			}
		} else if t.CurrentAttempt() != ids[0] {
			errs = append(errs, fmt.Errorf("task %s: live attempt %s is not its current attempt %q", taskID, ids[0], t.CurrentAttempt()))
		}

		if indexedByState(t.State) {
			errs = append(errs, fmt.Errorf("task %s is %s with live attempt %s", taskID, t.State, ids[0]))
		}
	}
	s.st.tasks.Ascend(func(t *Task) bool {
		if t.Attempts < 0 || t.Failures < 0 || t.Failures > t.Attempts {
			errs = append(errs, fmt.Errorf("task %s: %d attempts, %d failures", t.ID, t.Attempts, t.Failures))
		}
		id := t.CurrentAttempt()
		if id == "" {
			return true
		}
		a, ok := s.st.attempt(id)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("task %s (%s): current attempt %s does not exist", t.ID, t.State, id))
		case a.TaskID != t.ID:
			errs = append(errs, fmt.Errorf("task %s (%s): current attempt %s belongs to task %s", t.ID, t.State, id, a.TaskID))
		case !a.State.Live():
			errs = append(errs, fmt.Errorf("task %s (%s): current attempt %s is %s", t.ID, t.State, id, a.State))
		}
		return true
	})
	for _, st := range []TaskState{TaskScheduled, TaskRunning} {
		if n := s.st.taskCounts[st]; n > 0 {
			active, err := s.Tasks(TaskFilter{State: st})
			if err != nil {
				return err
			}
			if len(active) != n {
				errs = append(errs, fmt.Errorf("%d tasks are %s, %d of them with a live attempt", n, st, len(active)))
			}
		}
	}
	return errors.Join(errs...)
}

// Violations lists each invariant the state breaks, one message apiece
// (none when CheckInvariants passes).
func (s *State) Violations() []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		out = append(out, err.Error())
	}
	walk(s.CheckInvariants())
	return out
}

// Sizes counts the state's tasks, attempts and nodes.
func (s *State) Sizes() (tasks, attempts, nodes int) {
	return s.st.tasks.Len(), s.st.attempts.Len(), s.st.nodes.Len()
}

// checkIndexes verifies that every secondary index holds exactly the
// current records of its primary tree, and that the counts agree.
func (s *store) checkIndexes() error {
	var errs []error
	tasks := map[*Task]bool{}
	counts := map[TaskState]int{}
	keyed, resting := 0, 0
	s.tasks.Ascend(func(t *Task) bool {
		tasks[t] = true
		counts[t.State]++
		if indexedByState(t.State) {
			resting++
		}
		if t.Spec.IdempotencyKey != "" {
			keyed++
			if got, ok := s.tasksByKey.Get(t); !ok || got != t {
				errs = append(errs, fmt.Errorf("task %s: idempotency index does not hold it", t.ID))
			}
		}
		return true
	})
	if s.tasksByStat.Len() != resting || s.tasksByKey.Len() != keyed {
		errs = append(errs, fmt.Errorf("task indexes: %d by state, %d by key, for %d tasks (%d keyed, %d neither scheduled nor running)",
			s.tasksByStat.Len(), s.tasksByKey.Len(), len(tasks), keyed, resting))
	}
	s.tasksByStat.Ascend(func(t *Task) bool {
		if !tasks[t] || !indexedByState(t.State) {
			errs = append(errs, fmt.Errorf("state index holds a stale record of task %s", t.ID))
		}
		return true
	})
	for st, n := range counts {
		if s.taskCounts[st] != n {
			errs = append(errs, fmt.Errorf("count of %s tasks is %d, %d stored", st, s.taskCounts[st], n))
		}
	}
	if len(s.taskCounts) != len(counts) {
		errs = append(errs, fmt.Errorf("task counts %v, stored %v", s.taskCounts, counts))
	}
	attempts := map[*Attempt]bool{}
	live := 0
	s.attempts.Ascend(func(a *Attempt) bool {
		attempts[a] = true
		if a.State.Live() {
			live++
		}
		return true
	})
	for name, idx := range map[string]*btree.BTreeG[*Attempt]{"task": s.attemptsByTask, "live node": s.liveByNode, "ended node": s.endedByNode} {
		want := len(attempts)
		switch name {
		case "live node":
			want = live
		case "ended node":
			want = len(attempts) - live
		}
		if idx.Len() != want {
			errs = append(errs, fmt.Errorf("attempt index by %s holds %d, want %d", name, idx.Len(), want))
		}
		idx.Ascend(func(a *Attempt) bool {
			if !attempts[a] || (name == "live node" && !a.State.Live()) || (name == "ended node" && a.State.Live()) {
				errs = append(errs, fmt.Errorf("attempt index by %s holds a stale record of %s", name, a.ID))
			}
			return true
		})
	}
	if s.w != nil {
		errs = append(errs,
			checkWriterLookup("task", s.tasks, s.w.tasks.Len(), s.w.tasks.Get, func(t *Task) string { return t.ID }),
			checkWriterLookup("attempt", s.attempts, s.w.attempts.Len(), s.w.attempts.Get, func(a *Attempt) string { return a.ID }),
			checkWriterLookup("node", s.nodes, len(s.w.nodes), func(id string) *Node { return s.w.nodes[id] }, func(n *Node) string { return n.ID }),
			checkWriterLookup("node usage", s.usage, len(s.w.usage), func(id string) *nodeUsage { return s.w.usage[id] }, func(u *nodeUsage) string { return u.NodeID }))
	}
	return errors.Join(errs...)
}

// checkWriterLookup verifies that the writer's lookup (a table or a map)
// holds exactly the tree's records.
func checkWriterLookup[T any](kind string, tree *btree.BTreeG[*T], n int, get func(id string) *T, id func(*T) string) error {
	if tree.Len() != n {
		return fmt.Errorf("%s lookup holds %d, tree %d", kind, n, tree.Len())
	}
	var err error
	tree.Ascend(func(rec *T) bool {
		if get(id(rec)) != rec {
			err = fmt.Errorf("%s lookup disagrees with the tree on %s", kind, id(rec))
		}
		return err == nil
	})
	return err
}
