package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network is a fault injector for every link between named endpoints of
// an in-process cluster (replicas, agents, clients). Each endpoint dials
// through Network.Dialer and accepts through Network.Listen, so both ends
// of every TCP connection know who is talking to whom; gossip goes through
// Network.GossipTransport. Faults are per direction:
//
//   - Block(a, b): nothing a sends reaches b. A TCP write from a to b resets
//     the connection (both ends see it fail) and dials from a to b are
//     refused; UDP packets are dropped. Blocking both directions is a
//     symmetric partition.
//   - Pause(a): a's I/O stalls, as under SIGSTOP: its writes and reads
//     block (honouring deadlines) until Resume, peers' dials hang.
//   - SetLoss(p): each UDP packet is dropped with probability p; each TCP
//     write is held back as if retransmitted (delay) with probability p
//     and resets the connection with probability p/10.
//   - SetDelay(d): every write waits d first.
type Network struct {
	mu      sync.Mutex
	owners  map[string]string // "ip:port" → endpoint (listeners, gossip, dialed local ends)
	blocked map[[2]string]bool
	paused  map[string]bool
	loss    float64
	delay   time.Duration
	rng     *rand.Rand
	conns   map[*faultConn]struct{}
	changed chan struct{} // closed and replaced on every fault change
}

// NewNetwork returns a healthy network whose random choices follow seed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		owners: map[string]string{}, blocked: map[[2]string]bool{}, paused: map[string]bool{},
		rng: rand.New(rand.NewPCG(seed, 7)), conns: map[*faultConn]struct{}{}, changed: make(chan struct{}),
	}
}

// Own records that addr ("ip:port") belongs to endpoint name.
func (n *Network) Own(addr, name string) {
	n.mu.Lock()
	n.owners[addr] = name
	n.mu.Unlock()
}

func (n *Network) owner(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.owners[addr]
}

// notifyLocked wakes everything waiting on a fault to change.
func (n *Network) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Block cuts the direction from → to (true) or restores it (false).
func (n *Network) Block(from, to string, block bool) {
	n.mu.Lock()
	if block {
		n.blocked[[2]string{from, to}] = true
	} else {
		delete(n.blocked, [2]string{from, to})
	}
	n.notifyLocked()
	n.mu.Unlock()
}

// Partition cuts every link between the two groups in both directions.
func (n *Network) Partition(a, b []string) {
	for _, x := range a {
		for _, y := range b {
			n.Block(x, y, true)
			n.Block(y, x, true)
		}
	}
}

// Pause stalls endpoint name's I/O (true) or lets it run again (false).
func (n *Network) Pause(name string, pause bool) {
	n.mu.Lock()
	if pause {
		n.paused[name] = true
	} else {
		delete(n.paused, name)
	}
	n.notifyLocked()
	n.mu.Unlock()
}

// SetLoss sets the message-loss probability on every link.
func (n *Network) SetLoss(p float64) {
	n.mu.Lock()
	n.loss = p
	n.mu.Unlock()
}

// SetDelay sets the delay added to every write.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = d
	n.mu.Unlock()
}

// Heal removes every fault.
func (n *Network) Heal() {
	n.mu.Lock()
	n.blocked = map[[2]string]bool{}
	n.paused = map[string]bool{}
	n.loss, n.delay = 0, 0
	n.notifyLocked()
	n.mu.Unlock()
}

// verdict is what happens to one write from → to.
type verdict int

const (
	pass verdict = iota
	drop
	stall
)

// judge decides the fate of one message, and the delay it suffers first.
func (n *Network) judge(from, to string) (verdict, time.Duration, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.paused[from] || n.paused[to] {
		return stall, 0, n.changed
	}
	if n.blocked[[2]string{from, to}] {
		return drop, 0, nil
	}
	d := n.delay
	if n.loss > 0 && n.rng.Float64() < n.loss {
		if n.rng.Float64() < 0.1 {
			return drop, 0, nil
		}
		d += time.Duration(50+n.rng.IntN(250)) * time.Millisecond // a retransmission
	}
	return pass, d, nil
}

// ErrLinkDown is what a write over a blocked link fails with;
// ErrDialRefused is what a dial over one fails with (nothing was sent).
var (
	ErrLinkDown    = fmt.Errorf("test network: link down: %w", syscall.ECONNRESET)
	ErrDialRefused = fmt.Errorf("test network: unreachable: %w", syscall.EHOSTUNREACH)
)

// Dialer returns the dial function for endpoint name.
func (n *Network) Dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := n.owner(addr)
		for {
			v, _, changed := n.judge(name, to)
			if v == pass {
				break
			}
			if v == drop {
				return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s → %s (%s): %w", name, to, addr, ErrDialRefused)}
			}
			select { // stalled: a paused peer accepts nothing
			case <-changed:
			case <-ctx.Done():
				return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s → %s (%s): %w", name, to, addr, ctx.Err())}
			}
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		n.Own(c.LocalAddr().String(), name)
		return n.wrap(c, name, to), nil
	}
}

// Listen binds addr for endpoint name; accepted connections are wrapped.
func (n *Network) Listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	n.Own(ln.Addr().String(), name)
	return &faultListener{Listener: ln, n: n, name: name}, nil
}

type faultListener struct {
	net.Listener
	n    *Network
	name string
}

func (l *faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// The dialing end may not have recorded its address yet: the remote
	// name is resolved when first needed.
	return l.n.wrap(c, l.name, ""), nil
}

func (n *Network) wrap(c net.Conn, local, remote string) net.Conn {
	fc := &faultConn{Conn: c, n: n, local: local, remote: remote}
	n.mu.Lock()
	n.conns[fc] = struct{}{}
	n.mu.Unlock()
	return fc
}

// faultConn applies the network's faults to one end of a TCP connection:
// its writes are judged as messages local → remote, its reads stall while
// the local end is paused.
type faultConn struct {
	net.Conn
	n             *Network
	local, remote string

	mu            sync.Mutex
	readDeadline  time.Time
	writeDeadline time.Time
	closed        bool
}

func (c *faultConn) deadline(write bool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if write {
		return c.writeDeadline
	}
	return c.readDeadline
}

// waitChange blocks until the faults change, the deadline passes or the
// connection closes.
func (c *faultConn) waitChange(changed <-chan struct{}, write bool) error {
	var timeout <-chan time.Time
	if dl := c.deadline(write); !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		timeout = tm.C
	}
	tick := time.NewTicker(50 * time.Millisecond) // notices Close
	defer tick.Stop()
	for {
		select {
		case <-changed:
			return nil
		case <-timeout:
			return os.ErrDeadlineExceeded
		case <-tick.C:
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return net.ErrClosed
			}
		}
	}
}

// peer names the remote endpoint, resolving it on an accepted connection.
func (c *faultConn) peer() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.remote == "" {
		c.remote = c.n.owner(c.Conn.RemoteAddr().String())
	}
	return c.remote
}

func (c *faultConn) Write(b []byte) (int, error) {
	for {
		v, d, changed := c.n.judge(c.local, c.peer())
		switch v {
		case drop:
			c.Close()
			return 0, ErrLinkDown
		case stall:
			if err := c.waitChange(changed, true); err != nil {
				return 0, err
			}
			continue
		}
		if d > 0 {
			time.Sleep(d)
		}
		return c.Conn.Write(b)
	}
}

func (c *faultConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for {
		c.n.mu.Lock()
		paused := c.n.paused[c.local]
		changed := c.n.changed
		c.n.mu.Unlock()
		if !paused {
			return n, err
		}
		// The bytes arrived but a paused process does not read them yet.
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond):
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return 0, net.ErrClosed
			}
		}
	}
}

func (c *faultConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.n.mu.Lock()
	delete(c.n.conns, c)
	c.n.mu.Unlock()
	return c.Conn.Close()
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *faultConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// GossipTransport wraps endpoint name's memberlist transport so gossip
// obeys the same faults: packets are dropped on blocked or lossy links and
// while either end is paused, streams are refused.
func (n *Network) GossipTransport(name string, seed uint64) func(memberlist.Transport) memberlist.Transport {
	return func(inner memberlist.Transport) memberlist.Transport {
		link := func(peer string, outgoing bool) bool {
			from, to := name, n.owner(peer)
			if !outgoing {
				from, to = to, name
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.paused[from] || n.paused[to] || n.blocked[[2]string{from, to}] {
				return false
			}
			return n.loss == 0 || n.rng.Float64() >= n.loss
		}
		return newFaultTransport(inner, seed, link, func(local string) { n.Own(local, name) })
	}
}
