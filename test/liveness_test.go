package test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"herd/agent"
	"herd/api"
	"herd/config"
)

func gossipSetup(extra ...ClusterOption) Setup {
	return Setup{Gossip: true, CheckInvariants: true, Config: append([]ClusterOption{fastRetries}, extra...)}
}

// faultyAgent starts an agent whose gossip goes through a FaultTransport.
func faultyAgent(c *Cluster, cfg agent.Config, seed uint64) (*AgentHandle, *FaultTransport) {
	made := make(chan *FaultTransport, 1)
	cfg.GossipTransport = func(inner memberlist.Transport) memberlist.Transport {
		ft := NewFaultTransport(inner, seed)
		made <- ft
		return ft
	}
	h := c.StartAgent(cfg)
	select {
	case ft := <-made:
		return h, ft
	case <-time.After(30 * time.Second):
		c.t.Fatalf("agent %s did not join gossip", cfg.ID)
		return nil, nil
	}
}

func node(t *testing.T, cl *api.Client, id string) api.Node {
	t.Helper()
	n, _, err := cl.GetNode(context.Background(), id, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatalf("node %s: %v", id, err)
	}
	return n
}

// gossiping reports whether a registered node's gossip is seen alive.
func gossiping(cl *api.Client, id string) bool {
	n, _, err := cl.GetNode(context.Background(), id, api.ReadOptions{Consistent: true})
	return err == nil && n.Observation.GossipState == "alive"
}

func countEvents(n api.Node, kind string) int {
	c := 0
	for _, e := range n.Events {
		if e.Kind == kind {
			c++
		}
	}
	return c
}

// Test 1: a killed agent goes SUSPECT then DOWN within the configured
// bound; its attempt is reclaimed and finishes elsewhere.
func TestDeadAgentIsDeclaredDownAndWorkMoves(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	victim := c.StartAgent(agent.Config{ID: "victim", Labels: map[string]string{"first": "yes"}, Slots: 1})
	c.StartAgent(agent.Config{ID: "spare", Slots: 1})
	cl := c.AllClient()
	// Both must be registered, or the task may go to the only one there.
	if !Eventually(30*time.Second, func() bool {
		nodes, _, err := cl.ListNodes(context.Background(), api.ReadOptions{Consistent: true})
		ready := 0
		for _, n := range nodes {
			if n.Liveness == "READY" {
				ready++
			}
		}
		return err == nil && ready == 2
	}) {
		t.Fatal("the two agents did not register")
	}
	s := shSpec("moves", "sleep 1; echo done on $HERD_NODE_ID")
	s.PreferredLabels = map[string]string{"first": "yes"}
	id := submit(t, cl, s)
	if task := waitTaskState(t, cl, id, "RUNNING"); task.Attempts[0].NodeID != "victim" {
		t.Fatalf("first attempt should run on victim: %+v", task.Attempts)
	}
	killed := time.Now()
	victim.Stop()
	var n api.Node
	if !Eventually(30*time.Second, func() bool { n = node(t, cl, "victim"); return n.Liveness == "DOWN" }) {
		t.Fatalf("victim never declared DOWN: %+v", n)
	}
	took := time.Since(killed)
	lv := c.Replicas[0].Cfg.Liveness
	bound := time.Duration(lv.DownAfter)*lv.MaxHeartbeatInterval + lv.HeartbeatInterval
	t.Logf("declared DOWN %v after the kill (configured bound %v)", took.Round(time.Millisecond), bound)
	if countEvents(n, "suspect") != 1 || countEvents(n, "down") != 1 {
		t.Fatalf("want SUSPECT then DOWN in the node's events: %+v", n.Events)
	}
	task := waitTaskState(t, cl, id, "SUCCEEDED")
	if task.Attempts[0].State != "LOST" || task.Attempts[1].NodeID != "spare" || !strings.Contains(task.Attempts[1].OutputTail, "done on spare") {
		t.Fatalf("the attempt should be reclaimed and finish on spare: %+v", task.Attempts)
	}
}

// downBound is when the leader declares a node DOWN at the latest, from
// the moment the node went silent: its last heartbeat came at most one
// interval before; DownAfter missed intervals, plus the half interval of
// lateness that is not a miss, plus the liveness check's period (a fifth
// of an interval), plus slack for committing the verdict on a loaded
// machine. memberlist must have seen the node fail by then too: its
// suspicion timeout is shorter than that bound at every timing used here.
func downBound(lv config.Liveness, slack time.Duration) time.Duration {
	iv := lv.HeartbeatInterval
	return time.Duration(lv.DownAfter+1)*iv + iv/2 + iv/5 + slack
}

// A node cut off from everyone (gossip and HTTP both ways, as SIGSTOP
// looks from outside) is DOWN within the bound, with memberlist agreeing
// that it is dead: not after the three times longer wait the leader
// allows a node whose gossip still reads alive.
func TestCutOffAgentIsDownWithinTheBound(t *testing.T) {
	slower := func(c *config.Server) {
		// Heartbeats slower than memberlist's failure detection, so the
		// bound tested is herd's own.
		c.Liveness.HeartbeatInterval, c.Liveness.MaxHeartbeatInterval = 400*time.Millisecond, 1200*time.Millisecond
	}
	c := NewClusterWith(t, 3, gossipSetup(slower))
	victim, ft := faultyAgent(c, agent.Config{ID: "victim", Slots: 1, HeartbeatInterval: 400 * time.Millisecond}, 7)
	WaitRegistered(t, victim)
	cl := c.AllClient()
	if !Eventually(30*time.Second, func() bool { return gossiping(cl, "victim") }) {
		t.Fatal("victim never seen alive in gossip")
	}
	lv := c.Replicas[0].Cfg.Liveness
	// Past the leader's grace, so that the verdict is not held back.
	time.Sleep(lv.LeaderGrace)
	cut := time.Now()
	ft.Cut(true)
	victim.Transport.Cut()
	var n api.Node
	if !Eventually(3*downBound(lv, 0), func() bool { n = node(t, cl, "victim"); return n.Liveness == api.LivenessDown }) {
		t.Fatalf("victim never declared DOWN: %+v", n)
	}
	took := time.Since(cut)
	bound := downBound(lv, time.Second)
	t.Logf("DOWN %v after the cut (bound %v)", took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("DOWN took %v, more than down_after intervals plus jitter (%v)", took, bound)
	}
	var reason string
	for _, e := range n.Events {
		if e.Kind == "down" {
			reason = e.Message
		}
	}
	if !strings.Contains(reason, "gossip dead") {
		t.Errorf("the DOWN verdict's reason %q does not say memberlist saw the node dead", reason)
	}
}

// Test 2: heavy packet loss between an agent and everyone else gets it
// neither declared down nor makes its lease run out (the interval
// stretches with the loss the servers see); the interval comes back when
// the loss ends. Three agents suffer 10, 30 and 50% loss at once for the
// equivalent of five minutes; their false-DOWN and lease-lapse counts
// are logged.
func TestPacketLossStretchesInsteadOfKilling(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	levels := []float64{0.1, 0.3, 0.5}
	faults, agents := map[float64]*FaultTransport{}, map[float64]*AgentHandle{}
	name := func(loss float64) string { return fmt.Sprintf("lossy-%02.0f", loss*100) }
	for i, loss := range levels {
		agents[loss], faults[loss] = faultyAgent(c, agent.Config{ID: name(loss), Slots: 1}, uint64(7+i))
	}
	cl := c.AllClient()
	lv := c.Replicas[0].Cfg.Liveness
	for _, loss := range levels {
		if !Eventually(10*time.Second, func() bool { return gossiping(cl, name(loss)) }) {
			t.Fatalf("%s never gossiped", name(loss))
		}
	}
	downBefore, suspectBefore, widest := map[float64]int{}, map[float64]int{}, map[float64]int64{}
	lapsesBefore := map[float64]uint64{}
	for _, loss := range levels {
		n := node(t, cl, name(loss))
		downBefore[loss], suspectBefore[loss] = countEvents(n, "down"), countEvents(n, "suspect")
		lapsesBefore[loss] = agents[loss].Agent.LeaseLapses()
		faults[loss].SetLoss(loss)
	}
	// 60 base intervals under loss: five minutes of 5 s heartbeats,
	// squeezed into nine seconds.
	for end := time.Now().Add(60 * lv.HeartbeatInterval); time.Now().Before(end); time.Sleep(lv.HeartbeatInterval) {
		for _, loss := range levels {
			widest[loss] = max(widest[loss], node(t, cl, name(loss)).Observation.IntervalMs)
		}
	}
	for _, loss := range levels {
		faults[loss].SetLoss(0)
		n := node(t, cl, name(loss))
		down, suspect := countEvents(n, "down")-downBefore[loss], countEvents(n, "suspect")-suspectBefore[loss]
		lapses := agents[loss].Agent.LeaseLapses() - lapsesBefore[loss]
		t.Logf("loss %2.0f%%: %d false DOWN, %d SUSPECT (each refuted or ended by DOWN), %d lease lapses (false self-fencing), widest interval %d ms (base %v, max %v)",
			loss*100, down, suspect, lapses, widest[loss], lv.HeartbeatInterval, lv.MaxHeartbeatInterval)
		if loss == 0.3 && down != 0 {
			t.Errorf("30%% loss caused %d DOWN verdicts", down)
		}
		if loss <= 0.3 && lapses != 0 {
			t.Errorf("%.0f%% loss made a healthy agent's lease run out %d times", loss*100, lapses)
		}
		// An unanswered heartbeat goes again within its interval (same
		// sequence number), so the loss the servers count, and stretch the
		// interval by, is what eats every copy: a few percent at 50% loss.
		// How far it stretches is logged, not asserted.
	}
	// Back to the base interval once the loss ends (a node declared DOWN
	// registers again by itself first).
	for _, loss := range levels {
		if !Eventually(30*time.Second, func() bool {
			n := node(t, cl, name(loss))
			return n.Liveness == "READY" && n.Observation.IntervalMs <= lv.HeartbeatInterval.Milliseconds()*11/10
		}) {
			t.Fatalf("interval did not come back after %.0f%% loss: %+v", loss*100, node(t, cl, name(loss)).Observation)
		}
	}
}

// Test 3: an agent cut off past the DOWN bound comes back with a new
// session; it stopped its old attempt when its lease ran out, and its
// late report changes nothing; no attempt ever ran as "current" twice
// (invariants are checked at every index).
func TestPausedAgentRejoinsWithNewSession(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	paused, ft := faultyAgent(c, agent.Config{ID: "paused", Labels: map[string]string{"first": "yes"}, Slots: 1}, 3)
	other := c.StartAgent(agent.Config{ID: "other", Slots: 1})
	// Both registered before the submit, or the task may go to whichever
	// registered first (this failed once under -race).
	WaitRegistered(t, paused, other)
	cl := c.AllClient()
	s := shSpec("pause", "sleep 1.5; echo finished on $HERD_NODE_ID")
	s.PreferredLabels = map[string]string{"first": "yes"}
	id := submit(t, cl, s)
	first := waitTaskState(t, cl, id, "RUNNING").Attempts[0]
	if first.NodeID != "paused" {
		t.Fatalf("first attempt on %s", first.NodeID)
	}
	waitAgentStarted(t, paused, 1)
	session := node(t, cl, "paused").SessionGeneration
	ft.Cut(true)
	paused.Transport.Cut()
	if !Eventually(30*time.Second, func() bool { return node(t, cl, "paused").Liveness == "DOWN" }) {
		t.Fatal("paused agent never declared DOWN")
	}
	task := waitTaskState(t, cl, id, "SUCCEEDED")
	if task.Attempts[1].NodeID != "other" {
		t.Fatalf("the retry should run on other: %+v", task.Attempts)
	}
	ft.Cut(false)
	paused.Transport.Heal()
	if !Eventually(30*time.Second, func() bool {
		n := node(t, cl, "paused")
		return n.Liveness == "READY" && n.SessionGeneration > session
	}) {
		t.Fatalf("paused agent did not rejoin with a new session: %+v", node(t, cl, "paused"))
	}
	// Cut off past its lease, the agent stopped the attempt itself; what
	// it reports once back changes nothing but the timeline.
	if paused.Agent.Fences() == 0 {
		t.Fatal("the cut-off agent did not stop its attempt when its lease ran out")
	}
	if !Eventually(30*time.Second, func() bool {
		after, _, err := cl.GetTask(context.Background(), id, api.ReadOptions{Consistent: true})
		return err == nil && timelineSays(after, "as its agent reports: stopped on paused")
	}) {
		t.Fatal("the agent's report of the stopped attempt is not in the timeline")
	}
	if after, _, _ := cl.GetTask(context.Background(), id, api.ReadOptions{Consistent: true}); after.State != "SUCCEEDED" || after.Attempts[0].State != "LOST" {
		t.Fatalf("the late report changed the task: %+v", after)
	}
}

// Test 4: a leader failover while an agent is SUSPECT: the new leader
// declares nothing DOWN during its grace period, then verdicts resume.
func TestNewLeaderGraceBeforeVerdicts(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup(func(cfg *config.Server) {
		cfg.Liveness.DownAfter = 20 // 2 s of silence at 100 ms
		cfg.Liveness.LeaderGrace = 3 * time.Second
	}))
	shaky, ft := faultyAgent(c, agent.Config{ID: "shaky", Slots: 1}, 5)
	cl := c.AllClient()
	if !Eventually(10*time.Second, func() bool { return gossiping(cl, "shaky") }) {
		t.Fatal("shaky never gossiped")
	}
	// The first leader's own grace must be over before SUSPECT can happen.
	time.Sleep(c.Replicas[0].Cfg.Liveness.LeaderGrace)
	// Cut off entirely: it falls back to HTTP heartbeats when gossip ones
	// go unanswered.
	ft.Cut(true)
	shaky.Transport.Cut()
	if !Eventually(10*time.Second, func() bool { return node(t, cl, "shaky").Liveness == "SUSPECT" }) {
		t.Fatal("shaky never became SUSPECT")
	}
	c.Stop(c.WaitForLeader())
	c.WaitForLeader()
	elected := time.Now()
	grace := c.Replicas[0].Cfg.Liveness.LeaderGrace
	// Well past the 2 s DOWN bound, but inside the new leader's grace.
	for time.Since(elected) < grace-500*time.Millisecond {
		if n := node(t, cl, "shaky"); n.Liveness == "DOWN" {
			t.Fatalf("declared DOWN %v into the new leader's %v grace", time.Since(elected), grace)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !Eventually(20*time.Second, func() bool { return node(t, cl, "shaky").Liveness == "DOWN" }) {
		t.Fatal("verdicts did not resume after the grace period")
	}
	t.Logf("DOWN %v after the new leader was elected (grace %v)", time.Since(elected).Round(time.Millisecond), grace)
}

// Test 5: an idle agent hibernates; a task only it can run wakes it and
// completes there; an agent that never wakes is passed over.
func TestHibernationWakeAndPassOver(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	sleeper := c.StartAgent(agent.Config{ID: "sleeper", Labels: map[string]string{"only": "sleeper"}, Slots: 1, HibernateAfter: 300 * time.Millisecond})
	deaf, ft := faultyAgent(c, agent.Config{ID: "deaf", Labels: map[string]string{"fast": "yes"}, Slots: 1, HibernateAfter: 300 * time.Millisecond}, 11)
	c.StartAgent(agent.Config{ID: "awake", Slots: 1})
	cl := c.AllClient()
	if !Eventually(20*time.Second, func() bool {
		return sleeper.Agent.Hibernating() && deaf.Agent.Hibernating() && node(t, cl, "sleeper").Observation.Hibernating
	}) {
		t.Fatal("idle agents did not hibernate")
	}
	// Only the sleeper can run this: the leader wakes it.
	s := shSpec("wake", "echo awake on $HERD_NODE_ID")
	s.RequiredLabels = map[string]string{"only": "sleeper"}
	task := waitTaskState(t, cl, submit(t, cl, s), "SUCCEEDED")
	if task.Attempts[0].NodeID != "sleeper" {
		t.Fatalf("ran on %s", task.Attempts[0].NodeID)
	}
	// The deaf agent is preferred but cannot be woken (its reliable
	// messages are dropped): after the wake timeout it is passed over.
	ft.DropIncomingStreams(true)
	p := shSpec("pass-over", "echo ran on $HERD_NODE_ID")
	p.PreferredLabels = map[string]string{"fast": "yes"}
	task = waitTaskState(t, cl, submit(t, cl, p), "SUCCEEDED")
	if task.Attempts[0].NodeID == "deaf" {
		t.Fatalf("a node that never woke should have been passed over: %+v", task.Attempts)
	}
	if !deaf.Agent.Hibernating() {
		t.Fatal("the deaf agent should still be asleep")
	}
	if n := node(t, cl, "deaf"); n.Liveness != "READY" {
		t.Fatalf("a hibernating agent must not be declared down: %+v", n)
	}
}

// A second agent with a live agent's id, or with the wrong gossip key,
// fails to start with a clear error instead of disturbing the pool.
func TestGossipRefusesDuplicatesAndWrongKeys(t *testing.T) {
	key := "c2VjcmV0LWtleS0xNi1ieQ==" // 16 bytes
	c := NewClusterWith(t, 3, gossipSetup(func(cfg *config.Server) { cfg.GossipKey = key }))
	good, err := config.DecodeGossipKey(key)
	if err != nil {
		t.Fatal(err)
	}
	first := c.StartAgent(agent.Config{ID: "unique", GossipKey: good, Slots: 1})
	cl := c.AllClient()
	if !Eventually(10*time.Second, func() bool { return gossiping(cl, "unique") }) {
		t.Fatal("the first agent never gossiped")
	}
	session := node(t, cl, "unique").SessionGeneration
	run := func(cfg agent.Config) error {
		for _, r := range c.Replicas {
			cfg.Servers = append(cfg.Servers, r.Cfg.HTTPAddr)
		}
		cfg.DataDir, cfg.GossipTune, cfg.Logger = t.TempDir(), FastGossip, TestLogger()
		ag, err := agent.New(cfg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return ag.Run(ctx)
	}
	wrong, _ := config.DecodeGossipKey("b3RoZXIta2V5LTE2LWJ5dA==")
	cases := []struct {
		name string
		cfg  agent.Config
		want string
	}{
		{"no key", agent.Config{ID: "nokey"}, "the cluster encrypts gossip"},
		{"wrong key", agent.Config{ID: "wrongkey", GossipKey: wrong}, "gossip key"},
		{"duplicate id", agent.Config{ID: "unique", GossipKey: good}, `another live member named "unique"`},
	}
	for _, tc := range cases {
		err := run(tc.cfg)
		t.Logf("%s: %q", tc.name, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error about %q, got %v", tc.name, tc.want, err)
		}
	}
	if n := node(t, cl, "unique"); n.SessionGeneration != session || n.Liveness != "READY" {
		t.Fatalf("the refused duplicate disturbed the first agent: %+v", n)
	}
	_ = first
}

// A suspicion that the agent's heartbeats refute returns the node to
// READY with nothing reclaimed: its running attempt and session survive.
//
// The agent is cut off entirely (gossip and HTTP: it falls back to HTTP
// heartbeats when gossip ones go unanswered), and DOWN is far enough off
// that its lease on the attempt outlasts the suspicion.
func TestRefutedSuspicionReclaimsNothing(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup(func(c *config.Server) { c.Liveness.DownAfter = 10 }))
	h, ft := faultyAgent(c, agent.Config{ID: "blip", Slots: 1}, 13)
	cl := c.AllClient()
	id := submit(t, cl, shSpec("survives", "sleep 4; echo still here"))
	running := waitTaskState(t, cl, id, "RUNNING")
	session := node(t, cl, "blip").SessionGeneration
	// Lose every heartbeat for a moment: long enough for SUSPECT, far too
	// short for memberlist to call the agent dead.
	ft.SetLoss(1)
	h.Transport.Cut()
	if !Eventually(10*time.Second, func() bool { return node(t, cl, "blip").Liveness == "SUSPECT" }) {
		t.Fatal("blip never became SUSPECT")
	}
	ft.SetLoss(0)
	h.Transport.Heal()
	if !Eventually(10*time.Second, func() bool { return node(t, cl, "blip").Liveness == "READY" }) {
		t.Fatal("blip did not return to READY")
	}
	n := node(t, cl, "blip")
	if n.SessionGeneration != session || countEvents(n, "down") != 0 || countEvents(n, "ready") == 0 {
		t.Fatalf("refuted suspicion must keep the session and reclaim nothing: %+v", n.Events)
	}
	task := waitTaskState(t, cl, id, "SUCCEEDED")
	if len(task.Attempts) != 1 || task.Attempts[0].ID != running.Attempts[0].ID || !strings.Contains(task.Attempts[0].OutputTail, "still here") {
		t.Fatalf("the attempt should have run to the end on blip: %+v", task.Attempts)
	}
	if _, _, rejected := h.Agent.Stats(); rejected != 0 {
		t.Fatalf("no result should have been refused, got %d", rejected)
	}
}

// A gossiping node's HTTP heartbeats are answered from the leader's
// state: they add nothing to the Raft log (the liveness loop commits
// gossip heartbeats in batches). A node whose
// gossip the leader does not hear has each one committed, as before.
func TestHTTPHeartbeatsOfGossipingNodesWriteNoEntries(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	ag := c.StartAgent(agent.Config{ID: "gossiper", Slots: 1})
	WaitRegistered(t, ag)
	cl := c.AllClient()
	if !Eventually(20*time.Second, func() bool { return gossiping(cl, "gossiper") }) {
		t.Fatal("the agent never gossiped")
	}
	ctx := Ctx(t, time.Minute)
	silent, err := cl.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: "silent", Capabilities: map[string][]string{"exec": {"1"}},
		Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const beats = 20
	// entriesFor sends the heartbeats one after another (none shares an
	// entry with another) and returns how far the leader's log moved.
	entriesFor := func(id string, session uint64) uint64 {
		t.Helper()
		leader := c.Client(c.WaitForLeader())
		lastIndex := func() uint64 {
			st, err := leader.RaftStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			v, err := strconv.ParseUint(st["last_log_index"], 10, 64)
			if err != nil {
				t.Fatalf("last_log_index %q: %v", st["last_log_index"], err)
			}
			return v
		}
		before := lastIndex()
		for range beats {
			hb, err := leader.Heartbeat(ctx, id, session)
			if err != nil {
				t.Fatalf("heartbeat of %s: %v", id, err)
			}
			if hb.SessionGeneration != session || hb.LeaseMs <= 0 {
				t.Fatalf("heartbeat of %s: %+v, want session %d and a lease", id, hb, session)
			}
		}
		return lastIndex() - before
	}
	if n := entriesFor("silent", silent.SessionGeneration); n < beats {
		t.Errorf("%d heartbeats of a node without gossip moved the log by %d entries, want one each", beats, n)
	}
	// The liveness loop's own batches may land meanwhile: a few entries,
	// not one per heartbeat.
	if n := entriesFor("gossiper", ag.Agent.Session()); n >= beats/2 {
		t.Errorf("%d heartbeats of a gossiping node moved the log by %d entries", beats, n)
	}
	// A heartbeat for another session is still refused as the agent
	// expects (it registers again).
	_, err = c.Client(c.WaitForLeader()).Heartbeat(ctx, "gossiper", ag.Agent.Session()+1)
	var se *api.StatusError
	if !errors.As(err, &se) || se.Reason != "session_changed" {
		t.Errorf("heartbeat for a session that is not the node's: %v, want session_changed", err)
	}
}

// An agent that cannot join the gossip pool at first (the servers busy
// or cut off from it) keeps trying, for longer than any fixed deadline a
// start would allow, and joins and registers once the pool is reachable:
// a fleet starting beside busy servers does not lose agents to it.
func TestAgentKeepsTryingToJoinTheGossipPool(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	made := make(chan *FaultTransport, 1)
	h := c.StartAgent(agent.Config{ID: "patient", Slots: 1, GossipTransport: func(inner memberlist.Transport) memberlist.Transport {
		ft := NewFaultTransport(inner, 7)
		ft.Cut(true)
		made <- ft
		return ft
	}})
	var ft *FaultTransport
	select {
	case ft = <-made:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent never started its gossip")
	}
	cl := c.AllClient()
	// Cut off for longer than the 30 s an agent used to try for.
	cutUntil := time.Now().Add(32 * time.Second)
	for time.Now().Before(cutUntil) {
		if gossiping(cl, "patient") {
			t.Fatal("the agent joined through a cut link")
		}
		time.Sleep(500 * time.Millisecond)
	}
	ft.Cut(false)
	if !Eventually(30*time.Second, func() bool { return gossiping(cl, "patient") }) {
		t.Fatal("the agent never joined once the pool was reachable")
	}
	WaitRegistered(t, h)
}
