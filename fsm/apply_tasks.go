package fsm

import (
	"fmt"
	"time"
)

// maxTimeline bounds a task's timeline: the first event (queued) and the
// latest ones are kept.
const maxTimeline = 200

func (t *Task) addEvent(index uint64, at time.Time, kind EventKind, msg string) {
	// The submission event is kept apart, so the rest holds one fewer.
	t.m().timeline = appendEvent(t.later(), TimelineEvent{Index: index, Time: StampOf(at), Kind: kind, Message: msg}, maxTimeline-1, 0)
}

func getTask(db *store, id string) (*Task, error) {
	if t, ok := db.task(id); ok {
		return t, nil
	}
	return nil, reject(RejectNotFound, "task %q not found", id)
}

func applyExplain(db *store, index uint64, r *ExplainRequest) (any, error) {
	task, err := getTask(db, r.TaskID)
	if err != nil {
		return nil, err
	}
	explainTask(db, index, task, internString(r.Summary), r.Now)
	return nil, nil
}

// applyExplainMany records one reason for several tasks; one that is
// gone is passed over (it may have been forgotten since the pass).
func applyExplainMany(db *store, index uint64, r *ExplainManyRequest) (any, error) {
	summary := internString(r.Summary)
	for _, id := range r.TaskIDs {
		if task, ok := db.task(id); ok {
			explainTask(db, index, task, summary, r.Now)
		}
	}
	return nil, nil
}

// explainTask records why a pending task waits, when that changed.
// summary is interned: a waiting backlog mostly waits for the same
// reasons.
func explainTask(db *store, index uint64, task *Task, summary string, now time.Time) {
	if task.State != TaskPending || task.LastExplain() == summary {
		return
	}
	t := task.clone()
	t.setLastExplain(summary)
	t.ModifyIndex = index
	t.addEvent(index, now, EventWaiting, t.LastExplain())
	db.putTask(t)
}

// CancelResult answers a cancel; AlreadyCancelled makes cancel idempotent.
type CancelResult struct {
	Task             *Task
	AlreadyCancelled bool
}

func applyCancelTask(db *store, index uint64, r *CancelTaskRequest) (any, error) {
	task, err := getTask(db, r.TaskID)
	if err != nil {
		return nil, err
	}
	if task.State == TaskCancelled {
		return &CancelResult{Task: task, AlreadyCancelled: true}, nil
	}
	if task.State.Terminal() {
		return nil, reject(RejectConflict, "task %s already ended %s", task.ID, task.State)
	}
	reason := r.Reason
	if reason == "" {
		reason = "cancelled by request"
	}
	t, err := cancelTask(db, index, task, reason, r.Now)
	if err != nil {
		return nil, err
	}
	return &CancelResult{Task: t}, nil
}

// cancelTask cancels a task not ended yet, stopping its live attempt,
// and moves its job on.
func cancelTask(db *store, index uint64, task *Task, reason string, now time.Time) (*Task, error) {
	if task.CurrentAttempt() != "" {
		a, err := getAttempt(db, task.CurrentAttempt())
		if err != nil {
			return nil, err
		}
		if a.State.Live() {
			res, err := finishAttempt(db, index, a, task, &AttemptEndRequest{
				AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptCancelled, ExitCode: -1, Error: reason, Now: now,
			})
			if err != nil {
				return nil, err
			}
			return res.(*AttemptResult).Task, nil
		}
	}
	if !ValidTaskTransition(task.State, TaskCancelled) {
		return nil, reject(RejectIllegalTransfer, "task %s: %s → %s", task.ID, task.State, TaskCancelled)
	}
	t := task.clone()
	t.State = TaskCancelled
	t.ModifyIndex = index
	t.addEvent(index, now, EventCancelled, reason)
	db.putTask(t)
	if err := jobTaskEnded(db, index, t, now); err != nil {
		return nil, err
	}
	return t, nil
}

// applyForgetTasks deletes terminal tasks with their attempts; a task that
// is not terminal (or no longer exists) is skipped. It returns how many
// tasks were removed.
func applyForgetTasks(db *store, r *ForgetTasksRequest) (any, error) {
	removed := 0
	for _, id := range r.TaskIDs {
		t, ok := db.task(id)
		if !ok || !t.State.Terminal() {
			continue
		}
		var attempts []*Attempt
		db.attemptsOfTask(id, func(a *Attempt) bool { attempts = append(attempts, a); return true })
		for _, a := range attempts {
			db.deleteAttempt(a)
		}
		db.deleteTask(t)
		removed++
	}
	return removed, nil
}

// SubmitResult is the response to a submit-task command.
type SubmitResult struct {
	Task    *Task
	Created bool // false: the idempotency key matched an existing task
}

// applySubmitMany submits each task as applySubmitTask would, in order,
// and answers each task's result or refusal in a BatchResult: one task
// refused leaves the others submitted.
func applySubmitMany(db *store, index uint64, r *SubmitManyRequest) (any, error) {
	out := make(BatchResult, len(r.Tasks))
	for i := range r.Tasks {
		res, err := applySubmitTask(db, index, &r.Tasks[i])
		if err != nil {
			out[i] = err
		} else {
			out[i] = res
		}
	}
	return out, nil
}

func applySubmitTask(db *store, index uint64, r *SubmitTaskRequest) (any, error) {
	if r.ID == "" {
		return nil, reject(RejectInvalid, "task id is required")
	}
	if err := r.Spec.Validate(); err != nil {
		return nil, reject(RejectInvalid, "%v", err)
	}
	if r.Spec.IdempotencyKey != "" {
		if existing, ok := db.taskByKey(r.Spec.IdempotencyKey); ok {
			return &SubmitResult{Task: existing, Created: false}, nil
		}
	}
	if _, exists := db.task(r.ID); exists {
		return nil, reject(RejectConflict, "task id %q already exists", r.ID)
	}
	t := newTask(r.ID, r.Spec, index, r.SubmittedAt,
		fmt.Sprintf("submitted by %s with priority %d", r.Spec.Submitter, r.Spec.Priority))
	db.w.interner.task(t, r.shapeKey, r.shapeShared)
	db.putTask(t)
	return &SubmitResult{Task: t, Created: true}, nil
}
