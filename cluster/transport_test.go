package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The transport raft gets replicates without the pipeline (see
// unpipelined) and keeps what else raft looks for in a transport:
// closing it and pre-vote.
func TestRaftReplicatesWithoutThePipeline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	layer, err := newStreamLayer(ln, ln.Addr().String(), func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	nt := raft.NewNetworkTransport(layer, 1, time.Second, nil)
	defer nt.Close()
	var tr raft.Transport = unpipelined{nt}
	if _, err := tr.AppendEntriesPipeline("s2", raft.ServerAddress(ln.Addr().String())); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("pipeline: %v, want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
	if _, ok := tr.(raft.WithClose); !ok {
		t.Error("raft could not close the transport")
	}
	if _, ok := tr.(raft.WithPreVote); !ok {
		t.Error("raft would not pre-vote over the transport")
	}
}

// trackingListener remembers the connections it accepted, so that a test
// can close them as a process that exits does.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// peer is one end of raft's transport answering every vote request.
type peer struct {
	nt   *raft.NetworkTransport
	ln   *trackingListener
	done chan struct{}
}

func startPeer(t *testing.T, addr string, idle time.Duration) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	layer, err := newStreamLayer(&trackingListener{Listener: ln}, ln.Addr().String(), d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	layer.idleRedial = idle
	p := &peer{nt: raft.NewNetworkTransport(layer, 3, 5*time.Second, io.Discard), ln: layer.ln.(*trackingListener), done: make(chan struct{})}
	go func() {
		for {
			select {
			case rpc := <-p.nt.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: 1, Granted: true}, nil)
			case <-p.done:
				return
			}
		}
	}()
	return p
}

// stop ends the peer as its process's exit does: the listener and every
// connection it accepted close.
func (p *peer) stop() {
	close(p.done)
	_ = p.nt.Close()
	p.ln.mu.Lock()
	defer p.ln.mu.Unlock()
	for _, c := range p.ln.conns {
		_ = c.Close()
	}
}

// A vote sent to a peer that restarted since the last request to it goes
// out on a fresh connection: on the pooled one, which the peer's old
// process closed, it fails.
func TestVoteAfterPeerRestartUsesAFreshConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idle   time.Duration
		wantOK bool
	}{
		{"idle connections redialed", 0, true},
		{"idle connections kept", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			candidate := startPeer(t, "127.0.0.1:0", tc.idle)
			defer candidate.stop()
			voter := startPeer(t, "127.0.0.1:0", tc.idle)
			addr := raft.ServerAddress(voter.nt.LocalAddr())
			vote := func() error {
				var resp raft.RequestVoteResponse
				return candidate.nt.RequestVote("voter", addr, &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{Addr: []byte("candidate")}, Term: 2}, &resp)
			}
			if err := vote(); err != nil {
				t.Fatalf("first vote: %v", err)
			}
			voter.stop()
			voter = startPeer(t, string(addr), tc.idle)
			defer voter.stop()
			err := vote()
			if tc.wantOK && err != nil {
				t.Fatalf("vote after the voter restarted: %v", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("the stale pooled connection carried a vote: the test no longer shows what a fresh one is for")
			}
		})
	}
}
