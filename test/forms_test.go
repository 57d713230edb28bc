package test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/fsm"
)

// A rolling upgrade from a build that reads JSON commands only: while one
// server has not recorded that it reads the binary forms, the leader
// writes JSON (that server would refuse the rest and fall behind without
// a word), whichever replica leads; once it is upgraded, the binary forms
// are written. A command newer than the oldest server's forms, a job, is
// refused meanwhile. A newcomer that cannot read the forms in use is
// refused.
func TestLeaderWritesOnlyCommandFormsEveryServerReads(t *testing.T) {
	var legacy atomic.Bool // s3 runs the "older build" while set
	legacy.Store(true)
	setup := agentSetup()
	setup.Options = func(replica string, o *cluster.Options) {
		o.ReadsJSONOnly = replica == "s3" && legacy.Load()
	}
	c := NewClusterWith(t, 3, setup)
	WaitRegistered(t, c.StartAgent(agent.Config{ID: "edge-1", Slots: 4}))
	cl := c.AllClient()

	// Every command a task's life writes: submission, reservation,
	// attempt start and end (explanations too, while none may run).
	runTasks := func(prefix string, n int) {
		t.Helper()
		var ids []string
		for i := range n {
			ids = append(ids, submit(t, cl, shSpec(fmt.Sprintf("%s-%d", prefix, i), "echo $HERD_NODE_ID")))
		}
		for _, id := range ids {
			waitTaskState(t, cl, id, "SUCCEEDED")
		}
	}
	// The same state on every replica, and how many binary commands each
	// applied.
	// The agent's heartbeats are committed all along, so the replicas
	// are compared at one index: each one's state as of the index all of
	// them have read last, retried until they are seen at the same one.
	converged := func() []uint64 {
		t.Helper()
		leader := c.WaitForLeader()
		c.WaitApplied(c.Replicas[leader].Server.FSM().Index())
		var hashes []string
		var binary []uint64
		if !Eventually(20*time.Second, func() bool {
			hashes, binary = hashes[:0], binary[:0]
			var index uint64
			for i, r := range c.Replicas {
				st := r.Server.FSM().State()
				if i == 0 {
					index = st.Index()
				} else if st.Index() != index {
					return false
				}
				h, err := st.Hash()
				if err != nil {
					t.Fatal(err)
				}
				_, b := r.Server.FSM().AppliedForms()
				hashes, binary = append(hashes, h), append(binary, b)
			}
			return true
		}) {
			t.Fatal("the replicas were never seen at one index")
		}
		if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
			t.Fatalf("replicas disagree: %v", hashes)
		}
		return binary
	}
	formsOf := func(id string) int {
		t.Helper()
		conf, err := c.Replicas[c.WaitForLeader()].Server.RaftConfiguration()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range conf.Servers {
			if s.ID == id {
				return s.CommandForms
			}
		}
		t.Fatalf("%s is not in the raft configuration: %+v", id, conf)
		return 0
	}

	// Each server records what it reads shortly after it starts; until
	// then it counts as reading JSON only.
	if !Eventually(10*time.Second, func() bool {
		st := c.Replicas[c.WaitForLeader()].Server.FSM().State()
		_, err := st.Server("s3")
		return err == nil && formsOf("s1") == fsm.CommandForms && formsOf("s2") == fsm.CommandForms
	}) {
		t.Fatalf("servers did not record their forms: s1 %d, s2 %d", formsOf("s1"), formsOf("s2"))
	}
	if got := formsOf("s3"); got != 0 {
		t.Fatalf("s3 records forms %d, want 0", got)
	}
	runTasks("old", 6)
	if got := converged(); got[0]+got[1]+got[2] != 0 {
		t.Fatalf("binary commands were written while s3 reads JSON only (applied per replica: %v)", got)
	}
	// A build that records no forms may predate jobs: a job is refused,
	// not written for s3 to refuse.
	job := api.JobSpec{Name: "upgrade", Stages: []api.StageSpec{{Name: "a", Task: stageTask("true")}}}
	var se *api.StatusError
	if _, err := cl.SubmitJob(Ctx(t, 30*time.Second), job); !errors.As(err, &se) || se.Code != 503 || se.Reason != api.CodeNotApplied {
		t.Fatalf("a job submitted while s3 reads JSON only: %v, want 503 %s", err, api.CodeNotApplied)
	}
	if jobs, _, err := cl.ListJobs(Ctx(t, 10*time.Second), "", 100, api.ReadOptions{Consistent: true}); err != nil || len(jobs.Jobs) != 0 {
		t.Fatalf("jobs after the refusal: %+v (%v)", jobs, err)
	}
	// The JSON-only server leads for a while: it writes JSON too.
	if leader := c.WaitForLeader(); c.Replicas[leader].Cfg.ID != "s3" {
		if err := c.Replicas[leader].Server.TransferLeadership(Ctx(t, 30*time.Second), "s3"); err != nil {
			t.Fatalf("hand leadership to s3: %v", err)
		}
	}
	runTasks("old-leader", 3)
	if got := converged(); got[0]+got[1]+got[2] != 0 {
		t.Fatalf("binary commands were written under s3's leadership (applied per replica: %v)", got)
	}

	// A newcomer that reads JSON only may join while JSON is written, so
	// the refusal is checked once the binary forms are in use (below).
	c.Stop(2)
	legacy.Store(false)
	c.Start(2)
	if !Eventually(20*time.Second, func() bool {
		return c.Replicas[c.WaitForLeader()].Server.RaftStats()["command_forms_written"] == "binary"
	}) {
		t.Fatalf("the leader still writes JSON after s3 was upgraded (s3 records %d)", formsOf("s3"))
	}
	runTasks("new", 6)
	res, err := cl.SubmitJob(Ctx(t, 30*time.Second), job)
	if err != nil {
		t.Fatalf("a job after the upgrade: %v", err)
	}
	if j := waitJob(t, cl, res.ID); j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	for i, b := range converged() {
		if b == 0 {
			t.Errorf("%s applied no binary command after the upgrade", c.Replicas[i].Cfg.ID)
		}
	}

	leader := c.Replicas[c.WaitForLeader()].Server
	err = leader.Join(Ctx(t, 10*time.Second), api.JoinRequest{ID: "s9", RaftAddress: "127.0.0.1:1", HTTPAddress: "127.0.0.1:2"})
	if !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a newcomer reading JSON only joined a cluster writing binary forms: %v", err)
	}
	conf, cerr := leader.RaftConfiguration()
	if cerr != nil || len(conf.Servers) != 3 {
		t.Fatalf("the refused newcomer changed the configuration: %+v %v", conf, cerr)
	}
}
