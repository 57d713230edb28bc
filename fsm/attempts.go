package fsm

import (
	"fmt"
	"strconv"
	"time"

	"herd/scheduler"
)

// Rejection codes of placements and attempt reports, besides the
// scheduler's own reason codes (a re-check failing a filter rule is
// rejected with that rule's code).
const (
	RejectTaskNotPending  = "task_not_pending"
	RejectTaskBackoff     = "task_backing_off"
	RejectAttemptNumber   = "attempt_number_mismatch"
	RejectSessionChanged  = "session_changed"
	RejectStale           = "stale_result"
	RejectIllegalTransfer = "illegal_transition"
)

// maxTimeline bounds a task's timeline: the first event (queued) and the
// latest ones are kept.
const maxTimeline = 200

// View is the node as the scheduler sees it.
func (n *Node) View() scheduler.Node {
	return scheduler.Node{
		ID: n.ID, Management: n.Management, Liveness: n.Liveness, Scheduling: n.Scheduling,
		LastHeartbeat: n.LastHeartbeat.Time(), Capabilities: n.Capabilities, Labels: n.Labels,
		Resources: n.Resources, Reserved: n.Reserved, Slots: n.Slots,
		RunningAttempts: n.RunningAttempts, Weight: n.Weight,
	}
}

// Request is the task's placement question at now. The blacklist is
// filled by the caller (see BlacklistedOn).
func (t *Task) Request(now time.Time, ttl time.Duration) scheduler.Request {
	return scheduler.Request{
		TaskID: t.ID, Capability: t.Spec.Capability, CapabilityVersion: t.Spec.CapabilityVersion,
		RequiredLabels: t.Spec.RequiredLabels, PreferredLabels: t.Spec.PreferredLabels,
		Resources: t.Spec.Resources, Now: now, HeartbeatTTL: ttl,
		FailedOn: failedOn(t.NodeFailures),
	}
}

func failedOn(m map[string]NodeFailure) map[string]int {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int, len(m))
	for id, f := range m {
		out[id] = f.Count
	}
	return out
}

// BlacklistedOn reports whether the task failed twice on the node since
// the node last proved healthy (succeeded at any task).
func (t *Task) BlacklistedOn(n *Node) bool {
	f, ok := t.NodeFailures[n.ID]
	return ok && f.Count >= 2 && n.HealthyIndex < f.LastIndex
}

// Blacklist returns the set of nodes the task must avoid.
func (t *Task) Blacklist(nodeByID func(string) *Node) map[string]bool {
	var out map[string]bool
	for id := range t.NodeFailures {
		if n := nodeByID(id); n != nil && t.BlacklistedOn(n) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

func (t *Task) addEvent(index uint64, at time.Time, kind EventKind, msg string) {
	t.Timeline = appendEvent(t.Timeline, TimelineEvent{Index: index, Time: StampOf(at), Kind: kind, Message: msg}, maxTimeline, 1)
}

// ReserveResult is the response to an accepted reservation.
type ReserveResult struct {
	Attempt *Attempt
}

func getTask(db *store, id string) (*Task, error) {
	if t, ok := db.task(id); ok {
		return t, nil
	}
	return nil, reject(RejectNotFound, "task %q not found", id)
}

func getNode(db *store, id string) (*Node, error) {
	if n, ok := db.node(id); ok {
		return n, nil
	}
	return nil, reject(RejectNotFound, "node %q not found", id)
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
	if task.State != TaskPending {
		return nil, reject(RejectTaskNotPending, "task %s is %s", task.ID, task.State)
	}
	if StampOf(r.Now).Before(task.NotBefore) {
		return nil, reject(RejectTaskBackoff, "task %s may not be retried before %s", task.ID, task.NotBefore.Time().Format(time.RFC3339))
	}
	if r.Number != int(task.Attempts)+1 {
		return nil, reject(RejectAttemptNumber, "task %s: attempt %d proposed, next is %d", task.ID, r.Number, task.Attempts+1)
	}
	if _, exists := db.attempt(r.AttemptID); exists {
		return nil, reject(RejectConflict, "attempt id %q already exists", r.AttemptID)
	}
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session %d, placement was for %d", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	view := node.View()
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
	n := node.clone()
	n.Reserved = n.Reserved.Add(a.Resources)
	n.RunningAttempts++
	n.ModifyIndex = index
	t := task.clone()
	t.State = TaskScheduled
	t.Attempts = int16(r.Number)
	t.CurrentAttempt = a.ID
	t.ModifyIndex = index
	t.LastExplain = ""
	t.addEvent(index, r.Now, EventNodeSelected, reservedMessage(a.Number, n.ID, r.Score, a.LeaseVersion))
	db.putAttempt(a)
	db.putNode(n)
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
	if task.CurrentAttempt != a.ID || !ValidTaskTransition(task.State, TaskRunning) {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "not the task's current attempt")
	}
	na := *a
	na.State = AttemptRunning
	na.StartedAt = StampOf(r.Now)
	na.ModifyIndex = index
	t := task.clone()
	t.State = TaskRunning
	t.ModifyIndex = index
	t.addEvent(index, r.Now, EventStarted, startedMessage(a.Number, a.NodeID))
	db.putAttempt(&na)
	db.putTask(t)
	return &AttemptResult{Attempt: &na, Task: t}, nil
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
			return &AttemptResult{Attempt: a, Duplicate: true}, nil
		}
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "attempt already ended "+string(a.State))
	}
	task, err := getTask(db, a.TaskID)
	if err != nil {
		return nil, err
	}
	if task.CurrentAttempt != a.ID {
		return staleReport(db, index, a, r.LeaseVersion, r.Now, "not the task's current attempt")
	}
	return endAttempt(db, index, a, task, r)
}

// endAttempt moves a live attempt to its terminal state, releases its
// reservation and moves the task on: done, failed for good, or back to
// PENDING for a new attempt.
func endAttempt(db *store, index uint64, a *Attempt, task *Task, r *AttemptEndRequest) (any, error) {
	if !ValidAttemptTransition(a.State, r.State) {
		return nil, reject(RejectIllegalTransfer, "attempt %s: %s → %s", a.ID, a.State, r.State)
	}
	na := *a
	na.State = r.State
	na.FinishedAt = StampOf(r.Now)
	na.ExitCode = r.ExitCode
	na.OutputTail = r.OutputTail
	na.ModifyIndex = index

	node, err := getNode(db, a.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.Reserved = n.Reserved.Sub(a.Resources)
	n.RunningAttempts--
	n.ModifyIndex = index

	t := task.clone()
	t.ModifyIndex = index
	t.CurrentAttempt = ""
	detail := endedMessage(a.Number, a.NodeID, r.State, r.Error, r.ExitCode)
	next := TaskSucceeded
	switch r.State {
	case AttemptSucceeded:
		n.HealthyIndex = index
	case AttemptCancelled:
		next = TaskCancelled
	default: // failed, timed out, lost: each one used an attempt
		t.Failures++
		// A lost attempt (node down, never started) says nothing about
		// whether the node can run this task: it does not count towards
		// the node's blacklisting.
		if r.State != AttemptLost {
			f := t.NodeFailures[a.NodeID]
			if n.HealthyIndex > f.LastIndex {
				f.Count = 0 // the node proved healthy since: start counting afresh
			}
			f.Count++
			f.LastIndex = index
			if t.NodeFailures == nil {
				t.NodeFailures = map[string]NodeFailure{}
			}
			t.NodeFailures[a.NodeID] = f
		}
		switch {
		case int(t.Attempts) < t.Spec.MaxAttempts:
			next = TaskPending
			t.NotBefore = StampOf(r.RetryAt)
			t.QueuedAt = StampOf(r.Now)
		case r.State == AttemptTimedOut:
			next = TaskTimedOut
		default:
			next = TaskFailed
		}
	}
	if !ValidTaskTransition(t.State, next) {
		return nil, reject(RejectIllegalTransfer, "task %s: %s → %s", t.ID, t.State, next)
	}
	t.State = next
	t.addEvent(index, r.Now, EventFinished, detail)
	switch next {
	case TaskPending:
		msg := fmt.Sprintf("requeued for attempt %d of %d", t.Attempts+1, t.Spec.MaxAttempts)
		if r.RetryAt.After(r.Now) {
			msg += fmt.Sprintf(" after a %s backoff", r.RetryAt.Sub(r.Now).Round(time.Millisecond))
		}
		t.addEvent(index, r.Now, EventQueued, msg)
	case TaskFailed, TaskTimedOut:
		t.addEvent(index, r.Now, EventFailed, fmt.Sprintf("gave up after %d attempts", t.Attempts))
	}
	db.putAttempt(&na)
	db.putNode(n)
	db.putTask(t)
	return &AttemptResult{Attempt: &na, Task: t}, nil
}

func applyNodeDrain(db *store, index uint64, r *NodeDrainRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.Management == scheduler.ManagementRetired {
		return nil, reject(RejectConflict, "node %s is retired", node.ID)
	}
	n := node.clone()
	n.Management = scheduler.ManagementActive
	if r.Enable {
		n.Management = scheduler.ManagementDraining
	}
	if n.Management != node.Management {
		n.addEvent(index, r.Now, EventManagement, fmt.Sprintf("%s → %s", node.Management, n.Management))
	}
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyNodeEligibility(db *store, index uint64, r *NodeEligibilityRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.Scheduling = scheduler.SchedulingIneligible
	if r.Eligible {
		n.Scheduling = scheduler.SchedulingEligible
	}
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyHeartbeat(db *store, index uint64, r *HeartbeatRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session is %d, heartbeat is for %d: register again", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	if !StampOf(r.Now).After(node.LastHeartbeat) {
		return node, nil
	}
	n := node.clone()
	n.LastHeartbeat = StampOf(r.Now)
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyExplain(db *store, index uint64, r *ExplainRequest) (any, error) {
	task, err := getTask(db, r.TaskID)
	if err != nil {
		return nil, err
	}
	if task.State != TaskPending || task.LastExplain == r.Summary {
		return nil, nil
	}
	t := task.clone()
	// Shared: a waiting backlog mostly waits for the same reasons.
	t.LastExplain = internString(r.Summary)
	t.ModifyIndex = index
	t.addEvent(index, r.Now, EventWaiting, t.LastExplain)
	db.putTask(t)
	return nil, nil
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
	if task.CurrentAttempt != "" {
		a, err := getAttempt(db, task.CurrentAttempt)
		if err != nil {
			return nil, err
		}
		if a.State.Live() {
			res, err := endAttempt(db, index, a, task, &AttemptEndRequest{
				AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptCancelled, ExitCode: -1, Error: reason, Now: r.Now,
			})
			if err != nil {
				return nil, err
			}
			return &CancelResult{Task: res.(*AttemptResult).Task}, nil
		}
	}
	if !ValidTaskTransition(task.State, TaskCancelled) {
		return nil, reject(RejectIllegalTransfer, "task %s: %s → %s", task.ID, task.State, TaskCancelled)
	}
	t := task.clone()
	t.State = TaskCancelled
	t.ModifyIndex = index
	t.addEvent(index, r.Now, EventCancelled, reason)
	db.putTask(t)
	return &CancelResult{Task: t}, nil
}

// NodeDownResult lists the attempts a node-down reclaimed.
type NodeDownResult struct {
	Node      *Node
	Reclaimed []string
}

func applyNodeDown(db *store, index uint64, r *NodeDownRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	// Collect first: ending an attempt rewrites the index being scanned.
	var live []*Attempt
	db.attemptsOnNode(true, node.ID, func(a *Attempt) bool { live = append(live, a); return true })
	out := &NodeDownResult{}
	for _, a := range live {
		task, err := getTask(db, a.TaskID)
		if err != nil {
			return nil, err
		}
		if _, err := endAttempt(db, index, a, task, &AttemptEndRequest{
			AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptLost, ExitCode: -1,
			Error: "reclaimed: node down: " + r.Reason, Now: r.Now, RetryAt: r.Now,
		}); err != nil {
			return nil, err
		}
		out.Reclaimed = append(out.Reclaimed, a.ID)
	}
	// Re-read: endAttempt released the reservations on the node record.
	node, err = getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.Liveness = scheduler.LivenessDown
	n.ModifyIndex = index
	n.addEvent(index, r.Now, EventDown, fmt.Sprintf("declared DOWN: %s; %d attempts reclaimed", r.Reason, len(out.Reclaimed)))
	out.Node = n
	db.putNode(n)
	return out, nil
}

func applyNodeLiveness(db *store, index uint64, r *NodeLivenessRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	want := scheduler.Liveness(r.Liveness)
	if want != scheduler.LivenessReady && want != scheduler.LivenessSuspect {
		return nil, reject(RejectInvalid, "liveness %q: only READY and SUSPECT are set this way", r.Liveness)
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session %d, verdict was for %d", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	if node.Liveness == scheduler.LivenessDown {
		return nil, reject(RejectConflict, "node %s is DOWN: it must register again", node.ID)
	}
	if node.Liveness == want {
		return node, nil
	}
	n := node.clone()
	n.addEvent(index, r.Now, livenessEvent(want), fmt.Sprintf("%s → %s: %s", n.Liveness, want, r.Reason))
	n.Liveness = want
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
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

// The messages of the events every attempt records (reserved, started,
// ended), built without fmt: they are made on every replica for every
// attempt, and Sprintf was a tenth of applying a reservation.

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
