package fsm

import (
	"errors"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Table names of the in-memory state.
const (
	tableServers  = "servers"
	tableNodes    = "nodes"
	tableTasks    = "tasks"
	tableAttempts = "attempts"
)

// ErrNotFound is returned by lookups of records that do not exist.
var ErrNotFound = errors.New("not found")

// idempotencyIndexer indexes tasks by Spec.IdempotencyKey (a nested field,
// which memdb's reflective indexers cannot reach). Tasks without a key are
// left out of the index.
type idempotencyIndexer struct{}

func (idempotencyIndexer) FromObject(obj any) (bool, []byte, error) {
	t, ok := obj.(*Task)
	if !ok {
		return false, nil, fmt.Errorf("idempotency index: unexpected %T", obj)
	}
	if t.Spec.IdempotencyKey == "" {
		return false, nil, nil
	}
	return true, []byte(t.Spec.IdempotencyKey + "\x00"), nil
}

func (idempotencyIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("idempotency index: want one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("idempotency index: argument must be a string, got %T", args[0])
	}
	return []byte(s + "\x00"), nil
}

// liveNodeIndexer indexes only live (reserved or running) attempts by
// node: an agent's assignment watch reads its node's live attempts, and
// must not wade through every attempt the node ever ran.
type liveNodeIndexer struct{}

func (liveNodeIndexer) FromObject(obj any) (bool, []byte, error) {
	a, ok := obj.(*Attempt)
	if !ok {
		return false, nil, fmt.Errorf("live-node index: unexpected %T", obj)
	}
	if !a.State.Live() {
		return false, nil, nil
	}
	return true, []byte(a.NodeID + "\x00"), nil
}

func (liveNodeIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("live-node index: want one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("live-node index: argument must be a string, got %T", args[0])
	}
	return []byte(s + "\x00"), nil
}

func schema() *memdb.DBSchema {
	id := func(field string) *memdb.IndexSchema {
		return &memdb.IndexSchema{Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableServers: {Name: tableServers, Indexes: map[string]*memdb.IndexSchema{"id": id("ID")}},
		tableNodes:   {Name: tableNodes, Indexes: map[string]*memdb.IndexSchema{"id": id("ID")}},
		tableTasks: {Name: tableTasks, Indexes: map[string]*memdb.IndexSchema{
			"id":          id("ID"),
			"state":       {Name: "state", Indexer: &memdb.StringFieldIndex{Field: "State"}},
			"idempotency": {Name: "idempotency", Unique: true, AllowMissing: true, Indexer: idempotencyIndexer{}},
		}},
		tableAttempts: {Name: tableAttempts, Indexes: map[string]*memdb.IndexSchema{
			"id":        id("ID"),
			"task":      {Name: "task", Indexer: &memdb.StringFieldIndex{Field: "TaskID"}},
			"node":      {Name: "node", Indexer: &memdb.StringFieldIndex{Field: "NodeID"}},
			"live_node": {Name: "live_node", AllowMissing: true, Indexer: liveNodeIndexer{}},
			"state":     {Name: "state", Indexer: &memdb.StringFieldIndex{Field: "State"}},
		}},
	}}
}

func newMemDB() *memdb.MemDB {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		// The schema is a constant of this package: failing here is a
		// programming error, caught by every test.
		panic(fmt.Sprintf("fsm: invalid schema: %v", err))
	}
	return db
}

// State is a consistent, read-only view of the replicated state at one
// applied index. It is cheap to take (memdb's immutable radix trees) and
// never blocks Apply. Records returned must not be modified.
type State struct {
	txn   *memdb.Txn
	index uint64
}

// Index is the Raft index of the last entry applied into this view.
func (s *State) Index() uint64 { return s.index }

// Task returns the task with the given id.
func (s *State) Task(id string) (*Task, error) {
	raw, err := s.txn.First(tableTasks, "id", id)
	if err != nil {
		return nil, fmt.Errorf("lookup task %q: %w", id, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	return raw.(*Task), nil
}

// TaskByIdempotencyKey returns the task submitted with key, if any.
func (s *State) TaskByIdempotencyKey(key string) (*Task, error) {
	return taskByKey(s.txn, key)
}

func taskByKey(txn *memdb.Txn, key string) (*Task, error) {
	raw, err := txn.First(tableTasks, "idempotency", key)
	if err != nil {
		return nil, fmt.Errorf("lookup idempotency key: %w", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("idempotency key %q: %w", key, ErrNotFound)
	}
	return raw.(*Task), nil
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
	var (
		it  memdb.ResultIterator
		err error
	)
	switch {
	case f.State != "":
		it, err = s.txn.Get(tableTasks, "state", string(f.State))
	case f.After != "":
		it, err = s.txn.LowerBound(tableTasks, "id", f.After)
	default:
		it, err = s.txn.Get(tableTasks, "id")
	}
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	var out []*Task
	for raw := it.Next(); raw != nil; raw = it.Next() {
		t := raw.(*Task)
		if f.After != "" && t.ID <= f.After {
			continue
		}
		out = append(out, t)
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
	}
	return out, nil
}

// CountTasks returns how many tasks are in each state.
func (s *State) CountTasks() (map[TaskState]int, error) {
	it, err := s.txn.Get(tableTasks, "id")
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	out := map[TaskState]int{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out[raw.(*Task).State]++
	}
	return out, nil
}

// Servers lists replica metadata in id order.
func (s *State) Servers() ([]*Server, error) {
	it, err := s.txn.Get(tableServers, "id")
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", err)
	}
	var out []*Server
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Server))
	}
	return out, nil
}

// Server returns one replica's metadata.
func (s *State) Server(id string) (*Server, error) {
	raw, err := s.txn.First(tableServers, "id", id)
	if err != nil {
		return nil, fmt.Errorf("lookup server %q: %w", id, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("server %q: %w", id, ErrNotFound)
	}
	return raw.(*Server), nil
}

// Node returns one worker node.
func (s *State) Node(id string) (*Node, error) {
	raw, err := s.txn.First(tableNodes, "id", id)
	if err != nil {
		return nil, fmt.Errorf("lookup node %q: %w", id, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("node %q: %w", id, ErrNotFound)
	}
	return raw.(*Node), nil
}

// Nodes lists worker nodes in id order.
func (s *State) Nodes() ([]*Node, error) {
	it, err := s.txn.Get(tableNodes, "id")
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []*Node
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Node))
	}
	return out, nil
}

// AttemptsOfTask lists a task's attempts in id order.
func (s *State) AttemptsOfTask(taskID string) ([]*Attempt, error) {
	it, err := s.txn.Get(tableAttempts, "task", taskID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of %q: %w", taskID, err)
	}
	var out []*Attempt
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Attempt))
	}
	return out, nil
}

// PendingTasks lists tasks waiting for placement, in id order, and adds
// to ws (when not nil) a channel that closes when that set may change.
func (s *State) PendingTasks(ws memdb.WatchSet) ([]*Task, error) {
	it, err := s.txn.Get(tableTasks, "state", string(TaskPending))
	if err != nil {
		return nil, fmt.Errorf("list pending tasks: %w", err)
	}
	if ws != nil {
		ws.Add(it.WatchCh())
	}
	var out []*Task
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Task))
	}
	return out, nil
}

// WatchNodes adds to ws a channel that closes when any node changes.
func (s *State) WatchNodes(ws memdb.WatchSet) error {
	it, err := s.txn.Get(tableNodes, "id")
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	ws.Add(it.WatchCh())
	return nil
}

// Attempt returns one attempt.
func (s *State) Attempt(id string) (*Attempt, error) {
	raw, err := s.txn.First(tableAttempts, "id", id)
	if err != nil {
		return nil, fmt.Errorf("lookup attempt %q: %w", id, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("attempt %q: %w", id, ErrNotFound)
	}
	return raw.(*Attempt), nil
}

// LiveAttemptsOnNode lists a node's reserved and running attempts in id
// order, and adds a channel to ws that fires when that list changes.
func (s *State) LiveAttemptsOnNode(nodeID string, ws memdb.WatchSet) ([]*Attempt, error) {
	return s.attemptsBy("live_node", nodeID, ws)
}

// AttemptsOnNode lists a node's attempts (live and ended) in id order, and
// adds a channel to ws that fires when any of them changes.
func (s *State) AttemptsOnNode(nodeID string, ws memdb.WatchSet) ([]*Attempt, error) {
	return s.attemptsBy("node", nodeID, ws)
}

func (s *State) attemptsBy(index, nodeID string, ws memdb.WatchSet) ([]*Attempt, error) {
	it, err := s.txn.Get(tableAttempts, index, nodeID)
	if err != nil {
		return nil, fmt.Errorf("list attempts on %q by %s: %w", nodeID, index, err)
	}
	if ws != nil {
		ws.Add(it.WatchCh())
	}
	var out []*Attempt
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Attempt))
	}
	return out, nil
}

func (s *State) AttemptsInState(state AttemptState) ([]*Attempt, error) {
	it, err := s.txn.Get(tableAttempts, "state", string(state))
	if err != nil {
		return nil, fmt.Errorf("list %s attempts: %w", state, err)
	}
	var out []*Attempt
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Attempt))
	}
	return out, nil
}

// FinishedTasks lists terminal tasks whose last event is before cutoff, at
// most limit of them, oldest states first (for retention).
func (s *State) FinishedTasks(cutoff time.Time, limit int) ([]string, error) {
	var out []string
	for _, st := range []TaskState{TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled} {
		it, err := s.txn.Get(tableTasks, "state", string(st))
		if err != nil {
			return nil, fmt.Errorf("list %s tasks: %w", st, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			t := raw.(*Task)
			if n := len(t.Timeline); n > 0 && t.Timeline[n-1].Time.Before(cutoff) {
				out = append(out, t.ID)
				if len(out) >= limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}
