package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
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
	// idleRedial is how long a dialed connection may sit unused before the
	// next request on it is sent on a fresh one instead (see freshConn).
	idleRedial time.Duration
}

// pooledIdleRedial is the stream layer's idleRedial: a leader sends each
// follower something every tenth of a heartbeat timeout, so its links are
// never idle this long; the links that are, a follower's to the other
// followers, carry the votes of an election.
const pooledIdleRedial = time.Second

func newStreamLayer(ln net.Listener, advertise string, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*streamLayer, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("resolve raft advertise address %q: %w", advertise, err)
	}
	if addr.IP == nil || addr.IP.IsUnspecified() {
		return nil, errors.New("raft advertise address must be a reachable IP, not " + advertise)
	}
	return &streamLayer{ln: ln, advertise: addr, dial: dial, idleRedial: pooledIdleRedial}, nil
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dial := func(deadline time.Time) (net.Conn, error) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		return s.dial(ctx, "tcp", string(address))
	}
	conn, err := dial(time.Now().Add(timeout))
	if err != nil {
		return nil, err
	}
	return &freshConn{Conn: conn, dial: dial, timeout: timeout, idle: s.idleRedial, used: time.Now()}, nil
}

// freshConn is a connection raft dialed, sent on a freshly dialed one
// when a request starts after it sat unused for longer than idle. Raft
// pools its connections and takes one from the pool without checking it:
// when the peer restarted since the connection was last used, its end is
// gone, and the request, typically a vote in the election that needs it
// most, fails on the stale connection and costs a whole election timeout.
// Raft's requests alternate with their answers on a connection, so the
// first write after a read (or after the dial) starts a request, and a
// request never straddles two connections.
type freshConn struct {
	mu sync.Mutex
	net.Conn
	dial    func(deadline time.Time) (net.Conn, error)
	timeout time.Duration
	idle    time.Duration
	used    time.Time
	// answered is set by a read: the next write starts a request.
	answered bool
	// readBy and writeBy are the deadlines raft set, for a fresh conn.
	readBy, writeBy time.Time
}

func (c *freshConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.answered && time.Since(c.used) > c.idle {
		deadline := c.writeBy
		if deadline.IsZero() {
			deadline = time.Now().Add(c.timeout)
		}
		conn, err := c.dial(deadline)
		if err != nil {
			c.mu.Unlock()
			return 0, fmt.Errorf("redial an idle raft connection: %w", err)
		}
		_ = c.Conn.Close()
		c.Conn = conn
		_ = conn.SetReadDeadline(c.readBy)
		_ = conn.SetWriteDeadline(c.writeBy)
	}
	c.answered = false
	conn := c.Conn
	c.mu.Unlock()
	n, err := conn.Write(p)
	c.mu.Lock()
	c.used = time.Now()
	c.mu.Unlock()
	return n, err
}

func (c *freshConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	conn := c.Conn
	c.mu.Unlock()
	n, err := conn.Read(p)
	c.mu.Lock()
	c.answered, c.used = true, time.Now()
	c.mu.Unlock()
	return n, err
}

func (c *freshConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readBy, c.writeBy = t, t
	return c.Conn.SetDeadline(t)
}

func (c *freshConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readBy = t
	return c.Conn.SetReadDeadline(t)
}

func (c *freshConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeBy = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *freshConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Close()
}

func (c *freshConn) LocalAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.LocalAddr()
}

func (c *freshConn) RemoteAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.RemoteAddr()
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
