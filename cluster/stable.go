package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// guardedStable is raft's stable store (its term and vote) with a guard
// for shutdown. raft.Shutdown does not wait for the transport's handlers:
// a heartbeat answered during the shutdown may still save a newer term,
// and raft panics when that write fails because the store has been
// closed. close waits for writes in progress, then drops later ones. A
// dropped term is safe to lose: the replica is shutting down, and it cast
// no vote in that term (votes are saved before they are granted, and none
// is granted once raft has shut down).
type guardedStable struct {
	mu     sync.RWMutex
	closed bool
	s      raft.StableStore
}

func (g *guardedStable) Set(key, val []byte) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil
	}
	return g.s.Set(key, val)
}

func (g *guardedStable) Get(key []byte) ([]byte, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.s.Get(key)
}

func (g *guardedStable) SetUint64(key []byte, val uint64) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil
	}
	return g.s.SetUint64(key, val)
}

func (g *guardedStable) GetUint64(key []byte) (uint64, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.s.GetUint64(key)
}

// close waits for the writes in progress; later writes are dropped.
func (g *guardedStable) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
