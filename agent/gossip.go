package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/internal/gossip"
)

// agentGossip is the agent's membership in the servers' gossip pool: it
// advertises the node's state in its metadata, heartbeats the servers
// over UDP, and receives wake messages.
type agentGossip struct {
	a   *Agent
	ml  *memberlist.Memberlist
	seq uint64 // the latest heartbeat sent (the gossip loop's own)
	// acked is the latest heartbeat the leader answered.
	acked atomic.Uint64
	// dup records a name conflict seen during a join (memberlist counts a
	// join as done when any one server accepted it).
	dup atomic.Pointer[duplicateNameError]
	// servers are the servers' gossip addresses. Heartbeats go to each
	// address directly, whatever memberlist currently thinks of it: on a
	// lossy link it may have marked a server failed, and the heartbeats
	// are exactly what must keep flowing.
	servers map[string]string // address → server id
	// learned holds server members as memberlist reported them in events
	// (copied there, under memberlist's lock: the *Node values Members()
	// returns are mutated concurrently by memberlist).
	mu      sync.Mutex
	learned map[string]string // address → server id
}

// NotifyJoin, NotifyUpdate and NotifyLeave implement memberlist.EventDelegate.
func (g *agentGossip) NotifyJoin(n *memberlist.Node)   { g.learn(n) }
func (g *agentGossip) NotifyUpdate(n *memberlist.Node) { g.learn(n) }
func (g *agentGossip) NotifyLeave(*memberlist.Node)    {}

func (g *agentGossip) learn(n *memberlist.Node) {
	meta, err := api.DecodeGossipMeta(n.Meta)
	if err != nil || meta.Role != api.RoleServer {
		return
	}
	addr := n.Address()
	g.mu.Lock()
	g.learned[addr] = n.Name
	g.mu.Unlock()
}

// startGossip joins the pool if the cluster runs one; without one the
// agent's liveness rests on HTTP heartbeats.
func (a *Agent) startGossip(ctx context.Context) error {
	// The servers may still be starting (a site's boxes boot together):
	// ask again, with backoff, rather than give up on the first refusal.
	info, err := a.client.GossipInfo(ctx)
	for backoff := 200 * time.Millisecond; err != nil && ctx.Err() == nil; backoff = min(backoff*2, 10*time.Second) {
		var se *api.StatusError
		if errors.As(err, &se) && se.Code < 500 {
			break // refused for good (a bad credential): say so
		}
		a.logger.Warn("the servers cannot be asked about gossip yet, retrying", "in", backoff, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		info, err = a.client.GossipInfo(ctx)
	}
	if err != nil {
		return fmt.Errorf("ask the servers about gossip: %w", err)
	}
	if len(info.Servers) == 0 {
		a.logger.Info("the cluster runs without gossip; liveness rests on HTTP heartbeats")
		return nil
	}
	if info.Encrypted && a.cfg.GossipKey == nil {
		return errors.New("the cluster encrypts gossip: set the gossip key (-gossip-key)")
	}
	host, port, err := a.gossipBind(info.Servers[0])
	if err != nil {
		return err
	}
	g := &agentGossip{a: a, servers: map[string]string{}, learned: map[string]string{}}
	for _, addr := range info.Servers {
		g.servers[addr] = ""
	}
	var ring *memberlist.Keyring
	if a.cfg.GossipKey != nil {
		if ring, err = a.loadKeyring(); err != nil {
			return err
		}
		// The keys may have been rotated while the agent was away.
		a.refreshKeyring(ctx, 0, true)
	}
	ml, err := gossip.Create(gossip.Options{
		Name: a.cfg.ID, BindHost: host, BindPort: port, Keyring: ring,
		// A restarted agent may come back on another address: once its old
		// incarnation is dead it may take the name again.
		DeadNodeReclaimTime: time.Second,
		Delegate:            g, Events: g, Merge: g, Logger: a.logger,
		Tune: a.cfg.GossipTune, WrapTransport: a.cfg.GossipTransport,
	})
	if err != nil {
		return fmt.Errorf("start gossip on %s:%d: %w", host, port, err)
	}
	g.ml = ml
	// Keep the port for the next start, so a restart keeps its address.
	self := ml.LocalNode()
	_ = os.WriteFile(filepath.Join(a.cfg.DataDir, "gossip-port"), []byte(strconv.Itoa(int(self.Port))), 0o640)
	started, backoff := time.Now(), time.Second
	for {
		g.dup.Store(nil)
		_, err = ml.Join(info.Servers)
		if err == nil {
			if d := g.dup.Load(); d != nil {
				err = d // one server knows a live member with this name
			} else {
				break
			}
		}
		if strings.Contains(err.Error(), "decrypt") || strings.Contains(err.Error(), "encrypt") {
			_ = ml.Shutdown()
			return fmt.Errorf("join the gossip pool: %w (is the gossip key the cluster's?)", err)
		}
		// memberlist flattens the merge error to text.
		if strings.Contains(err.Error(), dupMarker) && time.Since(started) > dupWindow {
			_ = ml.Shutdown()
			return fmt.Errorf("join the gossip pool: %w", err)
		}
		// A previous incarnation of this agent may still look alive for a
		// few seconds (a conflict that persists is a real duplicate name),
		// or the servers may be starting or too busy to finish the join's
		// state exchange in time: retry, for as long as it takes, as
		// registration does.
		if time.Since(started) > dupWindow {
			a.logger.Warn("could not join the gossip pool yet, retrying", "in", backoff, "error", err)
		}
		select {
		case <-ctx.Done():
			_ = ml.Shutdown()
			return ctx.Err()
		case <-time.After(backoff):
		}
		if time.Since(started) > dupWindow {
			backoff = min(backoff*2, 10*time.Second)
		}
	}
	a.gossip = g
	a.logger.Info("joined the gossip pool", "address", fmt.Sprintf("%s:%d", self.Addr, self.Port), "members", ml.NumMembers())
	return nil
}

// gossipBind picks where to gossip: the configured address, else the
// local address used to reach the servers, on the port used last time
// (or a free one).
func (a *Agent) gossipBind(server string) (string, int, error) {
	if a.cfg.GossipAddr != "" {
		host, p, err := net.SplitHostPort(a.cfg.GossipAddr)
		if err != nil {
			return "", 0, fmt.Errorf("gossip address %q: %w", a.cfg.GossipAddr, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return "", 0, fmt.Errorf("gossip address %q: bad port", a.cfg.GossipAddr)
		}
		return host, port, nil
	}
	conn, err := net.Dial("udp", server)
	if err != nil {
		return "", 0, fmt.Errorf("find the local address towards %s: %w", server, err)
	}
	host := conn.LocalAddr().(*net.UDPAddr).IP.String()
	conn.Close()
	port := 0
	if b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, "gossip-port")); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && portFree(host, p) {
			port = p
		}
	}
	return host, port, nil
}

func portFree(host string, port int) bool {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// heartbeatGossip sends a new heartbeat to every server member.
func (g *agentGossip) heartbeatGossip() {
	g.seq++
	g.a.lease.sentHeartbeat(g.seq, time.Now())
	g.sendHeartbeat(g.seq)
}

// resendHeartbeat sends the latest heartbeat again if the leader has not
// answered it: the same sequence number, so servers count it as a
// duplicate, not as a heartbeat that the ones lost in between were missed
// for, and the lease it renews still runs from its first sending.
func (g *agentGossip) resendHeartbeat() {
	if g.seq > 0 && g.acked.Load() < g.seq {
		g.sendHeartbeat(g.seq)
	}
}

func (g *agentGossip) sendHeartbeat(seq uint64) {
	msg, err := api.EncodeGossipMsg(api.GossipHeartbeat, api.GossipHeartbeatMsg{Node: g.a.cfg.ID, Session: g.a.session.Load(), Seq: seq, KeyringIndex: g.a.keyringIndex()})
	if err != nil {
		return
	}
	g.mu.Lock()
	for addr, name := range g.learned {
		g.servers[addr] = name
	}
	g.mu.Unlock()
	for addr, name := range g.servers {
		_ = g.ml.SendToAddress(memberlist.Address{Addr: addr, Name: name}, msg)
	}
}

// publish pushes changed metadata to the pool (rate-limited by the caller).
func (g *agentGossip) publish() {
	if err := g.ml.UpdateNode(time.Second); err != nil {
		g.a.logger.Debug("gossip metadata update", "error", err)
	}
}

func (g *agentGossip) stop() {
	_ = g.ml.Leave(time.Second)
	_ = g.ml.Shutdown()
}

// NodeMeta implements memberlist.Delegate: role, id, free slots, running
// attempts, load and the hibernation flag, in well under 512 bytes.
func (g *agentGossip) NodeMeta(limit int) []byte {
	b, err := g.a.meta().Encode()
	if err != nil || len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg receives the leader's wake messages and its answers to
// heartbeats, which renew the lease.
func (g *agentGossip) NotifyMsg(b []byte) {
	if len(b) == 0 {
		return
	}
	switch b[0] {
	case api.GossipWake:
		g.a.wakeUp()
	case api.GossipLeaseAck:
		var ack api.GossipLeaseAckMsg
		if err := api.DecodeGossipMsg(b, &ack); err != nil || ack.Node != g.a.cfg.ID || ack.Session != g.a.session.Load() {
			return
		}
		if g.a.lease.acked(ack.Seq, time.Duration(ack.LeaseMs)*time.Millisecond) {
			for prev := g.acked.Load(); ack.Seq > prev && !g.acked.CompareAndSwap(prev, ack.Seq); prev = g.acked.Load() {
			}
		}
		if ack.KeyringIndex > g.a.keyringIndex() {
			// The keyring changed: an HTTP heartbeat now fetches it.
			select {
			case g.a.renewNow <- struct{}{}:
			default:
			}
		}
	}
}

func (g *agentGossip) GetBroadcasts(int, int) [][]byte { return nil }
func (g *agentGossip) LocalState(bool) []byte          { return nil }
func (g *agentGossip) MergeRemoteState([]byte, bool)   {}

// dupWindow is how long a name conflict may last before it counts as a
// real duplicate: long enough for a restarted agent's previous incarnation
// to be found dead (memberlist's suspicion timeout on a LAN is seconds).
const dupWindow = 10 * time.Second

const dupMarker = "another live member named"

type duplicateNameError struct {
	name, at string
}

func (e *duplicateNameError) Error() string {
	return fmt.Sprintf(dupMarker+" %q gossips from %s: node ids must be unique", e.name, e.at)
}

// NotifyMerge implements memberlist.MergeDelegate: joining a pool where a
// live member already has this agent's name is refused.
func (g *agentGossip) NotifyMerge(peers []*memberlist.Node) error {
	self := g.ml.LocalNode()
	for _, p := range peers {
		// Alive or merely suspected: only a member known dead (or gone) may
		// have its name taken over.
		live := p.State == memberlist.StateAlive || p.State == memberlist.StateSuspect
		if p.Name == g.a.cfg.ID && live && (!p.Addr.Equal(self.Addr) || p.Port != self.Port) {
			d := &duplicateNameError{name: p.Name, at: fmt.Sprintf("%s:%d", p.Addr, p.Port)}
			g.dup.Store(d)
			return d
		}
	}
	return nil
}
