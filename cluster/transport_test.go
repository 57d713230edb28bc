package cluster

import (
	"context"
	"errors"
	"net"
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
