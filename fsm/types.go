package fsm

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"herd/scheduler"
)

// TaskState is the lifecycle state of a task. Transitions only move forward:
// PENDING → SCHEDULED → RUNNING → one terminal state (a retry is a new
// attempt that returns the task to PENDING, never a terminal state undone).
// It is a small number (every task record holds one) that reads and
// writes as its name; the zero value is no state, named "". (int8, not
// uint8: go vet flags string(s) for it, which would yield one rune.)
type TaskState int8

// Task states.
const (
	TaskPending TaskState = iota + 1
	TaskScheduled
	TaskRunning
	TaskSucceeded
	TaskFailed
	TaskTimedOut
	TaskCancelled
)

var taskStateNames = [...]string{
	0: "", TaskPending: "PENDING", TaskScheduled: "SCHEDULED", TaskRunning: "RUNNING",
	TaskSucceeded: "SUCCEEDED", TaskFailed: "FAILED", TaskTimedOut: "TIMED_OUT", TaskCancelled: "CANCELLED",
}

// String is the state's name.
func (s TaskState) String() string {
	if s >= 0 && int(s) < len(taskStateNames) {
		return taskStateNames[s]
	}
	return fmt.Sprintf("TaskState(%d)", int8(s))
}

// ParseTaskState reads a state's name (as String writes it).
func ParseTaskState(name string) (TaskState, bool) {
	for s, n := range taskStateNames {
		if n == name {
			return TaskState(s), true
		}
	}
	return 0, false
}

// MarshalText writes the state's name (JSON, map keys included).
func (s TaskState) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(taskStateNames) {
		return nil, fmt.Errorf("unknown task state %d", int8(s))
	}
	return []byte(taskStateNames[s]), nil
}

// UnmarshalText reads a state's name; an unknown name is an error.
func (s *TaskState) UnmarshalText(b []byte) error {
	v, ok := ParseTaskState(string(b))
	if !ok {
		return fmt.Errorf("unknown task state %q", b)
	}
	*s = v
	return nil
}

// Terminal reports whether no further transition is possible.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of the known task states.
func (s TaskState) Valid() bool { return s >= TaskPending && s <= TaskCancelled }

// AttemptState is the lifecycle state of one attempt of a task.
type AttemptState string

// Attempt states.
const (
	AttemptReserved  AttemptState = "RESERVED"
	AttemptRunning   AttemptState = "RUNNING"
	AttemptSucceeded AttemptState = "SUCCEEDED"
	AttemptFailed    AttemptState = "FAILED"
	AttemptTimedOut  AttemptState = "TIMED_OUT"
	AttemptLost      AttemptState = "LOST"
	AttemptCancelled AttemptState = "CANCELLED"
)

// TaskSpec is what a client submitted, with defaults already applied by the
// leader, so every replica stores exactly the same values. The name and
// idempotency key are the task's own; the rest, its shape, is usually the
// same for every task of a batch, so a replica keeps one copy of each
// shape (see interner) and a pending task's record is 176 bytes, not 320.
type TaskSpec struct {
	Name           string `json:"name"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// The shape's fields read as the spec's own (t.Spec.Command). A spec
	// decoded without any of them has no shape; Validate refuses it, and
	// the store never holds one.
	*TaskShape
}

// TaskShape (shape_gen.go) is generated from spec.Task.

// TimelineEvent is one milestone in a task's life, with the reason for it.
type TimelineEvent struct {
	Index   uint64    `json:"index"`
	Time    Stamp     `json:"time"`
	Kind    EventKind `json:"kind"`
	Message string    `json:"message"`
}

// Task is the replicated record of a submitted task. Records stored in the
// state are immutable: every change copies the record first.
//
// A pending task is the bulk of a backlog, so its record keeps to a
// 112-byte size class: what only some tasks have (an attempt, a backoff,
// node failures, an explanation, events after the submission, the
// submission's time once it is requeued) lives in a second record made
// on the first such change, and the submission event is kept as its
// message, its time being QueuedAt's until a requeue (its index is
// CreateIndex). The JSON form is the plain one, every field named, the
// timeline whole.
type Task struct {
	ID string
	// State sits next to ID: the state index compares both on every step
	// of its searches, and one cache line per record is cheaper than two.
	State TaskState
	// Attempts counts the attempts made; Failures the failed, timed-out
	// and lost ones among them (at most spec.MaxAttemptsLimit).
	Attempts int16
	Failures int16
	// requeued is set once QueuedAt moved on from the submission, whose
	// time more then keeps (the flag fits in the word State starts).
	requeued bool
	// currentSlow is set while the current attempt is marked slow (see
	// AttemptSlowRequest): its time so far counted against its node. It
	// fits in the same word.
	currentSlow bool
	Spec        TaskSpec
	CreateIndex uint64
	ModifyIndex uint64
	// QueuedAt is when the task last entered PENDING (aging counts from
	// it): its submission, until it is requeued (see requeue).
	QueuedAt Stamp
	// submitted is the submission event's message; "" only for a record
	// with an empty timeline, which the FSM itself never makes.
	submitted string
	more      *taskMore
}

// taskMore is the part of a task record that a task waiting for its
// first placement does not have.
type taskMore struct {
	currentAttempt string
	submittedAt    Stamp // the submission's time, once requeued is set
	notBefore      Stamp
	nodeFailures   map[string]NodeFailure
	lastExplain    string
	timeline       []TimelineEvent // after the submission event
}

// newTask is a pending task record submitted at index and at, its
// timeline the submission event with msg.
func newTask(id string, spec TaskSpec, index uint64, at time.Time, msg string) *Task {
	return &Task{
		ID: id, Spec: spec, State: TaskPending, QueuedAt: StampOf(at), CreateIndex: index, ModifyIndex: index, submitted: msg,
	}
}

// submittedStamp is when the task was submitted.
func (t *Task) submittedStamp() Stamp {
	if t.requeued {
		return t.more.submittedAt
	}
	return t.QueuedAt
}

// requeue sets QueuedAt to at, the time the task enters PENDING again,
// keeping its submission's time. Only a record being changed may call it.
func (t *Task) requeue(at Stamp) {
	if !t.requeued {
		t.m().submittedAt, t.requeued = t.QueuedAt, true
	}
	t.QueuedAt = at
}

// SubmittedAt is when the task was submitted: the time of its first
// timeline event, which the timeline always keeps.
func (t *Task) SubmittedAt() time.Time {
	if t.submitted == "" {
		return time.Time{}
	}
	return t.submittedStamp().Time()
}

// CurrentAttempt is the attempt holding the task's reservation ("" when
// none does).
func (t *Task) CurrentAttempt() string {
	if t.more == nil {
		return ""
	}
	return t.more.currentAttempt
}

// NotBefore delays a retry (backoff); zero means schedulable now.
func (t *Task) NotBefore() Stamp {
	if t.more == nil {
		return 0
	}
	return t.more.notBefore
}

// LastExplain is the latest "why is it waiting" summary recorded.
func (t *Task) LastExplain() string {
	if t.more == nil {
		return ""
	}
	return t.more.lastExplain
}

// nodeFailures counts this task's failures per node, for blacklisting.
// The map is the record's own: read it, never write it.
func (t *Task) nodeFailures() map[string]NodeFailure {
	if t.more == nil {
		return nil
	}
	return t.more.nodeFailures
}

// later is the rest of the timeline, after the submission event.
func (t *Task) later() []TimelineEvent {
	if t.more == nil {
		return nil
	}
	return t.more.timeline
}

// first is the submission event, if the timeline has one.
func (t *Task) first() (TimelineEvent, bool) {
	if t.submitted == "" {
		return TimelineEvent{}, false
	}
	return TimelineEvent{Index: t.CreateIndex, Time: t.submittedStamp(), Kind: EventQueued, Message: t.submitted}, true
}

// TimelineLen is how many events the timeline holds.
func (t *Task) TimelineLen() int {
	n := len(t.later())
	if t.submitted != "" {
		n++
	}
	return n
}

// Timeline returns the task's timeline, oldest first, in a new slice.
func (t *Task) Timeline() []TimelineEvent {
	out := make([]TimelineEvent, 0, t.TimelineLen())
	if ev, ok := t.first(); ok {
		out = append(out, ev)
	}
	return append(out, t.later()...)
}

// LastEvent is the timeline's latest event.
func (t *Task) LastEvent() (TimelineEvent, bool) {
	if l := t.later(); len(l) > 0 {
		return l[len(l)-1], true
	}
	return t.first()
}

// lastEvents is the timeline's last n events (n at most TimelineLen).
func (t *Task) lastEvents(n int) []TimelineEvent {
	if l := t.later(); n <= len(l) {
		return l[len(l)-n:]
	}
	all := t.Timeline()
	return all[len(all)-n:]
}

// trailingAt counts the events at the end of the timeline made at index.
func (t *Task) trailingAt(index uint64) int {
	l := t.later()
	n := trailingAt(l, index)
	if n == len(l) && t.submitted != "" && t.CreateIndex == index {
		n++
	}
	return n
}

// m is the record's second part, made if it has none yet. Only a record
// being changed (a clone, or one not yet stored) may call it.
// CurrentSlow reports whether the task's current attempt is marked slow.
func (t *Task) CurrentSlow() bool { return t.currentSlow }

func (t *Task) m() *taskMore {
	if t.more == nil {
		t.more = &taskMore{}
	}
	return t.more
}

func (t *Task) setCurrentAttempt(id string) {
	t.currentSlow = false
	if id != "" || t.more != nil {
		t.m().currentAttempt = id
	}
}

func (t *Task) setNotBefore(s Stamp) {
	if s != 0 || t.more != nil {
		t.m().notBefore = s
	}
}

func (t *Task) setLastExplain(s string) {
	if s != "" || t.more != nil {
		t.m().lastExplain = s
	}
}

// clone copies a task for changing it. The timeline is shared: events are
// only ever added through appendEvent, which writes a new array.
func (t *Task) clone() *Task {
	c := *t
	if t.more != nil {
		m := *t.more
		if t.more.nodeFailures != nil {
			m.nodeFailures = make(map[string]NodeFailure, len(t.more.nodeFailures))
			for k, v := range t.more.nodeFailures {
				m.nodeFailures[k] = v
			}
		}
		c.more = &m
	}
	return &c
}

// taskJSON is a task's JSON form (snapshots, tests).
type taskJSON struct {
	ID             string                 `json:"id"`
	State          TaskState              `json:"state"`
	Attempts       int16                  `json:"attempts"`
	Failures       int16                  `json:"failures"`
	Spec           TaskSpec               `json:"spec"`
	CreateIndex    uint64                 `json:"create_index"`
	ModifyIndex    uint64                 `json:"modify_index"`
	CurrentAttempt string                 `json:"current_attempt,omitempty"`
	QueuedAt       Stamp                  `json:"queued_at"`
	NotBefore      Stamp                  `json:"not_before,omitzero"`
	NodeFailures   map[string]NodeFailure `json:"node_failures,omitempty"`
	CurrentSlow    bool                   `json:"current_attempt_slow,omitempty"`
	LastExplain    string                 `json:"last_explain,omitempty"`
	Timeline       []TimelineEvent        `json:"timeline"`
}

// MarshalJSON writes the task with every field named and its whole
// timeline.
func (t Task) MarshalJSON() ([]byte, error) { return json.Marshal(t.toJSON()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Task) UnmarshalJSON(b []byte) error {
	var j taskJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	return t.fromJSON(&j)
}

// toJSON is the task's JSON form. Snapshots encode it directly: a type
// with its own MarshalJSON has its output scanned once more.
func (t *Task) toJSON() *taskJSON {
	return &taskJSON{
		ID: t.ID, State: t.State, Attempts: t.Attempts, Failures: t.Failures, Spec: t.Spec,
		CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex, CurrentAttempt: t.CurrentAttempt(),
		QueuedAt: t.QueuedAt, NotBefore: t.NotBefore(), NodeFailures: t.nodeFailures(), LastExplain: t.LastExplain(),
		Timeline: t.Timeline(), CurrentSlow: t.currentSlow,
	}
}

// fromJSON sets t from its JSON form. A timeline must begin with the
// submission event (made at the task's CreateIndex, of kind queued), as
// every timeline the FSM makes does.
func (t *Task) fromJSON(j *taskJSON) error {
	*t = Task{
		ID: j.ID, State: j.State, Attempts: j.Attempts, Failures: j.Failures, Spec: j.Spec,
		CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex, QueuedAt: j.QueuedAt,
	}
	if len(j.Timeline) > 0 {
		first := j.Timeline[0]
		if first.Index != j.CreateIndex || first.Kind != EventQueued || first.Message == "" {
			return fmt.Errorf("task %q: its timeline does not begin with its submission at index %d", j.ID, j.CreateIndex)
		}
		t.submitted = first.Message
		if first.Time != j.QueuedAt {
			t.m().submittedAt, t.requeued = first.Time, true
		}
	}
	t.setCurrentAttempt(j.CurrentAttempt)
	t.setNotBefore(j.NotBefore)
	t.setLastExplain(j.LastExplain)
	if len(j.NodeFailures) > 0 {
		t.m().nodeFailures = j.NodeFailures
	}
	t.currentSlow = j.CurrentSlow && j.CurrentAttempt != ""

	if len(j.Timeline) > 1 {
		t.m().timeline = slices.Clone(j.Timeline[1:])
	}
	return nil
}

// Live reports whether an attempt still holds its reservation.
func (s AttemptState) Live() bool { return s == AttemptReserved || s == AttemptRunning }

// Terminal reports whether an attempt has ended.
func (s AttemptState) Terminal() bool {
	switch s {
	case AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled:
		return true
	}
	return false
}

// NodeFailure counts a task's failures on one node since that node was
// last healthy.
type NodeFailure struct {
	Count     int    `json:"count"`
	LastIndex uint64 `json:"last_index"`
}

// Attempt is one try of a task on one node. LeaseVersion is the fencing
// token: a result is accepted only with the current attempt's lease.
type Attempt struct {
	ID           string              `json:"id"`
	TaskID       string              `json:"task_id"`
	Number       int                 `json:"number"`
	NodeID       string              `json:"node_id"`
	State        AttemptState        `json:"state"`
	LeaseVersion uint64              `json:"lease_version"`
	Resources    scheduler.Resources `json:"resources"`
	ReservedAt   Stamp               `json:"reserved_at"`
	StartedAt    Stamp               `json:"started_at,omitzero"`
	FinishedAt   Stamp               `json:"finished_at,omitzero"`
	ExitCode     int                 `json:"exit_code"`
	OutputTail   string              `json:"output_tail,omitempty"`
	// Error is why the attempt ended as it did, as its timeline says it
	// ("killed: memory limit 32 MB reached", "node down: ..."); empty
	// for a success and a plain non-zero exit.
	Error       string `json:"error,omitempty"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Node is the replicated record of a worker node.
type Node struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Version is the build of the node's agent, as it registered.
	Version           string               `json:"version,omitempty"`
	Labels            map[string]string    `json:"labels,omitempty"`
	Capabilities      map[string][]string  `json:"capabilities,omitempty"`
	Resources         scheduler.Resources  `json:"resources"`
	Slots             int                  `json:"slots"`
	Weight            int                  `json:"weight"`
	Management        scheduler.Management `json:"management"`
	Liveness          scheduler.Liveness   `json:"liveness"`
	Scheduling        scheduler.Scheduling `json:"scheduling"`
	SessionGeneration uint64               `json:"session_generation"`
	RegisteredAt      Stamp                `json:"registered_at"`
	SessionStartedAt  Stamp                `json:"session_started_at"`
	// SessionIndex is the index of the entry that began the session: an
	// attempt reserved before it (its lease version is lower) was reserved
	// for an earlier session.
	SessionIndex uint64 `json:"session_index,omitempty"`
	// RegistrationToken identifies one registration request, so that its
	// retries do not start new sessions.
	RegistrationToken string              `json:"registration_token,omitempty"`
	LastHeartbeat     Stamp               `json:"last_heartbeat"`
	Reserved          scheduler.Resources `json:"reserved"`
	RunningAttempts   int                 `json:"running_attempts"`
	// HealthyIndex is the index of the node's last successful attempt: a
	// node blacklisted for a task before that has since proven itself.
	HealthyIndex uint64 `json:"healthy_index"`
	// Conditions are the problems the node's agent reports (a full
	// disk), sorted by type: while any stands, nothing new is placed on
	// the node. They outlive a re-registration; the agent reports anew
	// after each.
	Conditions []NodeCondition `json:"conditions,omitempty"`
	// Profile is what the node's agent last measured of it (nil before
	// any report); Datasets the data it holds, sorted by name.
	Profile  *NodeProfile        `json:"profile,omitempty"`
	Datasets []scheduler.Dataset `json:"datasets,omitempty"`
	// DataAddress is where the node's agent serves its datasets.
	DataAddress string `json:"data_address,omitempty"`
	// Tier is the node's tier and how it got there.
	Tier TierState `json:"tier"`
	// Quarantine, while set, keeps new work off the node: its attempts of
	// a class failed fast while the class succeeded elsewhere.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
	// HealthCheck is the health check the node was asked to run and what
	// it last answered.
	HealthCheck HealthCheckState `json:"health_check,omitzero"`
	// RebenchRequested counts the re-measurements asked of the agent.
	RebenchRequested uint64 `json:"rebench_requested,omitempty"`
	// History is what the node's attempts showed, per task class, and
	// Uptime its liveness over the last day: both derived at apply time
	// from committed facts, with the commands' timestamps.
	History *NodeHistory `json:"history,omitempty"`
	Uptime  []UptimeMark `json:"uptime,omitempty"`
	// Events is the node's recent history: registrations, liveness
	// verdicts with the observation behind each, drains, conditions,
	// tiers and quarantines.
	Events      []TimelineEvent `json:"events,omitempty"`
	CreateIndex uint64          `json:"create_index"`
	ModifyIndex uint64          `json:"modify_index"`
}

// NodeCondition is one problem a node's agent reports.
type NodeCondition struct {
	Type    string `json:"type"`    // what is wrong, e.g. "disk_full"
	Message string `json:"message"` // why, for people
	Since   Stamp  `json:"since"`   // when the cluster first heard of it
}

// Limits on reported conditions, enforced at the API and again at apply.
const (
	MaxNodeConditions       = 8
	MaxConditionTypeBytes   = 64
	MaxConditionMessageSize = 512
)

// maxNodeEvents bounds a node's event history.
const maxNodeEvents = 50

// clone copies a node for changing it; the events are shared (see
// Task.clone).
func (n *Node) clone() *Node {
	c := *n
	return &c
}

func (n *Node) addEvent(index uint64, at time.Time, kind EventKind, msg string) {
	n.Events = appendEvent(n.Events, TimelineEvent{Index: index, Time: StampOf(at), Kind: kind, Message: msg}, maxNodeEvents, 0)
}

// appendEvent returns a new slice holding events and ev, never writing
// into events' array (an older record may share it). Beyond limit, the
// first keep events and the latest ones are kept.
func appendEvent(events []TimelineEvent, ev TimelineEvent, limit, keep int) []TimelineEvent {
	n := len(events) + 1
	if n <= limit {
		out := make([]TimelineEvent, n)
		copy(out, events)
		out[n-1] = ev
		return out
	}
	out := make([]TimelineEvent, 0, limit)
	out = append(out, events[:keep]...)
	out = append(out, events[len(events)-(limit-keep-1):]...)
	return append(out, ev)
}

// Server is the replicated metadata of a scheduler replica: how to reach
// its HTTP API, so followers can forward writes to the leader.
type Server struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	// GossipAddress is where the replica gossips ("" without gossip).
	GossipAddress string `json:"gossip_address,omitempty"`
	// CommandForms is the command forms the replica reads (see
	// CommandForms).
	CommandForms int `json:"command_forms,omitempty"`
	// Version is the replica's build (internal/version).
	Version     string `json:"version,omitempty"`
	ModifyIndex uint64 `json:"modify_index"`
}
