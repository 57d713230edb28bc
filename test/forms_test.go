package test

import (
	"errors"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/fsm"
)

// Every server records the command forms it reads, the commands a
// task's life writes are applied in their binary form on every replica,
// and a newcomer that reads older forms than the cluster's is refused
// (409) without changing the configuration.
func TestServersRecordTheirFormsAndOlderOnesCannotJoin(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	WaitRegistered(t, c.StartAgent(agent.Config{ID: "edge-1", Slots: 2}))
	cl := c.AllClient()
	formsOf := func() map[string]int {
		conf, err := c.Replicas[c.WaitForLeader()].Server.RaftConfiguration()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, s := range conf.Servers {
			out[s.ID] = s.CommandForms
		}
		return out
	}
	if !Eventually(10*time.Second, func() bool {
		f := formsOf()
		return f["s1"] == fsm.CommandForms && f["s2"] == fsm.CommandForms && f["s3"] == fsm.CommandForms
	}) {
		t.Fatalf("servers did not record their forms: %v", formsOf())
	}
	waitTaskState(t, cl, submit(t, cl, shSpec("formed", "true")), "SUCCEEDED")
	c.WaitApplied(c.Replicas[c.WaitForLeader()].Server.FSM().Index())
	for _, r := range c.Replicas {
		if _, binary := r.Server.FSM().AppliedForms(); binary == 0 {
			t.Errorf("%s applied no command in the binary form", r.Cfg.ID)
		}
	}

	leader := c.Replicas[c.WaitForLeader()].Server
	err := leader.Join(Ctx(t, 10*time.Second), api.JoinRequest{ID: "s9", RaftAddress: "127.0.0.1:1", HTTPAddress: "127.0.0.1:2", CommandForms: fsm.CommandForms - 1})
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a newcomer reading older forms joined: %v", err)
	}
	conf, cerr := leader.RaftConfiguration()
	if cerr != nil || len(conf.Servers) != 3 {
		t.Fatalf("the refused newcomer changed the configuration: %+v %v", conf, cerr)
	}
}
