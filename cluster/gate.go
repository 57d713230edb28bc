package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// errShuttingDown refuses a proposal made once the replica has begun to
// shut down: nothing was handed to raft, so the command did not happen.
var errShuttingDown = errors.New("the replica is shutting down")

// proposalGate admits proposals to raft until the replica shuts down.
// Shutdown closes it before it drains raft with a barrier, so that every
// entry raft was given is answered before raft stops: raft itself never
// answers an entry committed but not yet applied when it shuts down, and
// a goroutine waiting on such an entry would wait forever. Safe for
// concurrent use; a proposal in progress holds the gate open until raft
// has taken it.
type proposalGate struct {
	mu     sync.RWMutex
	closed bool
}

// apply hands cmd to r, unless the gate is closed.
func (g *proposalGate) apply(r *raft.Raft, cmd []byte, timeout time.Duration) raft.ApplyFuture {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return refusedFuture{}
	}
	return r.Apply(cmd, timeout)
}

// close admits no more proposals; it returns once those in progress have
// been handed to raft.
func (g *proposalGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// refusedFuture answers a proposal the gate refused.
type refusedFuture struct{}

func (refusedFuture) Error() error  { return errShuttingDown }
func (refusedFuture) Index() uint64 { return 0 }
func (refusedFuture) Response() any { return nil }

// gatedRaft is a replica's raft as the coalescer proposes through it.
type gatedRaft struct{ r *replica }

func (g gatedRaft) Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	return g.r.gate.apply(g.r.raft, cmd, timeout)
}
