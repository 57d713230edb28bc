package cluster

import (
	"sync"

	"herd/scheduler"
)

// maxPassesInFlight is how many passes' placements the leader lets Raft
// commit at once. With two, the next pass is decided while the previous
// one replicates and applies, instead of the two taking turns.
const maxPassesInFlight = 2

// inflight tracks the placements this leader proposed and its FSM has not
// yet answered, so that a pass decided meanwhile neither proposes the same
// task again nor fills the capacity they took. A pass reads it before it
// takes its view of the state: a commit that finished before that read is
// in the view, and one still running is in the read (and perhaps partly
// in the view too, which only makes the pass more cautious).
type inflight struct {
	mu      sync.Mutex
	passes  int
	tasks   map[string]struct{}
	nodes   map[string]booking
	changed chan struct{} // closed and replaced when a pass's commit ends
	// futile is set when the latest finished pass had every placement
	// rejected: the loop then waits for a change instead of retrying.
	futile bool
}

type booking struct {
	resources scheduler.Resources
	attempts  int
}

// proposal is one placement handed to Raft.
type proposal struct {
	taskID, nodeID string
	resources      scheduler.Resources
}

func newInflight() *inflight {
	return &inflight{tasks: map[string]struct{}{}, nodes: map[string]booking{}, changed: make(chan struct{})}
}

// snapshot copies the in-flight tasks and bookings (nil when none).
func (f *inflight) snapshot() (map[string]struct{}, map[string]booking) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.tasks) == 0 {
		return nil, nil
	}
	tasks := make(map[string]struct{}, len(f.tasks))
	for id := range f.tasks {
		tasks[id] = struct{}{}
	}
	nodes := make(map[string]booking, len(f.nodes))
	for id, b := range f.nodes {
		nodes[id] = b
	}
	return tasks, nodes
}

func (f *inflight) add(ps []proposal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes++
	for _, p := range ps {
		f.tasks[p.taskID] = struct{}{}
		b := f.nodes[p.nodeID]
		b.resources = b.resources.Add(p.resources)
		b.attempts++
		f.nodes[p.nodeID] = b
	}
}

// done removes a pass's proposals once its commit returned, and wakes
// the loop.
func (f *inflight) done(ps []proposal, accepted int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes--
	for _, p := range ps {
		delete(f.tasks, p.taskID)
		b := f.nodes[p.nodeID]
		b.resources = b.resources.Sub(p.resources)
		if b.attempts--; b.attempts <= 0 {
			delete(f.nodes, p.nodeID)
		} else {
			f.nodes[p.nodeID] = b
		}
	}
	f.futile = len(ps) > 0 && accepted == 0
	close(f.changed)
	f.changed = make(chan struct{})
}

// state reports how many passes are in flight, whether the last one was
// futile, and a channel that closes when either changes.
func (f *inflight) state() (passes int, futile bool, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.passes, f.futile, f.changed
}
