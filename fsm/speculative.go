package fsm

import (
	"fmt"
	"time"
)

// A speculative task (TaskShape.Speculative) whose current attempt is
// marked slow may get one backup attempt on another node. The two race:
// the first to succeed ends the task and the other is cancelled, its
// reservation released and its lease dead, so a result it sends later is
// stale. One that fails leaves the other running, and the task moves on
// only once neither lives. No task ever has more than these two live
// attempts, and the backup is never on the current attempt's node.

// backupOf is the task's backup attempt, "" for none: its live attempt
// other than its current one (only a speculative task has one, so no
// other task pays for the look).
func backupOf(db *store, task *Task) string {
	if task.Spec.TaskShape == nil || !task.Spec.Speculative || task.CurrentAttempt() == "" {
		return ""
	}
	backup := ""
	db.attemptsOfTask(task.ID, func(a *Attempt) bool {
		if a.State.Live() && a.ID != task.CurrentAttempt() {
			backup = a.ID
			return false
		}
		return true
	})
	return backup
}

// BackupAttempt is the task's backup attempt, "" for none.
func (s *State) BackupAttempt(task *Task) string { return backupOf(s.st, task) }

// backupAllowed checks a backup reservation against the committed task.
func backupAllowed(db *store, task *Task, r *ReserveRequest) error {
	if task.Spec.TaskShape == nil || !task.Spec.Speculative {
		return reject(RejectConflict, "task %s is not speculative", task.ID)
	}
	if task.State != TaskRunning || !task.CurrentSlow() {
		return reject(RejectConflict, "task %s is %s and its attempt not marked slow: no backup", task.ID, task.State)
	}
	if backupOf(db, task) != "" {
		return reject(RejectConflict, "task %s has a backup attempt already", task.ID)
	}
	if cur, ok := db.attempt(task.CurrentAttempt()); ok && cur.NodeID == r.NodeID {
		return reject(RejectConflict, "task %s: a backup runs on another node than %s", task.ID, r.NodeID)
	}
	return nil
}

// raceOf returns the other live attempt of a task racing two, when id
// is one of them; "" otherwise.
func raceOf(db *store, task *Task, id string) string {
	backup := backupOf(db, task)
	switch {
	case backup == "":
		return ""
	case id == backup:
		return task.CurrentAttempt()
	case id == task.CurrentAttempt():
		return backup
	}
	return ""
}

// finishAttempt ends a live attempt of task: one of two racing ones as
// endRacer does, a lone one as endAttempt does.
func finishAttempt(db *store, index uint64, a *Attempt, task *Task, r *AttemptEndRequest) (any, error) {
	if other := raceOf(db, task, a.ID); other != "" {
		return endRacer(db, index, a, other, task, r)
	}
	return endAttempt(db, index, a, task, r)
}

// endRacer ends one of a task's two live attempts. A success wins the
// race: the other is cancelled and the task ends as any success does. A
// cancel (the task's) ends both. Any other end leaves the other attempt
// as the task's current one, running on: the end is recorded (the
// failure counts, against the node as any does) and the task waits for
// it.
func endRacer(db *store, index uint64, a *Attempt, otherID string, task *Task, r *AttemptEndRequest) (any, error) {
	other, ok := db.attempt(otherID)
	if !ok || !other.State.Live() {
		return nil, fmt.Errorf("task %s: racing attempt %s is gone", task.ID, otherID)
	}
	t := task.clone()
	t.setCurrentAttempt(a.ID)
	if r.State == AttemptSucceeded || r.State == AttemptCancelled {
		// The loser is cancelled first; the winner (or the cancel) then
		// ends the task as it would alone.
		why := fmt.Sprintf("attempt %d on %s finished first", a.Number, a.NodeID)
		if r.State == AttemptCancelled {
			why = r.Error
		}
		cancelLoser(db, index, other, t, why, r.Now)
		return endAttempt(db, index, a, t, r)
	}
	// a failed, timed out or was lost: the other goes on as the current.
	return endAttemptWith(db, index, a, t, r, other)
}

// cancelLoser cancels the attempt that lost a race: its reservation is
// released, its lease dies with it, and its agent, no longer assigned it,
// stops it. t is the task's copy being changed.
func cancelLoser(db *store, index uint64, loser *Attempt, t *Task, why string, now time.Time) {
	na := *loser
	na.State = AttemptCancelled
	na.FinishedAt = StampOf(now)
	na.ExitCode = -1
	na.Error = why
	na.ModifyIndex = index
	db.addUsage(loser.NodeID, loser.Resources, -1, index)
	if node, err := getNodeRecord(db, loser.NodeID); err == nil {
		n := node.clone()
		n.ModifyIndex = index
		db.stampUsage(n)
		db.putNode(n)
	}
	db.putAttempt(&na)
	t.addEvent(index, now, EventCancelled, fmt.Sprintf("attempt %d on %s cancelled: %s", loser.Number, loser.NodeID, why))
}
