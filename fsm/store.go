package fsm

import (
	"slices"
	"strings"

	"github.com/google/btree"

	"herd/internal/idtable"
	"herd/spec"
)

// store holds the replicated records in ordered copy-on-write B-trees: one
// tree per record kind ordered by id, and one per secondary index ordered
// by (key, id). Trees hold pointers to immutable records, so an index
// entry costs one pointer, and a record is replaced, never modified.
//
// A store has one writer, the apply goroutine. A reader gets its own
// store from clone, in O(1): the trees then share every node, and the
// writer copies a node the first time it changes it after the clone. So
// applying an entry copies only the paths it touches, once per view
// taken, and a reader never blocks the writer nor sees a later write.
type store struct {
	servers *btree.BTreeG[*Server]
	nodes   *btree.BTreeG[*Node]
	// usage is what each node's live attempts hold, by node id (see
	// nodeUsage).
	usage *btree.BTreeG[*nodeUsage]

	tasks       *btree.BTreeG[*Task] // by id
	tasksByKey  *btree.BTreeG[*Task] // by idempotency key; tasks without one are left out
	tasksByStat *btree.BTreeG[*Task] // by (state, id); resting tasks only (see indexedByState)
	taskCounts  map[TaskState]int

	attempts       *btree.BTreeG[*Attempt] // by id
	attemptsByTask *btree.BTreeG[*Attempt] // by (task, id)
	liveByNode     *btree.BTreeG[*Attempt] // by (node, id); reserved and running only
	endedByNode    *btree.BTreeG[*Attempt] // by (node, id); the others

	// acl holds tokens and the audit trail.
	acl aclStore
	// keyring is the gossip pool's keyring (its slices are never written
	// in place, so views share them).
	keyring GossipKeyring
	// classes is the fleet's record per task class; profile the committed
	// profile settings (nil: DefaultProfileSettings).
	classes *btree.BTreeG[*ClassStats]
	profile *ProfileSettings
	// fleet is the fleet's record across classes: the latest success of
	// each node at anything, and the nodes that failed everything before
	// any success elsewhere (nil until something succeeded or failed).
	fleet *ClassStats
	// jobs by id, and by idempotency key (jobs without one left out);
	// activeJobs by id, the scheduled and running ones alone: the
	// leader's loops visit those every tick, while a schedule's finished
	// runs pile up beside them.
	jobs       *btree.BTreeG[*Job]
	jobsByKey  *btree.BTreeG[*Job]
	activeJobs *btree.BTreeG[*Job]

	// The pending feed: tasks that entered, left or changed in the pending
	// set, in apply order, so that the leader can keep its queue current
	// without re-reading the backlog. Not replicated state: each
	// store starts its own feed (a restore starts over). A view keeps the
	// slice as it was; the writer only appends past it or starts a new
	// array when trimming.
	feed     *feedToken
	feedBase uint64 // feed position of changes[0]
	changes  []PendingChange

	// The event stream (see recordEvents): events in apply order, and the
	// first index from which it holds every event.
	events     []StreamEvent
	eventsFrom uint64

	// Writer only (nil in views): records by id for the writer's own
	// lookups, which are most of what applying a command reads, and the
	// watch topics changed by the entry being applied.
	w *writerMaps
}

type writerMaps struct {
	// Tasks and attempts by id in tables (about a third of a Go map's
	// size per record, and they shrink once retention forgets records).
	tasks    *idtable.Table[Task]
	attempts *idtable.Table[Attempt]
	nodes    map[string]*Node
	usage    map[string]*nodeUsage
	touched  map[string]struct{}
	interner *interner
	// index is the entry being applied (0 while restoring a snapshot).
	index uint64
	// succeeding is the task whose success is being applied, before its
	// record says so (see confirmedTasks); "" otherwise.
	succeeding string
}

// btreeDegree sets the fan-out: nodes of up to 63 items keep a 1M-record
// tree four levels deep while a copied path stays a few KiB.
const btreeDegree = 32

func newStore() *store {
	return &store{
		servers:        btree.NewG(btreeDegree, func(a, b *Server) bool { return a.ID < b.ID }),
		nodes:          btree.NewG(btreeDegree, func(a, b *Node) bool { return a.ID < b.ID }),
		usage:          btree.NewG(btreeDegree, func(a, b *nodeUsage) bool { return a.NodeID < b.NodeID }),
		tasks:          btree.NewG(btreeDegree, func(a, b *Task) bool { return a.ID < b.ID }),
		tasksByKey:     btree.NewG(btreeDegree, func(a, b *Task) bool { return a.Spec.IdempotencyKey < b.Spec.IdempotencyKey }),
		tasksByStat:    btree.NewG(btreeDegree, lessTaskState),
		taskCounts:     map[TaskState]int{},
		attempts:       btree.NewG(btreeDegree, func(a, b *Attempt) bool { return a.ID < b.ID }),
		attemptsByTask: btree.NewG(btreeDegree, lessAttemptTask),
		liveByNode:     btree.NewG(btreeDegree, lessAttemptNode),
		endedByNode:    btree.NewG(btreeDegree, lessAttemptNode),
		acl:            newACLStore(),
		classes:        btree.NewG(btreeDegree, func(a, b *ClassStats) bool { return a.Class < b.Class }),
		jobs:           btree.NewG(btreeDegree, func(a, b *Job) bool { return a.ID < b.ID }),
		jobsByKey:      btree.NewG(btreeDegree, func(a, b *Job) bool { return a.Spec.IdempotencyKey < b.Spec.IdempotencyKey }),
		activeJobs:     btree.NewG(btreeDegree, func(a, b *Job) bool { return a.ID < b.ID }),
		feed:           &feedToken{},
		w: &writerMaps{
			tasks:    idtable.New(func(t *Task) string { return t.ID }),
			attempts: idtable.New(func(a *Attempt) string { return a.ID }),
			nodes:    map[string]*Node{},
			usage:    map[string]*nodeUsage{},
			touched:  map[string]struct{}{}, interner: newInterner(),
		},
	}
}

func lessTaskState(a, b *Task) bool {
	if a.State != b.State {
		return a.State < b.State
	}
	return a.ID < b.ID
}

func lessAttemptTask(a, b *Attempt) bool {
	if a.TaskID != b.TaskID {
		return a.TaskID < b.TaskID
	}
	return a.ID < b.ID
}

func lessAttemptNode(a, b *Attempt) bool {
	if a.NodeID != b.NodeID {
		return a.NodeID < b.NodeID
	}
	return a.ID < b.ID
}

// clone returns a read-only view sharing every tree node with s. It must
// not run concurrently with a write to s.
func (s *store) clone() *store {
	counts := make(map[TaskState]int, len(s.taskCounts))
	for k, v := range s.taskCounts {
		counts[k] = v
	}
	return &store{
		servers: s.servers.Clone(), nodes: s.nodes.Clone(), usage: s.usage.Clone(),
		tasks: s.tasks.Clone(), tasksByKey: s.tasksByKey.Clone(), tasksByStat: s.tasksByStat.Clone(), taskCounts: counts,
		attempts: s.attempts.Clone(), attemptsByTask: s.attemptsByTask.Clone(), liveByNode: s.liveByNode.Clone(),
		endedByNode: s.endedByNode.Clone(), acl: s.acl.clone(), keyring: s.keyring,
		classes: s.classes.Clone(), profile: s.profile, fleet: s.fleet, jobs: s.jobs.Clone(), jobsByKey: s.jobsByKey.Clone(),
		activeJobs: s.activeJobs.Clone(),
		feed:       s.feed, feedBase: s.feedBase, changes: s.changes,
		events: s.events, eventsFrom: s.eventsFrom,
	}
}

// feedToken tells one store's pending feed from another's.
type feedToken struct{ _ byte }

// feedKeep is how many pending changes the feed keeps at least: a leader
// that falls further behind reads the pending set whole instead. The
// leader reads it every pass; a follower holds it for nothing, so small.
const feedKeep = 1 << 14

// pendingChanged appends a task to the pending feed, saying whether the
// change left it pending.
func (s *store) pendingChanged(id string, pending bool) {
	s.changes = append(s.changes, PendingChange{ID: id, Pending: pending})
	if len(s.changes) >= 2*feedKeep {
		drop := len(s.changes) - feedKeep
		s.changes = append(make([]PendingChange, 0, 2*feedKeep), s.changes[drop:]...)
		s.feedBase += uint64(drop)
	}
}

// Lookups: the writer's maps, or a view's trees (with a probe record).

func (s *store) task(id string) (*Task, bool) {
	if s.w != nil {
		t := s.w.tasks.Get(id)
		return t, t != nil
	}
	return s.tasks.Get(&Task{ID: id})
}

func (s *store) taskByKey(key string) (*Task, bool) {
	return s.tasksByKey.Get(&Task{Spec: TaskSpec{IdempotencyKey: key}})
}

func (s *store) attempt(id string) (*Attempt, bool) {
	if s.w != nil {
		a := s.w.attempts.Get(id)
		return a, a != nil
	}
	return s.attempts.Get(&Attempt{ID: id})
}

// node returns a node's record with its current usage (see current).
func (s *store) node(id string) (*Node, bool) {
	n, ok := s.nodeRecord(id)
	if !ok {
		return nil, false
	}
	return s.current(n), true
}

// nodeRecord returns a node's record as stored: its Reserved,
// RunningAttempts and ModifyIndex may lag behind its usage.
func (s *store) nodeRecord(id string) (*Node, bool) {
	if s.w != nil {
		n, ok := s.w.nodes[id]
		return n, ok
	}
	return s.nodes.Get(&Node{ID: id})
}

func (s *store) class(name string) *ClassStats {
	c, _ := s.classes.Get(&ClassStats{Class: name})
	return c
}

func (s *store) putClass(c *ClassStats) { s.classes.ReplaceOrInsert(c) }

func (s *store) job(id string) (*Job, bool) { return s.jobs.Get(&Job{ID: id}) }

func (s *store) jobByKey(key string) (*Job, bool) {
	return s.jobsByKey.Get(&Job{Spec: spec.Job{IdempotencyKey: key}})
}

// deleteJob removes a job and its entries in the indexes.
func (s *store) deleteJob(j *Job) {
	old, existed := s.jobs.Delete(j)
	if !existed {
		return
	}
	if k, ok := s.jobsByKey.Get(old); ok && k.ID == old.ID {
		s.jobsByKey.Delete(old)
	}
	s.activeJobs.Delete(old)
	s.touch(topicJobs)
}

// ofLiveJob tells whether a task is a stage's of a job that has not
// finished.
func (s *store) ofLiveJob(taskID string) bool {
	jobID, _, _, ok := JobOfTask(taskID)
	if !ok {
		return false
	}
	j, ok := s.job(jobID)
	return ok && !JobTerminal(j.State)
}

func (s *store) putJob(j *Job) {
	old, _ := s.jobs.ReplaceOrInsert(j)
	if old != nil {
		s.recordGained(TopicJob, j.ID, j.State, old.Timeline, j.Timeline)
	} else {
		s.recordGained(TopicJob, j.ID, j.State, nil, j.Timeline)
	}
	// A scheduled job's runs carry its spec, key included: the key names
	// the schedule, not its latest run.
	if j.Spec.IdempotencyKey != "" && j.ScheduledBy == "" {
		s.jobsByKey.ReplaceOrInsert(j)
	}
	if j.State == JobScheduled || j.State == JobRunning {
		s.activeJobs.ReplaceOrInsert(j)
	} else {
		s.activeJobs.Delete(j)
	}
	s.touch(topicJobs)
}

// profileSettings are the committed profile settings, or the defaults.
func (s *store) profileSettings() ProfileSettings {
	if s.profile != nil {
		return *s.profile
	}
	return DefaultProfileSettings()
}

func (s *store) server(id string) (*Server, bool) {
	return s.servers.Get(&Server{ID: id})
}

// Writes (the apply goroutine only).

func (s *store) putServer(v *Server) { s.servers.ReplaceOrInsert(v) }

func (s *store) deleteServer(v *Server) { s.servers.Delete(v) }

// putNode inserts or replaces a node, which must be a record no view has
// seen yet: it is stamped with the node's current usage.
func (s *store) putNode(n *Node) {
	s.stampUsage(n)
	old, _ := s.nodes.ReplaceOrInsert(n)
	if old != nil {
		s.recordGained(TopicNode, n.ID, string(n.Liveness), old.Events, n.Events)
	} else {
		s.recordGained(TopicNode, n.ID, string(n.Liveness), nil, n.Events)
	}
	s.w.nodes[n.ID] = n
	s.touch(topicNodes)
	if old == nil || old.SessionGeneration != n.SessionGeneration || old.Liveness != n.Liveness {
		// The node's assignments answer carries both: its agent's watch
		// wakes (a registration a follower applies after the agent asked,
		// a verdict), as it does for its attempts.
		s.touch(topicNodePre + n.ID)
	}
}

// putTask inserts or replaces a task and keeps its indexes.
func (s *store) putTask(t *Task) {
	old, existed := s.tasks.ReplaceOrInsert(t)
	s.w.tasks.Put(t)
	if index, ok := s.applying(); ok {
		added := t.trailingAt(index)
		if existed {
			added -= old.trailingAt(index)
		}
		if added > 0 {
			s.recordEvents(TopicTask, t.ID, t.State.String(), t.lastEvents(added))
		}
	}
	if existed && old.State != t.State && indexedByState(old.State) {
		s.tasksByStat.Delete(old)
	}
	if existed {
		s.uncount(old.State)
		if old.State == TaskPending {
			s.touch(topicPending)
			if t.State != TaskPending {
				s.pendingChanged(t.ID, false)
			}
		}
		if old.Spec.IdempotencyKey != "" && old.Spec.IdempotencyKey != t.Spec.IdempotencyKey {
			s.tasksByKey.Delete(old)
		}
	}
	if indexedByState(t.State) {
		s.tasksByStat.ReplaceOrInsert(t)
	}
	s.taskCounts[t.State]++
	if t.State == TaskPending {
		s.touch(topicPending)
		s.pendingChanged(t.ID, true)
	}
	if t.Spec.IdempotencyKey != "" {
		s.tasksByKey.ReplaceOrInsert(t)
	}
}

func (s *store) uncount(st TaskState) {
	if s.taskCounts[st]--; s.taskCounts[st] <= 0 {
		delete(s.taskCounts, st)
	}
}

func (s *store) deleteTask(t *Task) {
	old, existed := s.tasks.Delete(t)
	if !existed {
		return
	}
	s.w.tasks.Delete(old.ID)
	if indexedByState(old.State) {
		s.tasksByStat.Delete(old)
	}
	s.uncount(old.State)
	if old.State == TaskPending {
		s.touch(topicPending)
		s.pendingChanged(old.ID, false)
	}
	if old.Spec.IdempotencyKey != "" {
		s.tasksByKey.Delete(old)
	}
}

// indexedByState tells whether the state index holds tasks in a state.
// A scheduled or running task is left out: it has exactly one live
// attempt (CheckInvariants), so the live attempts list those tasks, and
// a placement then costs no state-index writes but the pending task's
// removal; the tasks listed by state are read from there instead.
func indexedByState(st TaskState) bool { return st != TaskScheduled && st != TaskRunning }

// byNode is the node index an attempt belongs in: live and ended
// attempts are kept apart so that a reservation writes one node index
// and the live one stays as small as the cluster's slots.
func (s *store) byNode(a *Attempt) *btree.BTreeG[*Attempt] {
	if a.State.Live() {
		return s.liveByNode
	}
	return s.endedByNode
}

// putAttempt inserts or replaces an attempt and keeps its indexes. An
// attempt's task and node never change; its state does.
func (s *store) putAttempt(a *Attempt) {
	old, existed := s.attempts.ReplaceOrInsert(a)
	s.w.attempts.Put(a)
	if existed && old.State.Live() != a.State.Live() {
		s.byNode(old).Delete(old)
	}
	s.attemptsByTask.ReplaceOrInsert(a)
	s.byNode(a).ReplaceOrInsert(a)
	s.touch(topicNodePre + a.NodeID)
}

func (s *store) deleteAttempt(a *Attempt) {
	old, existed := s.attempts.Delete(a)
	if !existed {
		return
	}
	s.w.attempts.Delete(old.ID)
	s.attemptsByTask.Delete(old)
	s.byNode(old).Delete(old)
	s.touch(topicNodePre + old.NodeID)
}

// Range scans over (key, id) indexes.

func (s *store) tasksInState(state TaskState, after string, fn func(*Task) bool) {
	if !indexedByState(state) {
		s.activeTasks(state, after, fn)
		return
	}
	s.tasksByStat.AscendGreaterOrEqual(&Task{State: state, ID: after}, func(t *Task) bool {
		if t.State != state {
			return false
		}
		if t.ID == after && after != "" {
			return true
		}
		return fn(t)
	})
}

// activeTasks visits the scheduled or running tasks after the id after,
// in id order, through their live attempts (bounded by the cluster's
// slots).
func (s *store) activeTasks(state TaskState, after string, fn func(*Task) bool) {
	var active []*Task
	s.liveByNode.Ascend(func(a *Attempt) bool {
		if t, ok := s.task(a.TaskID); ok && t.State == state && t.CurrentAttempt() == a.ID && t.ID > after {
			active = append(active, t)
		}
		return true
	})
	visitByID(active, func(t *Task) string { return t.ID }, fn)
}

// visitByID calls fn on records gathered from several places (or in
// another order) in id order, until it returns false.
func visitByID[T any](records []T, id func(T) string, fn func(T) bool) {
	slices.SortFunc(records, func(a, b T) int { return strings.Compare(id(a), id(b)) })
	for _, r := range records {
		if !fn(r) {
			return
		}
	}
}

func attemptID(a *Attempt) string { return a.ID }

func (s *store) attemptsOfTask(taskID string, fn func(*Attempt) bool) {
	s.attemptsByTask.AscendGreaterOrEqual(&Attempt{TaskID: taskID}, func(a *Attempt) bool { return a.TaskID == taskID && fn(a) })
}

// attemptsOnNode visits a node's live attempts, or all of them, in id
// order.
func (s *store) attemptsOnNode(live bool, nodeID string, fn func(*Attempt) bool) {
	if live {
		attemptsOfNodeIn(s.liveByNode, nodeID, fn)
		return
	}
	var all []*Attempt
	collect := func(a *Attempt) bool { all = append(all, a); return true }
	attemptsOfNodeIn(s.liveByNode, nodeID, collect)
	attemptsOfNodeIn(s.endedByNode, nodeID, collect)
	visitByID(all, attemptID, fn)
}

// attemptsOfNodeIn visits a node's attempts in one of the node indexes.
func attemptsOfNodeIn(tree *btree.BTreeG[*Attempt], nodeID string, fn func(*Attempt) bool) {
	tree.AscendGreaterOrEqual(&Attempt{NodeID: nodeID}, func(a *Attempt) bool { return a.NodeID == nodeID && fn(a) })
}

// attemptsInState visits the attempts in one state in id order. Live
// states are read from the live index (bounded by the cluster's slots);
// ended ones need a scan of every attempt, which only tests and
// operators ask for.
func (s *store) attemptsInState(state AttemptState, fn func(*Attempt) bool) {
	if !state.Live() {
		s.attempts.Ascend(func(a *Attempt) bool { return a.State != state || fn(a) })
		return
	}
	var live []*Attempt
	s.liveByNode.Ascend(func(a *Attempt) bool {
		if a.State == state {
			live = append(live, a)
		}
		return true
	})
	visitByID(live, attemptID, fn)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
