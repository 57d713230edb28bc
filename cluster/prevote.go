package cluster

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// preVoteLook is raft's transport with one look at each incoming pre-vote
// request before raft answers it.
//
// When a leader vanishes, its two followers stand one after the other
// (see leaderWatch), and the first to stand is refused by the other, which
// still holds its leader until its own check. That costs nothing when
// the second then wins with the first's vote; but when the first has the
// longer log, the second is refused in turn, for its shorter log, and
// the cluster waits an election timeout (one to two seconds) for the
// first to try again. The look lets the loyal follower check at once, as
// its watch would a little later, when the candidate asking is more up
// to date than itself and its own leader has been silent a heartbeat
// timeout: raft then answers the request without a leader to be loyal
// to, and the first candidate wins at its first try. Raft's rules decide
// every answer; only the moment of the follower's check changes.
type preVoteLook struct {
	unpipelined
	rpcs chan raft.RPC

	// look, once set, sees every pre-vote request before raft does, and
	// may hold it (for a bounded time) while raft checks for its leader.
	look atomic.Pointer[func(*raft.RequestPreVoteRequest)]

	done      chan struct{}
	closeOnce sync.Once
	stopped   sync.WaitGroup
}

func newPreVoteLook(t *raft.NetworkTransport) *preVoteLook {
	p := &preVoteLook{unpipelined: unpipelined{t}, rpcs: make(chan raft.RPC), done: make(chan struct{})}
	p.stopped.Add(1)
	go p.forward()
	return p
}

// Consumer is where raft reads its incoming requests.
func (p *preVoteLook) Consumer() <-chan raft.RPC { return p.rpcs }

// setLook installs the look; requests before it pass untouched.
func (p *preVoteLook) setLook(fn func(*raft.RequestPreVoteRequest)) { p.look.Store(&fn) }

func (p *preVoteLook) forward() {
	defer p.stopped.Done()
	in := p.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-p.done:
			return
		}
		if req, ok := rpc.Command.(*raft.RequestPreVoteRequest); ok {
			if fn := p.look.Load(); fn != nil {
				(*fn)(req)
			}
		}
		select {
		case p.rpcs <- rpc:
		case <-p.done:
			return
		}
	}
}

// stop ends the forwarding; raft must be shut down first. Requests the
// transport receives after it go unanswered until the transport closes.
func (p *preVoteLook) stop() {
	p.closeOnce.Do(func() { close(p.done) })
	p.stopped.Wait()
}
