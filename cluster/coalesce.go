package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"herd/fsm"
)

// Single commands proposed at the same time (submits, registrations,
// heartbeats, reports from many agents) are committed together: each Raft
// entry costs every replica a log write, an encode and an apply of its
// own, so a hundred clients each submitting one task should not cost a
// hundred entries. The coalescer keeps at most coalesceInFlight entries
// in flight and puts everything that arrived meanwhile into the next
// one, so a lone request goes out at once and waits for nothing, while a
// busy leader's entries grow with its load (group commit). A batch's
// commands are applied in order and answered one by one, exactly as if
// each had been its own entry, except that they share the entry's index.
const (
	coalesceInFlight = 8
	coalesceMaxCmds  = 256
	coalesceMaxBytes = 1 << 20
)

// raftApplier is the part of *raft.Raft the coalescer proposes through.
type raftApplier interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// queuedCommand is one command waiting for its entry to commit.
type queuedCommand struct {
	cmd  []byte
	done chan commandResult // buffered: the coalescer never blocks on it
}

type commandResult struct {
	resp  any // the FSM's answer: a value or an error
	index uint64
	err   error // Raft did not commit the entry (or its outcome is unknown)
}

// coalescer turns concurrent proposals into batch entries.
type coalescer struct {
	raft    raftApplier
	timeout time.Duration // how long raft may take to accept an entry
	queue   chan *queuedCommand
	entries atomic.Uint64 // entries proposed
}

func newCoalescer(r raftApplier, timeout time.Duration) *coalescer {
	return &coalescer{raft: r, timeout: timeout, queue: make(chan *queuedCommand, 4*coalesceMaxCmds)}
}

// propose queues cmd and waits for its entry's answer. When ctx ends or
// the coalescer stops first, whether cmd commits is unknown: the error
// says so (see Server.raftErr).
func (c *coalescer) propose(ctx context.Context, stopped <-chan struct{}, cmd []byte) commandResult {
	p := &queuedCommand{cmd: cmd, done: make(chan commandResult, 1)}
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return commandResult{err: ctx.Err()}
	case <-stopped:
		return commandResult{err: raft.ErrRaftShutdown}
	}
	select {
	case r := <-p.done:
		return r
	case <-ctx.Done():
		return commandResult{err: ctx.Err()}
	case <-stopped:
		return commandResult{err: raft.ErrRaftShutdown}
	}
}

// run proposes what is queued until ctx ends; wg tracks the goroutines
// that wait for entries in flight.
func (c *coalescer) run(ctx context.Context, wg *sync.WaitGroup) {
	slots := make(chan struct{}, coalesceInFlight)
	for {
		// Waiting for a slot is what lets the next entry fill up.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var batch []*queuedCommand
		select {
		case p := <-c.queue:
			batch = append(batch, p)
		case <-ctx.Done():
			return
		}
		size := len(batch[0].cmd)
	fill:
		for len(batch) < coalesceMaxCmds && size < coalesceMaxBytes {
			select {
			case p := <-c.queue:
				batch = append(batch, p)
				size += len(p.cmd)
			default:
				break fill
			}
		}
		f := c.raft.Apply(batchEntry(batch), c.timeout)
		c.entries.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f.Error()
			<-slots
			answer(batch, f, err)
		}()
	}
}

// batchEntry is the entry for a batch: a lone command as itself.
func batchEntry(batch []*queuedCommand) []byte {
	if len(batch) == 1 {
		return batch[0].cmd
	}
	cmds := make([][]byte, len(batch))
	for i, p := range batch {
		cmds[i] = p.cmd
	}
	return fsm.EncodeBatch(cmds)
}

// answer hands each command its own part of the entry's response.
func answer(batch []*queuedCommand, f raft.ApplyFuture, err error) {
	if err != nil {
		for _, p := range batch {
			p.done <- commandResult{err: err}
		}
		return
	}
	index, resp := f.Index(), f.Response()
	if len(batch) == 1 {
		batch[0].done <- commandResult{resp: resp, index: index}
		return
	}
	results, ok := resp.(fsm.BatchResult)
	for i, p := range batch {
		switch {
		case ok && len(results) == len(batch):
			p.done <- commandResult{resp: results[i], index: index}
		case !ok && isError(resp):
			p.done <- commandResult{resp: resp, index: index} // the FSM refused the whole entry
		default:
			p.done <- commandResult{resp: fmt.Errorf("unexpected response %T to a batch of %d", resp, len(batch)), index: index}
		}
	}
}

func isError(v any) bool { _, ok := v.(error); return ok }
