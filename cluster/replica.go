package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/fsm"
)

// replica is one member of the Raft group: raft with its transport and
// stores, the FSM it applies to, and proposing commands (through the
// coalescer and the proposal gate) and waiting for raft's answers, never
// unconditionally. It implements proposer, so the endpoint families and
// the leader's loops hold it, not the Server; the Server embeds it and
// adds what a replica serves (HTTP, gossip, formation, the loops'
// lifecycle).
type replica struct {
	id           string
	applyTimeout time.Duration
	logger       hclog.Logger
	now          func() time.Time
	// stop is closed when the server shuts down: no wait outlives it.
	stop <-chan struct{}

	fsm       *fsm.FSM
	raft      *raft.Raft
	transport *raft.NetworkTransport
	// rpcs is the transport as raft sees it: unpipelined, with the leader
	// watch's look at pre-vote requests.
	rpcs *preVoteLook
	// watch hastens a follower's check for a lost leader.
	watch  *leaderWatch
	store  logStore
	stable *guardedStable // store, as raft's stable store
	snaps  *raft.FileSnapshotStore
	// proposals commits concurrent single commands together;
	// entryWaiters are its goroutines waiting for entries in flight.
	proposals    *coalescer
	entryWaiters sync.WaitGroup
	// gate admits proposals to raft until Shutdown closes it.
	gate proposalGate
	// leaderReady is true once this leader's Barrier completed.
	leaderReady atomic.Bool
	// entries, when set, counts the batch entries commitBatches committed.
	entries *atomic.Uint64
}

// ID is this replica's server id.
func (r *replica) ID() string { return r.id }

// Now returns the replica's clock reading.
func (r *replica) Now() time.Time { return r.now() }

// IsLeader reports whether this replica is the leader and has finished
// establishing leadership (its Barrier applied everything before it).
func (r *replica) IsLeader() bool {
	return r.raft.State() == raft.Leader && r.leaderReady.Load()
}

// State is the state this replica has applied.
func (r *replica) State() *fsm.State { return r.fsm.State() }

// await is awaitFuture until ctx ends or the server shuts down.
func (r *replica) await(ctx context.Context, f raft.Future) error {
	return awaitFuture(ctx, r.stop, f)
}

// commitBatches applies commands in batch entries and returns every
// command's response in order (nil responses for entries that failed).
func (r *replica) commitBatches(ctx context.Context, cmds [][]byte, batchSize int) []any {
	if len(cmds) == 0 {
		return nil
	}
	var futures []raft.ApplyFuture
	var sizes []int
	for start := 0; start < len(cmds); start += batchSize {
		end := min(start+batchSize, len(cmds))
		futures = append(futures, r.gate.apply(r.raft, fsm.EncodeBatch(cmds[start:end]), r.applyTimeout))
		sizes = append(sizes, end-start)
	}
	out := make([]any, 0, len(cmds))
	for i, f := range futures {
		if err := r.await(ctx, f); err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("placement batch not committed", "commands", sizes[i], "error", err)
			}
			for j := 0; j < sizes[i]; j++ {
				out = append(out, nil)
			}
			continue
		}
		if r.entries != nil {
			r.entries.Add(1)
		}
		res, _ := f.Response().(fsm.BatchResult)
		for j := 0; j < sizes[i]; j++ {
			if j < len(res) {
				out = append(out, res[j])
			} else {
				out = append(out, nil)
			}
		}
	}
	return out
}
