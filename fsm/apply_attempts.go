package fsm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"herd/scheduler"
)

// ReserveResult is the response to an accepted reservation.
type ReserveResult struct {
	Attempt *Attempt
}

func getAttempt(db *store, id string) (*Attempt, error) {
	if a, ok := db.attempt(id); ok {
		return a, nil
	}
	return nil, reject(RejectNotFound, "attempt %q not found", id)
}

// applyReserve is promise 1: whatever view the leader decided from, a
// reservation only applies if, against the committed state, the task is
// still waiting for exactly this attempt and the node still qualifies
// and has the capacity. Of two reservations for the last unit of a
// resource, the second to apply is rejected.
func applyReserve(db *store, index uint64, r *ReserveRequest) (any, error) {
	if r.AttemptID == "" {
		return nil, reject(RejectInvalid, "attempt id is required")
	}
	task, err := getTask(db, r.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Backup {
		if err := backupAllowed(db, task, r); err != nil {
			return nil, err
		}
	} else if task.State != TaskPending {
		return nil, reject(RejectTaskNotPending, "task %s is %s", task.ID, task.State)
	}
	if !r.Backup && StampOf(r.Now).Before(task.NotBefore()) {
		return nil, reject(RejectTaskBackoff, "task %s may not be retried before %s", task.ID, task.NotBefore().Time().Format(time.RFC3339))
	}
	if r.Number != int(task.Attempts)+1 {
		return nil, reject(RejectAttemptNumber, "task %s: attempt %d proposed, next is %d", task.ID, r.Number, task.Attempts+1)
	}
	if _, exists := db.attempt(r.AttemptID); exists {
		return nil, reject(RejectConflict, "attempt id %q already exists", r.AttemptID)
	}
	// The record as stored and the usage beside it: a reservation changes
	// the usage alone.
	node, err := getNodeRecord(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session %d, placement was for %d", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	view := node.View() // a node without usage is stored with none
	if u := db.usageOf(node.ID); u != nil {
		view.Reserved, view.RunningAttempts = u.Reserved, u.Running
	}
	req := task.Request(r.Now, r.HeartbeatTTL)
	if task.BlacklistedOn(node) {
		req.Blacklist = map[string]bool{node.ID: true}
	}
	if reasons := scheduler.Check(&view, &req); len(reasons) > 0 {
		return nil, reject(string(reasons[0].Code), "node %s: %s", node.ID, reasons[0])
	}

	a := &Attempt{
		ID: r.AttemptID, TaskID: task.ID, Number: r.Number, NodeID: node.ID,
		State: AttemptReserved, LeaseVersion: index, Resources: task.Spec.Resources,
		ReservedAt: StampOf(r.Now), CreateIndex: index, ModifyIndex: index,
	}
	t := task.clone()
	t.Attempts = int16(r.Number)
	t.ModifyIndex = index
	if r.Backup {
		t.addEvent(index, r.Now, EventNodeSelected, "backup "+reservedMessage(a.Number, node.ID, r.Score, a.LeaseVersion)+": the current attempt is slow; the first to succeed wins")
	} else {
		t.State = TaskScheduled
		t.setCurrentAttempt(a.ID)
		t.setLastExplain("")
		t.addEvent(index, r.Now, EventNodeSelected, reservedMessage(a.Number, node.ID, r.Score, a.LeaseVersion))
	}
	db.putAttempt(a)
	db.addUsage(node.ID, a.Resources, +1, index)
	db.putTask(t)
	return &ReserveResult{Attempt: a}, nil
}

// AttemptResult answers an attempt report. Duplicate is set when the same
// report was already applied: it is accepted again without effect.
type AttemptResult struct {
	Attempt   *Attempt
	Task      *Task
	Duplicate bool
}

// staleReport rejects a report whose fencing token is not current, and
// records the refusal in the task's timeline.
func staleReport(db *store, index uint64, a *Attempt, lease uint64, now time.Time, why string) (any, error) {
	if task, err := getTask(db, a.TaskID); err == nil {
		t := task.clone()
		t.addEvent(index, now, EventStaleResultRejected, fmt.Sprintf("stale result rejected (attempt %d, lease %d): %s", a.Number, lease, why))
		t.ModifyIndex = index
		db.putTask(t)
	}
	return nil, reject(RejectStale, "attempt %s (number %d) lease %d: %s", a.ID, a.Number, lease, why)
}

func applyAttemptStart(db *store, index uint64, r *AttemptStartRequest) (any, error) {
	a, err := getAttempt(db, r.AttemptID)
	if err != nil {
		return nil, err
	}
	if a.LeaseVersion != r.LeaseVersion {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, fmt.Sprintf("current lease is %d", a.LeaseVersion))
	}
	if a.State == AttemptRunning {
		return &AttemptResult{Attempt: a, Duplicate: true}, nil
	}
	if a.State != AttemptReserved {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "attempt is "+string(a.State))
	}
	task, err := getTask(db, a.TaskID)
	if err != nil {
		return nil, err
	}
	backup := task.CurrentAttempt() != a.ID && backupOf(db, task) == a.ID
	// A task running on: its backup took over as its attempt before it
	// started (see endAttemptWith).
	runningOn := task.State == TaskRunning && task.CurrentAttempt() == a.ID
	if !backup && !runningOn && (task.CurrentAttempt() != a.ID || !ValidTaskTransition(task.State, TaskRunning)) {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "not the task's current attempt")
	}
	na := *a
	na.State = AttemptRunning
	na.StartedAt = StampOf(r.Now)
	na.ModifyIndex = index
	t := task.clone()
	t.ModifyIndex = index
	if backup {
		t.addEvent(index, r.Now, EventStarted, "backup "+startedMessage(a.Number, a.NodeID))
	} else {
		t.State = TaskRunning
		t.addEvent(index, r.Now, EventStarted, startedMessage(a.Number, a.NodeID))
	}
	db.putAttempt(&na)
	db.putTask(t)
	return &AttemptResult{Attempt: &na, Task: t}, nil
}

// agentSays records in the task's timeline what the agent reports of an
// attempt the cluster had already given up as LOST (it was reclaimed from
// a node declared DOWN): what became of the process, such as that the
// agent stopped it when its lease ran out. Once: a repeat of the report
// adds nothing.
func agentSays(db *store, index uint64, a *Attempt, r *AttemptEndRequest) {
	task, err := getTask(db, a.TaskID)
	if err != nil {
		return
	}
	msg := fmt.Sprintf("attempt %d on %s, as its agent reports: %s", a.Number, a.NodeID, r.Error)
	if slices.ContainsFunc(task.later(), func(e TimelineEvent) bool { return e.Message == msg }) { // never the submission
		return
	}
	t := task.clone()
	t.addEvent(index, r.Now, EventFinished, msg)
	t.ModifyIndex = index
	db.putTask(t)
}

// applyAttemptRun applies an attempt's start and then its end, as the two
// commands in one entry did before forms 2: the state after it is the
// state after them. The end's refusal is the command's; the start's
// outcome is answered beside the end's result.
func applyAttemptRun(db *store, index uint64, r *AttemptRunRequest) (any, error) {
	out := &AttemptRunResult{}
	start, err := applyAttemptStart(db, index, &AttemptStartRequest{AttemptID: r.End.AttemptID, LeaseVersion: r.End.LeaseVersion, Now: r.StartedAt})
	if err != nil {
		out.StartErr = err
	} else if res, ok := start.(*AttemptResult); ok {
		out.Start = res
	}
	end, err := applyAttemptEnd(db, index, &r.End)
	if err != nil {
		return nil, err
	}
	out.End, _ = end.(*AttemptResult)
	return out, nil
}

func applyAttemptEnd(db *store, index uint64, r *AttemptEndRequest) (any, error) {
	if !r.State.Terminal() {
		return nil, reject(RejectInvalid, "an attempt cannot end as %q", r.State)
	}
	a, err := getAttempt(db, r.AttemptID)
	if err != nil {
		return nil, err
	}
	if a.LeaseVersion != r.LeaseVersion {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, fmt.Sprintf("current lease is %d", a.LeaseVersion))
	}
	if a.State.Terminal() {
		if a.State == r.State && a.ExitCode == r.ExitCode {
			if r.State == AttemptLost && r.Error != "" {
				agentSays(db, index, a, r)
			}
			return &AttemptResult{Attempt: a, Duplicate: true}, nil
		}
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "attempt already ended "+string(a.State))
	}
	if r.OnlyReserved && a.State != AttemptReserved {
		// Nothing happened to the task: its attempt started, as it should.
		return nil, reject(RejectStale, "attempt %s (number %d) is %s: it is not reclaimed", a.ID, a.Number, a.State)
	}
	task, err := getTask(db, a.TaskID)
	if err != nil {
		return nil, err
	}
	if task.CurrentAttempt() != a.ID && backupOf(db, task) != a.ID {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "not the task's current attempt")
	}
	return finishAttempt(db, index, a, task, r)
}

// maxInputWaits bounds the attempts a task may make in all when its
// inputs keep being unavailable: past it, such an end counts as a lost
// attempt like any other.
const maxInputWaits = 1000

// endAttempt moves a live attempt to its terminal state, releases its
// reservation and moves the task on: done, failed for good, or back to
// PENDING for a new attempt.
func endAttempt(db *store, index uint64, a *Attempt, task *Task, r *AttemptEndRequest) (any, error) {
	return endAttemptWith(db, index, a, task, r, nil)
}

// endAttemptWith is endAttempt for one of a task's two racing attempts
// when the other, goesOn, lives on (see speculative.go): an end that is
// not a success leaves the task on goesOn, without a requeue or a
// verdict, its failure counted as any.
func endAttemptWith(db *store, index uint64, a *Attempt, task *Task, r *AttemptEndRequest, goesOn *Attempt) (any, error) {
	if !ValidAttemptTransition(a.State, r.State) {
		return nil, reject(RejectIllegalTransfer, "attempt %s: %s → %s", a.ID, a.State, r.State)
	}
	na := *a
	na.State = r.State
	na.FinishedAt = StampOf(r.Now)
	na.ExitCode = r.ExitCode
	na.OutputTail = r.OutputTail
	na.Error = r.Error
	na.ModifyIndex = index

	node, err := getNodeRecord(db, a.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.ModifyIndex = index
	db.addUsage(n.ID, a.Resources, -1, index)
	db.stampUsage(n)

	t := task.clone()
	t.ModifyIndex = index
	t.setCurrentAttempt("")
	detail := endedMessage(a.Number, a.NodeID, r.State, r.Error, r.ExitCode)
	next := TaskSucceeded
	switch r.State {
	case AttemptSucceeded:
		n.HealthyIndex = index
		n.Datasets = withOutputs(n.Datasets, task)
	case AttemptCancelled:
		next = TaskCancelled
	case AttemptLost:
		if goesOn != nil && r.InputUnavailable {
			next = t.State
			break
		}
		if r.InputUnavailable && int(t.Attempts) < maxInputWaits {
			// Neither the task's fault nor the node's: no attempt used, no
			// failure counted anywhere. It waits for the input's holder
			// to come back, or to be declared down (then the stage that
			// made the input runs again).
			next = TaskPending
			t.setNotBefore(StampOf(r.RetryAt))
			t.requeue(StampOf(r.Now))
			break
		}
		fallthrough
	default: // failed, timed out, lost: each one used an attempt
		t.Failures++
		// A lost attempt (node down, never started) says nothing about
		// whether the node can run this task: it does not count towards
		// the node's blacklisting.
		if r.State != AttemptLost {
			f := t.nodeFailures()[a.NodeID]
			if n.HealthyIndex > f.LastIndex {
				f.Count = 0 // the node proved healthy since: start counting afresh
			}
			f.Count++
			f.LastIndex = index
			if t.m().nodeFailures == nil {
				t.more.nodeFailures = map[string]NodeFailure{}
			}
			t.more.nodeFailures[a.NodeID] = f
		}
		switch {
		case goesOn != nil:
			next = t.State
		case int(t.Failures) < t.Spec.MaxAttempts:
			next = TaskPending
			t.setNotBefore(StampOf(r.RetryAt))
			t.requeue(StampOf(r.Now))
		case r.State == AttemptTimedOut:
			next = TaskTimedOut
		default:
			next = TaskFailed
		}
	}
	if goesOn == nil || next != t.State {
		if !ValidTaskTransition(t.State, next) {
			return nil, reject(RejectIllegalTransfer, "task %s: %s → %s", t.ID, t.State, next)
		}
	}
	t.State = next
	t.addEvent(index, r.Now, EventFinished, detail)
	if goesOn != nil && next != TaskSucceeded && next != TaskCancelled {
		t.setCurrentAttempt(goesOn.ID)
		t.addEvent(index, r.Now, EventQueued, fmt.Sprintf("attempt %d on %s goes on as the task's attempt", goesOn.Number, goesOn.NodeID))
		next = -1 // no requeue, no verdict: the task waits for goesOn
	}
	switch next {
	case TaskPending:
		if r.State == AttemptLost && r.InputUnavailable && t.Failures == task.Failures {
			t.addEvent(index, r.Now, EventInputUnavailable, fmt.Sprintf("attempt %d on %s could not fetch an input from a live node: it counts against neither the task's attempts nor the node; waiting for the input's holder to come back or be declared down (the stage that made it then runs again)", a.Number, a.NodeID))
		}
		msg := fmt.Sprintf("requeued for attempt %d of %d", t.Failures+1, t.Spec.MaxAttempts)
		if r.RetryAt.After(r.Now) {
			msg += fmt.Sprintf(" after a %s backoff", r.RetryAt.Sub(r.Now).Round(time.Millisecond))
		}
		t.addEvent(index, r.Now, EventQueued, msg)
	case TaskFailed, TaskTimedOut:
		t.addEvent(index, r.Now, EventFailed, fmt.Sprintf("gave up after %d attempts", t.Attempts))
	}
	if note := recordOutcome(db, index, n, &na, task, r.Now); note != "" {
		t.addEvent(index, r.Now, EventBlame, note)
	}
	db.putAttempt(&na)
	db.putNode(n)
	db.putTask(t)
	if t.State.Terminal() {
		if err := jobTaskEnded(db, index, t, r.Now); err != nil {
			return nil, err
		}
	}
	return &AttemptResult{Attempt: &na, Task: t}, nil
}

// withOutputs adds to a node's datasets the outputs a task that succeeded
// there left (its agent keeps them): known at once, so the stages reading
// them are drawn to the node from the moment they start, before the
// agent's next report gives their sizes. It returns ds itself when the
// task declares no output.
func withOutputs(ds []scheduler.Dataset, task *Task) []scheduler.Dataset {
	if len(task.Spec.Outputs) == 0 {
		return ds
	}
	out := slices.Clone(ds)
	for _, o := range task.Spec.Outputs {
		name := o
		if _, _, _, stage := JobOfTask(task.ID); stage {
			name = OutputDataset(task.ID, o)
		}
		i, found := slices.BinarySearchFunc(out, name, func(d scheduler.Dataset, name string) int { return strings.Compare(d.Name, name) })
		if !found && len(out) < MaxDatasets {
			out = slices.Insert(out, i, scheduler.Dataset{Name: name})
		}
	}
	return out
}

// The messages of the events every attempt records (reserved, started,
// ended) are built without fmt: every replica makes them for every
// attempt, on the apply path.

func reservedMessage(number int, node string, score int64, lease uint64) string {
	b := make([]byte, 0, 96)
	b = append(b, "attempt "...)
	b = strconv.AppendInt(b, int64(number), 10)
	b = append(b, " reserved on "...)
	b = append(b, node...)
	b = append(b, " (score "...)
	b = strconv.AppendInt(b, score, 10)
	b = append(b, ", lease "...)
	b = strconv.AppendUint(b, lease, 10)
	return string(append(b, ')'))
}

func startedMessage(number int, node string) string {
	return "attempt " + strconv.Itoa(number) + " started on " + node
}

func endedMessage(number int, node string, state AttemptState, errText string, exitCode int) string {
	msg := "attempt " + strconv.Itoa(number) + " on " + node + " " + string(state)
	if errText != "" {
		return msg + ": " + errText
	}
	if state != AttemptSucceeded {
		return msg + " (exit code " + strconv.Itoa(exitCode) + ")"
	}
	return msg
}
