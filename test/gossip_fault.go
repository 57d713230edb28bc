package test

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// FaultTransport wraps a memberlist transport (tests only): it drops a
// fraction of the UDP packets going out and coming in, and can cut the
// member off entirely (packets and streams), as a lossy or broken link.
type FaultTransport struct {
	inner memberlist.NodeAwareTransport
	in    chan *memberlist.Packet
	// closing closes when Shutdown starts: the forwarders then drain and
	// drop what the inner transport still delivers, so its listeners can
	// finish (NetTransport.Shutdown waits for them).
	closing   chan struct{}
	stopped   chan struct{} // closes once the inner transport has shut down
	closeOnce sync.Once

	mu          sync.Mutex
	loss        float64
	cut         bool
	dropStreams bool
	rng         *rand.Rand

	// link, when set, also decides whether a packet to or from peer (a
	// gossip address) gets through; ownDialed learns the local address of
	// each stream this member dials (both set by Network).
	link      func(peer string, outgoing bool) bool
	ownDialed func(local string)

	streamOnce sync.Once
	streams    chan net.Conn
}

// DropIncomingStreams refuses incoming TCP streams (reliable messages,
// push-pull) while UDP keeps flowing: the member stays alive but cannot
// be told anything reliably, e.g. woken up.
func (t *FaultTransport) DropIncomingStreams(drop bool) {
	t.mu.Lock()
	t.dropStreams = drop
	t.mu.Unlock()
}

// NewFaultTransport wraps inner, which must be node-aware (NetTransport is).
func NewFaultTransport(inner memberlist.Transport, seed uint64) *FaultTransport {
	return newFaultTransport(inner, seed, nil, nil)
}

// newFaultTransport also takes the per-peer link check and the dialed-
// address recorder (both set before the forwarding goroutine starts).
func newFaultTransport(inner memberlist.Transport, seed uint64, link func(peer string, outgoing bool) bool, ownDialed func(local string)) *FaultTransport {
	t := &FaultTransport{
		inner:     inner.(memberlist.NodeAwareTransport),
		in:        make(chan *memberlist.Packet, 1024),
		closing:   make(chan struct{}),
		stopped:   make(chan struct{}),
		rng:       rand.New(rand.NewPCG(seed, 99)),
		link:      link,
		ownDialed: ownDialed,
	}
	go func() {
		for {
			select {
			case p := <-t.inner.PacketCh():
				if t.drop() || (t.link != nil && !t.link(p.From.String(), false)) {
					continue
				}
				select {
				case t.in <- p:
				case <-t.closing:
				}
			case <-t.stopped:
				return
			}
		}
	}()
	return t
}

// SetLoss sets the fraction of UDP packets dropped each way.
func (t *FaultTransport) SetLoss(f float64) {
	t.mu.Lock()
	t.loss = f
	t.mu.Unlock()
}

// Cut cuts (true) or restores (false) the member's links.
func (t *FaultTransport) Cut(cut bool) {
	t.mu.Lock()
	t.cut = cut
	t.mu.Unlock()
}

func (t *FaultTransport) drop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut || (t.loss > 0 && t.rng.Float64() < t.loss)
}

func (t *FaultTransport) isCut() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cut
}

var errCut = errors.New("test fault: link cut")

func (t *FaultTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *FaultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.drop() || (t.link != nil && !t.link(addr, true)) {
		return time.Now(), nil // lost on the way: the sender cannot tell
	}
	return t.inner.WriteTo(b, addr)
}

func (t *FaultTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.drop() || (t.link != nil && !t.link(a.Addr, true)) {
		return time.Now(), nil
	}
	return t.inner.WriteToAddress(b, a)
}

func (t *FaultTransport) PacketCh() <-chan *memberlist.Packet { return t.in }

func (t *FaultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *FaultTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.isCut() || (t.link != nil && !t.link(a.Addr, true)) {
		return nil, errCut
	}
	c, err := t.inner.DialAddressTimeout(a, timeout)
	if err == nil && t.ownDialed != nil {
		t.ownDialed(c.LocalAddr().String())
	}
	return c, err
}

// StreamCh passes incoming streams through, closing them while cut.
// memberlist calls it on every turn of its accept loop: the forwarder is
// started once and its channel returned every time.
func (t *FaultTransport) StreamCh() <-chan net.Conn {
	t.streamOnce.Do(func() { t.streams = t.forwardStreams() })
	return t.streams
}

func (t *FaultTransport) forwardStreams() chan net.Conn {
	out := make(chan net.Conn)
	go func() {
		for {
			var c net.Conn
			select {
			case c = <-t.inner.StreamCh():
			case <-t.stopped:
				return
			}
			t.mu.Lock()
			refuse := t.cut || t.dropStreams
			t.mu.Unlock()
			// A stream whose dialer has not recorded its address yet
			// passes: a rare leak, only for short push-pull streams.
			if !refuse && t.link != nil {
				refuse = !t.link(c.RemoteAddr().String(), false)
			}
			if refuse {
				c.Close()
				continue
			}
			select {
			case out <- c:
			case <-t.closing:
				c.Close()
			}
		}
	}()
	return out
}

// Shutdown stops the inner transport while the forwarders keep draining
// it.
func (t *FaultTransport) Shutdown() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.closing)
		err = t.inner.Shutdown()
		close(t.stopped)
	})
	return err
}

// FastGossip shrinks memberlist's timings for tests on loopback, keeping
// LAN-like ratios (probe timeout half the interval, suspicion multiplier
// 4) so Lifeguard still rides out heavy packet loss on a loaded machine.
func FastGossip(c *memberlist.Config) {
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 50 * time.Millisecond
	c.GossipInterval = 20 * time.Millisecond
	c.PushPullInterval = time.Second
	c.SuspicionMult = 4
	c.TCPTimeout = 500 * time.Millisecond
	c.GossipToTheDeadTime = 2 * time.Second
	c.DeadNodeReclaimTime = 200 * time.Millisecond
}
