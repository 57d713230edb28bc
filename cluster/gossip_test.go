package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/config"
	"herd/fsm"
)

// memberlist reports a member it marked dead through NotifyLeave with a
// Node whose State still reads alive (it records the new state beside
// that Node, never in it): the replica must still see the member as gone,
// or the leader waits three times the DOWN bound for a dead agent.
func TestLeftMemberIsNotAlive(t *testing.T) {
	s := &Server{replica: &replica{now: time.Now}, monitor: newMonitor(config.DefaultLiveness())}
	g := &serverGossip{s: s, members: map[string]gossipMember{}}
	meta, err := api.GossipMeta{Role: api.RoleAgent, ID: "edge-1"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	n := &memberlist.Node{Name: "edge-1", Meta: meta}
	g.NotifyJoin(n)
	if _, _, _ = s.monitor.view("edge-1", time.Time{}, time.Time{}, time.Now()); len(g.members) != 1 {
		t.Fatal("a joined member is not in the member table")
	}
	for _, state := range []memberlist.NodeStateType{memberlist.StateAlive, memberlist.StateSuspect, memberlist.StateDead} {
		n.State = state // what memberlist passes: StateAlive, as it never updates the Node's own field
		g.NotifyLeave(n)
		obs, _, _ := s.monitor.view("edge-1", time.Time{}, time.Time{}, time.Now())
		if obs.GossipState != "dead" {
			t.Errorf("NotifyLeave with State %v: gossip state %q, want dead", state, obs.GossipState)
		}
		if _, kept := g.members["edge-1"]; kept {
			t.Errorf("NotifyLeave with State %v: the member stays in the member table", state)
		}
		g.NotifyJoin(n)
	}
	n.State = memberlist.StateLeft
	g.NotifyLeave(n)
	if obs, _, _ := s.monitor.view("edge-1", time.Time{}, time.Time{}, time.Now()); obs.GossipState != "left" {
		t.Errorf("a graceful leave reads %q, want left", obs.GossipState)
	}
}

// A replica joins every server of the server table its pool lacks, even
// when the pool holds other members: an agent that joined a lone server
// before the servers found each other must not keep that server's pool
// apart from the others' (the leader then never hears the agent).
func TestJoinsServersThePoolLacks(t *testing.T) {
	f := fsm.New(nil)
	for i, id := range []string{"s1", "s2", "s3"} {
		b, err := fsm.Encode(fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{ID: id, GossipAddress: fmt.Sprintf("127.0.0.1:%d", 7000+i)}})
		if err != nil {
			t.Fatal(err)
		}
		if res := f.ApplyBytes(uint64(i+1), b); res != nil {
			if err, ok := res.(error); ok {
				t.Fatal(err)
			}
		}
	}
	s := &Server{cfg: config.Server{ID: "s1"}, replica: &replica{id: "s1", fsm: f, now: time.Now}, monitor: newMonitor(config.DefaultLiveness())}
	s.gossip = &serverGossip{s: s, members: map[string]gossipMember{}}
	join := func(name, role string) {
		meta, _ := api.GossipMeta{Role: role, ID: name}.Encode()
		s.gossip.NotifyJoin(&memberlist.Node{Name: name, Meta: meta})
	}
	join("s1", api.RoleServer)
	join("edge-1", api.RoleAgent)
	if got := s.unjoinedGossipServers(); !slices.Equal(got, []string{"127.0.0.1:7001", "127.0.0.1:7002"}) {
		t.Fatalf("a pool of itself and an agent would join %v, want both other servers", got)
	}
	join("s2", api.RoleServer)
	join("s3", api.RoleServer)
	if got := s.unjoinedGossipServers(); len(got) != 0 {
		t.Fatalf("a pool holding every server would join %v", got)
	}
}
