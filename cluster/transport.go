package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's TCP stream layer over a listener we own. Owning
// the listener lets callers bind it first (port 0 in tests and dev mode)
// and gives fault-injection tests a place to wrap connections.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	dial      func(ctx context.Context, network, address string) (net.Conn, error)
}

func newStreamLayer(ln net.Listener, advertise string, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*streamLayer, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("resolve raft advertise address %q: %w", advertise, err)
	}
	if addr.IP == nil || addr.IP.IsUnspecified() {
		return nil, errors.New("raft advertise address must be a reachable IP, not " + advertise)
	}
	return &streamLayer{ln: ln, advertise: addr, dial: dial}, nil
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.dial(ctx, "tcp", string(address))
}

func (s *streamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }
func (s *streamLayer) Close() error              { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr            { return s.advertise }

// unpipelined is raft's network transport without pipelined replication.
// hashicorp/raft's pipeline can stall replication to a follower for good:
// when the follower refuses an append (a full disk, a failed log write),
// the pipeline's decoder stops reading answers while the sender may
// already be parked handing it the next request, and the heartbeats,
// which go on, keep the follower from ever calling an election that
// would clear it. Without the pipeline, each follower is sent one batch
// of entries at a time, and a refusal is answered by the next batch.
type unpipelined struct{ *raft.NetworkTransport }

func (unpipelined) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}
