package cluster

import (
	"errors"
	"fmt"
	"herd/internal/version"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/config"
	"herd/internal/gossip"
	"herd/scheduler"
)

// GossipOptions let tests shape the memberlist pool of a replica.
type GossipOptions struct {
	// WrapTransport wraps the real UDP/TCP transport (fault injection).
	WrapTransport func(memberlist.Transport) memberlist.Transport
	// Tune adjusts memberlist timings (tests shrink them).
	Tune func(*memberlist.Config)
}

// serverGossip is a replica's membership in the gossip pool.
type serverGossip struct {
	ml *memberlist.Memberlist
	s  *Server
	// keyring is the pool's keys in use here (nil without encryption);
	// keyringIndex the replicated keyring last applied to it.
	keyring      *memberlist.Keyring
	keyringMu    sync.Mutex // one sync at a time
	keyringIndex uint64

	// members are the pool's members as memberlist reported them in
	// events, copied under memberlist's lock: the *Node values Members()
	// returns are mutated concurrently by memberlist.
	mu      sync.Mutex
	members map[string]gossipMember // name → member
}

type gossipMember struct {
	addr net.IP
	port uint16
	role string
}

// startGossip joins the pool as a server member. Server members learn of
// agents (and their metadata) from memberlist events, and receive agents'
// heartbeat messages. Gossip never changes Raft membership.
func (s *Server) startGossip(opts GossipOptions) error {
	if s.cfg.GossipAddr == "" {
		return nil
	}
	host, portStr, _ := net.SplitHostPort(s.cfg.GossipAddr)
	port, _ := strconv.Atoi(portStr)
	advHost, advPortStr, _ := net.SplitHostPort(s.cfg.GossipAdvertise)
	advPort, _ := strconv.Atoi(advPortStr)
	g := &serverGossip{s: s, members: map[string]gossipMember{}}
	var key []byte
	if s.cfg.GossipKey != "" {
		k, err := config.DecodeGossipKey(s.cfg.GossipKey)
		if err != nil {
			return err
		}
		key = k
	}
	if key != nil {
		kr, err := memberlist.NewKeyring(nil, key)
		if err != nil {
			return fmt.Errorf("gossip key: %w", err)
		}
		g.keyring = kr
	}
	ml, err := gossip.Create(gossip.Options{
		Name: s.cfg.ID, BindHost: host, BindPort: port, AdvertiseHost: advHost, AdvertisePort: advPort,
		Keyring: g.keyring, Delegate: g, Events: g, Logger: s.logger, Tune: opts.Tune, WrapTransport: opts.WrapTransport,
	})
	if err != nil {
		return fmt.Errorf("start gossip on %s: %w", s.cfg.GossipAddr, err)
	}
	g.ml = ml
	s.gossip = g
	s.keyringEndpoints.gossip = g
	return nil
}

// joinGossip joins the other servers' gossip addresses, learned from the
// replicated server table; it retries in the background until it works.
func (s *Server) joinGossip() {
	if s.gossip == nil {
		return
	}
	for s.pause(2 * time.Second) {
		peers := s.unjoinedGossipServers()
		if len(peers) == 0 {
			continue
		}
		if _, err := s.gossip.ml.Join(peers); err != nil {
			s.logger.Debug("gossip join failed", "peers", peers, "error", err)
		}
	}
}

// unjoinedGossipServers are the gossip addresses of the servers in the
// replicated server table that this replica's pool does not hold: a pool
// holding other members (an agent that joined this server first) is not
// therefore joined to the other servers, and two pools left apart would
// each see only the agents that joined them.
func (s *Server) unjoinedGossipServers() []string {
	have := map[string]bool{}
	s.gossip.mu.Lock()
	for name, m := range s.gossip.members {
		if m.role == api.RoleServer {
			have[name] = true
		}
	}
	s.gossip.mu.Unlock()
	servers, err := s.fsm.State().Servers()
	if err != nil {
		return nil
	}
	var out []string
	for _, srv := range servers {
		if srv.ID != s.cfg.ID && srv.GossipAddress != "" && !have[srv.ID] {
			out = append(out, srv.GossipAddress)
		}
	}
	slices.Sort(out)
	return out
}

// gossipPeers are the servers' gossip addresses known to this replica:
// its own memberlist view, plus those recorded in the server table.
func (s *Server) gossipPeers() []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if s.cfg.GossipAdvertise != "" {
		add(s.cfg.GossipAdvertise)
	}
	if s.gossip != nil {
		first := len(out)
		s.gossip.mu.Lock()
		for _, m := range s.gossip.members {
			if m.role == api.RoleServer {
				add(net.JoinHostPort(m.addr.String(), strconv.Itoa(int(m.port))))
			}
		}
		s.gossip.mu.Unlock()
		slices.Sort(out[first:]) // map order is random; keep the answer stable
	}
	if servers, err := s.fsm.State().Servers(); err == nil {
		for _, srv := range servers {
			add(srv.GossipAddress)
		}
	}
	return out
}

// GossipInfo tells agents where to join the pool.
func (s *Server) GossipInfo() api.GossipInfo {
	if s.gossip == nil {
		return api.GossipInfo{Servers: []string{}}
	}
	return api.GossipInfo{Servers: s.gossipPeers(), Encrypted: s.cfg.GossipKey != ""}
}

// wake asks a hibernating agent to wake up.
func (s *Server) wake(nodeID string) error {
	if s.gossip == nil {
		return errors.New("no gossip pool")
	}
	s.gossip.mu.Lock()
	m, ok := s.gossip.members[nodeID]
	s.gossip.mu.Unlock()
	if !ok {
		return fmt.Errorf("node %s is not in the gossip pool", nodeID)
	}
	msg, err := api.EncodeGossipMsg(api.GossipWake, struct{}{})
	if err != nil {
		return err
	}
	return s.gossip.ml.SendReliable(&memberlist.Node{Name: nodeID, Addr: m.addr, Port: m.port}, msg)
}

func (s *Server) stopGossip() {
	if s.gossip == nil {
		return
	}
	_ = s.gossip.ml.Leave(time.Second)
	_ = s.gossip.ml.Shutdown()
}

// NodeMeta implements memberlist.Delegate.
func (g *serverGossip) NodeMeta(limit int) []byte {
	b, err := api.GossipMeta{Role: api.RoleServer, ID: g.s.cfg.ID, HTTP: g.s.cfg.HTTPAdvertise, Version: version.Version()}.Encode()
	if err != nil || len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg receives agents' heartbeats.
func (g *serverGossip) NotifyMsg(b []byte) {
	if len(b) == 0 || b[0] != api.GossipHeartbeat {
		return
	}
	var hb api.GossipHeartbeatMsg
	if err := api.DecodeGossipMsg(b, &hb); err != nil || hb.Node == "" {
		return
	}
	lease := g.s.monitor.heartbeat(hb, g.s.now())
	if hb.KeyringIndex > 0 {
		g.s.keyringSeen.report(hb.Node, hb.KeyringIndex)
	}
	if g.s.IsLeader() {
		g.ackLease(hb, lease)
	}
}

// ackLease answers a heartbeat of a node's current session that is not
// DOWN: its running attempts stay its own for lease from when the agent
// sent it. Only a ready leader answers (its state holds every verdict of
// earlier terms), and never for a session whose attempts were reclaimed.
// The answer goes over UDP, best effort: the agent sends a heartbeat
// again when no answer comes.
func (g *serverGossip) ackLease(hb api.GossipHeartbeatMsg, lease time.Duration) {
	n, err := g.s.fsm.State().Node(hb.Node)
	if err != nil || n.SessionGeneration != hb.Session || n.Liveness == scheduler.LivenessDown {
		return
	}
	g.mu.Lock()
	m, ok := g.members[hb.Node]
	g.mu.Unlock()
	if !ok {
		return
	}
	msg, err := api.EncodeGossipMsg(api.GossipLeaseAck, api.GossipLeaseAckMsg{Node: hb.Node, Session: hb.Session, Seq: hb.Seq, LeaseMs: lease.Milliseconds(), KeyringIndex: g.s.keyringIndex()})
	if err != nil {
		return
	}
	addr := net.JoinHostPort(m.addr.String(), strconv.Itoa(int(m.port)))
	_ = g.s.gossip.ml.SendToAddress(memberlist.Address{Addr: addr, Name: hb.Node}, msg)
}

func (g *serverGossip) GetBroadcasts(int, int) [][]byte { return nil }
func (g *serverGossip) LocalState(bool) []byte          { return nil }
func (g *serverGossip) MergeRemoteState([]byte, bool)   {}

// NotifyJoin, NotifyUpdate and NotifyLeave implement
// memberlist.EventDelegate. A member memberlist reports as left is dead
// or gone, whatever the Node it passes says: memberlist records the new
// state beside the Node it hands to NotifyLeave, never in it, so the
// Node's State there still reads alive.
func (g *serverGossip) NotifyJoin(n *memberlist.Node)   { g.observe(n, "alive") }
func (g *serverGossip) NotifyUpdate(n *memberlist.Node) { g.observe(n, "alive") }
func (g *serverGossip) NotifyLeave(n *memberlist.Node)  { g.observe(n, leftState(n.State)) }

// leftState names the state of a member that left the pool: "left" when
// memberlist says it left gracefully, "dead" otherwise.
func leftState(s memberlist.NodeStateType) string {
	if s == memberlist.StateLeft {
		return "left"
	}
	return "dead"
}

func (g *serverGossip) observe(n *memberlist.Node, state string) {
	meta, err := api.DecodeGossipMeta(n.Meta)
	if err != nil {
		return
	}
	g.mu.Lock()
	if state == "alive" {
		g.members[n.Name] = gossipMember{addr: slices.Clone(n.Addr), port: n.Port, role: meta.Role}
	} else {
		delete(g.members, n.Name)
	}
	g.mu.Unlock()
	if meta.Role != api.RoleAgent {
		return
	}
	g.s.monitor.gossipUpdate(n.Name, state, &meta)
}
