package gossip

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// transport is memberlist's network transport (UDP packets, TCP
// streams) with the receive path's garbage taken out: memberlist's own
// allocates a 64 KiB buffer for every packet received and resolves the
// destination of every packet sent, which on a pool of a thousand agents
// is most of what gossip allocates. This one reads every packet into one
// buffer and hands memberlist a copy of the packet's own size (typically
// under 1 KiB), and remembers resolved addresses.
type transport struct {
	logger   *log.Logger
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	tcp      *net.TCPListener
	udp      *net.UDPConn
	wg       sync.WaitGroup
	shutdown atomic.Bool

	mu    sync.Mutex
	addrs map[string]*net.UDPAddr // resolved destinations
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// maxPacket is the largest UDP datagram.
const maxPacket = 65536

// maxResolved bounds the resolved-address memory (a pool's members, with
// room for churn); past it the map starts over.
const maxResolved = 8192

func newTransport(bindHost string, bindPort int, logger *log.Logger) (*transport, error) {
	ip := net.ParseIP(bindHost)
	if bindHost != "" && ip == nil {
		return nil, fmt.Errorf("gossip bind address %q is not an IP address", bindHost)
	}
	t := &transport{logger: logger, packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn), addrs: map[string]*net.UDPAddr{}}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: bindPort})
	if err != nil {
		return nil, fmt.Errorf("gossip TCP listener on %s port %d: %w", bindHost, bindPort, err)
	}
	port := tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("gossip UDP listener on %s port %d: %w", bindHost, port, err)
	}
	// A large receive buffer rides out bursts (memberlist asks for 2 MiB
	// and takes what the kernel grants).
	for size := 2 << 20; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t.tcp, t.udp = tcp, udp
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

// port is the bound port (the same for TCP and UDP).
func (t *transport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("gossip advertise address %q is not an IP address", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		if port == 0 {
			port = t.port()
		}
		return addr, port, nil
	}
	addr := t.tcp.Addr().(*net.TCPAddr).IP
	if addr.IsUnspecified() {
		// Bound to every interface: advertise a private address, as
		// memberlist's own transport does.
		private, err := sockaddr.GetPrivateIP()
		if err != nil || private == "" {
			return nil, 0, fmt.Errorf("gossip bound to %s and no private address found (%v): give an address to advertise", addr, err)
		}
		if addr = net.ParseIP(private); addr == nil {
			return nil, 0, fmt.Errorf("gossip: private address %q does not parse", private)
		}
	}
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	return addr, t.port(), nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	dst, err := t.resolve(a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, dst)
	return time.Now(), err
}

func (t *transport) resolve(addr string) (*net.UDPAddr, error) {
	t.mu.Lock()
	dst, ok := t.addrs[addr]
	t.mu.Unlock()
	if ok {
		return dst, nil
	}
	dst, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if len(t.addrs) >= maxResolved {
		clear(t.addrs)
	}
	t.addrs[addr] = dst
	t.mu.Unlock()
	return dst, nil
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *transport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	if shouldClose {
		defer conn.Close()
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, conn); err != nil {
		return fmt.Errorf("read packet: %w", err)
	}
	if buf.Len() < 1 {
		return fmt.Errorf("packet too short from %s", addr)
	}
	t.packetCh <- &memberlist.Packet{Buf: buf.Bytes(), From: addr, Timestamp: now}
	return nil
}

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

func (t *transport) IngestStream(conn net.Conn) error {
	t.streamCh <- conn
	return nil
}

func (t *transport) Shutdown() error {
	t.shutdown.Store(true)
	t.tcp.Close()
	t.udp.Close()
	t.wg.Wait()
	return nil
}

func (t *transport) acceptStreams() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.logger.Printf("[ERR] memberlist: Error accepting TCP connection: %v", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		t.streamCh <- conn
	}
}

// readPackets reads every datagram into one buffer and hands memberlist
// a copy of exactly its bytes: memberlist keeps the packet's buffer while
// it handles it, so the read buffer cannot be lent.
func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, addr, err := t.udp.ReadFrom(buf)
		ts := time.Now()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: Error reading UDP packet: %v", err)
			continue
		}
		if n < 1 {
			continue
		}
		t.packetCh <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: addr, Timestamp: ts}
	}
}
