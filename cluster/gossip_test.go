package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/config"
)

// memberlist reports a member it marked dead through NotifyLeave with a
// Node whose State still reads alive (it records the new state beside
// that Node, never in it): the replica must still see the member as gone,
// or the leader waits three times the DOWN bound for a dead agent.
func TestLeftMemberIsNotAlive(t *testing.T) {
	s := &Server{monitor: newMonitor(config.DefaultLiveness()), now: time.Now}
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
