package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Blame follows the evidence. A node is blamed for a failure only when
// other work like it succeeds elsewhere and the failed task itself has
// not failed on another node: a task that fails on two nodes is the
// suspect, and its failures are taken back from every node it failed on
// (streaks, blamed outcomes, and the suspected quarantines they began).
// A node that fails fast everything it is given, new classes included,
// while other nodes succeed, is a suspect without per-class history.

// failedElsewhere reports whether task failed on a node other than node.
func failedElsewhere(task *Task, node string) bool {
	for id := range task.nodeFailures() {
		if id != node {
			return true
		}
	}
	return false
}

// suspectTaskNote is the task's timeline entry when its failure on node
// makes it the suspect (its second node), empty otherwise.
func suspectTaskNote(task *Task, node string) string {
	f := task.nodeFailures()
	if _, again := f[node]; again || len(f) != 1 {
		return ""
	}
	other := ""
	for id := range f {
		other = id
	}
	return fmt.Sprintf("failed on %s and on %s: the task is the suspect, not the nodes; their failures of it count against neither", other, node)
}

// addStreak adds task to a streak of distinct tasks (bounded), leaving it
// as it is when the task is in it already: the same task failing twice on
// one node says no more than once.
func addStreak(count int, tasks []string, task string) (int, []string) {
	if slices.Contains(tasks, task) {
		return count, tasks
	}
	out := append(tasks[:len(tasks):len(tasks)], task) // a new array: views share the old
	if len(out) > maxStreakTasks {
		out = out[len(out)-maxStreakTasks:]
	}
	return count + 1, out
}

// dropStreak takes task out of a streak.
func dropStreak(count int, tasks []string, task string) (int, []string, bool) {
	i := slices.Index(tasks, task)
	if i < 0 {
		return count, tasks, false
	}
	out := slices.Delete(slices.Clone(tasks), i, i+1)
	if len(out) == 0 {
		out = nil
	}
	return max(count-1, 0), out, true
}

// exonerate takes task's failures back from every node it failed on: n
// (the node of the failure being applied, a copy being changed) and the
// others, in id order.
func exonerate(db *store, index uint64, n *Node, task *Task, ps ProfileSettings, now time.Time) {
	takeBack(n, task.ID, ps, index, now)
	refreshHolds(db, n, ps)
	ids := make([]string, 0, len(task.nodeFailures()))
	for id := range task.nodeFailures() {
		if id != n.ID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // map order must not decide anything
	for _, id := range ids {
		node, ok := db.node(id)
		if !ok {
			continue
		}
		o := node.clone()
		if takeBack(o, task.ID, ps, index, now) {
			refreshHolds(db, o, ps)
			o.ModifyIndex = index
			db.putNode(o)
		}
	}
}

// takeBack removes task from n's streaks and blamed outcomes, and from a
// suspected quarantine it helped begin, releasing the quarantine when too
// few tasks remain to call the node a black hole. n is a copy being
// changed; it reports whether anything changed.
func takeBack(n *Node, task string, ps ProfileSettings, index uint64, now time.Time) bool {
	if n.History == nil {
		return false
	}
	h := n.History.clone()
	changed := false
	for i := range h.Classes {
		c := &h.Classes[i]
		var dropped bool
		if c.FastStreak, c.StreakTasks, dropped = dropStreak(c.FastStreak, c.StreakTasks, task); dropped {
			changed = true
		}
	}
	var dropped bool
	if h.FastStreak, h.StreakTasks, dropped = dropStreak(h.FastStreak, h.StreakTasks, task); dropped {
		changed = true
	}
	if h.NewStreak, h.NewStreakTasks, dropped = dropStreak(h.NewStreak, h.NewStreakTasks, task); dropped {
		changed = true
	}
	if slices.ContainsFunc(h.Outcomes, func(o Outcome) bool { return o.Task == task && o.Blamed }) {
		h.Outcomes = slices.Clone(h.Outcomes)
		for i := range h.Outcomes {
			if h.Outcomes[i].Task == task {
				h.Outcomes[i].Blamed = false
			}
		}
		changed = true
	}
	if changed {
		n.History = h
	}
	if q := n.Quarantine; q != nil && q.Level == QuarantineSuspected && slices.Contains(q.Tasks, task) {
		c := *q
		c.Tasks = slices.DeleteFunc(slices.Clone(q.Tasks), func(id string) bool { return id == task })
		if len(c.Tasks) < ps.BlackHoleFailures {
			n.Quarantine = nil
			n.addEvent(index, now, EventQuarantine, fmt.Sprintf("released: task %s failed on other nodes too, so it is the suspect, and %d task(s) that failed only here are too few to call the node a black hole", task, len(c.Tasks)))
		} else {
			n.Quarantine = &c
		}
		changed = true
	}
	return changed
}

// quarantineIfNodeStreak quarantines n (a copy being changed) on
// suspicion of being a black hole for everything: its latest attempts,
// of distinct tasks of any class, failed fast in a row while other nodes
// succeeded within the failure window. It reports whether it did.
func quarantineIfNodeStreak(db *store, n *Node, ps ProfileSettings, index uint64, now time.Time) bool {
	if n.Quarantine != nil || n.History == nil || max(n.History.FastStreak, n.History.NewStreak) < ps.BlackHoleFailures {
		return false
	}
	if !db.fleet.succeededElsewhere(n.ID, StampOf(now.Add(-ms(ps.FailureWindowMs)))) {
		return false
	}
	h := n.History
	count, tasks, what := h.FastStreak, h.StreakTasks, "failed in a row here"
	if h.FastStreak < ps.BlackHoleFailures {
		count, tasks, what = h.NewStreak, h.NewStreakTasks, "of classes it never ran failed in a row here, while it runs the classes it knows"
	}
	var classes []string
	q := &Quarantine{Level: QuarantineSuspected, Since: StampOf(now), Until: StampOf(now.Add(ms(ps.QuarantineSuspectMs))), Tasks: slices.Clone(tasks)}
	for _, id := range q.Tasks {
		t, ok := db.task(id)
		if !ok {
			continue
		}
		if c := t.Spec.ClassOf(); !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	q.Confirmed = confirmedTasks(db, q.Tasks)
	slices.Sort(classes)
	if q.Confirmed == 0 {
		return false // a suspicion only (see quarantineIfStreak)
	}
	q.Reason = fmt.Sprintf("suspected black hole: %d tasks (class %s) %s, each within %s, while other nodes succeed", count, strings.Join(classes, ", "), what, ms(ps.FastFailureMs))
	beginQuarantine(db, n, q, ps, index, now)
	return true
}

// refreshHolds derives n's holds (see NodeHistory.Holds) from its
// streaks and the tasks' fates; n is a copy being changed (its history is
// copied before it changes). It reports whether the holds changed.
func refreshHolds(db *store, n *Node, ps ProfileSettings) bool {
	h := n.History
	if h == nil {
		return false
	}
	// A class is held only while it succeeds on other nodes since the
	// streak began: work failing everywhere holds nobody, and some node
	// always runs the streak's tasks again to settle the suspicion.
	var holds []string
	if n.Quarantine == nil {
		for _, c := range h.Classes {
			if c.FastStreak >= ps.BlackHoleFailures && confirmedTasks(db, c.StreakTasks) == 0 &&
				db.class(c.Class).succeededElsewhere(n.ID, h.streakSince(c.StreakTasks)) {
				holds = append(holds, "="+c.Class)
			}
		}
		if h.NewStreak >= ps.BlackHoleFailures && confirmedTasks(db, h.NewStreakTasks) == 0 &&
			db.fleet.succeededElsewhere(n.ID, h.streakSince(h.NewStreakTasks)) {
			holds = append(holds, "+new")
		}
	}
	if slices.Equal(holds, h.Holds) {
		return false
	}
	n.History = h.clone()
	n.History.Holds = holds
	return true
}

// confirmedTasks counts the tasks of ids that succeeded: having failed on
// the node whose streak they make, elsewhere.
func confirmedTasks(db *store, ids []string) int {
	k := 0
	for _, id := range ids {
		if t, ok := db.task(id); ok && (t.State == TaskSucceeded || id == db.w.succeeding) {
			k++
		}
	}
	return k
}

// fleetSucceeded records that node succeeded at something, and
// quarantines the nodes whose failures of everything came before any
// success elsewhere.
func fleetSucceeded(db *store, index uint64, node string, ps ProfileSettings, now time.Time) {
	f := db.fleet
	if f != nil && len(f.Suspects) == 0 && slices.ContainsFunc(f.Successes, func(s ClassRun) bool {
		return s.Node == node && now.Sub(s.At.Time()) < time.Second
	}) {
		return // recorded within the second: the window is minutes
	}
	next := f.withRun("", ClassRun{Node: node, At: StampOf(now)}, index)
	suspects := next.Suspects
	next.Suspects = nil
	db.fleet = next
	for _, s := range suspects {
		if s.Node == node {
			continue
		}
		if other, ok := db.node(s.Node); ok {
			o := other.clone()
			if quarantineIfNodeStreak(db, o, ps, index, now) {
				o.ModifyIndex = index
				db.putNode(o)
			}
		}
	}
}
