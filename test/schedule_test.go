package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/api"
	"herd/config"
	"herd/fsm"
)

func registerNode(t *testing.T, cl *api.Client, id string, cpu, mem, gpu int64, slots int, labels map[string]string) api.RegisterResponse {
	t.Helper()
	res, err := cl.RegisterNode(Ctx(t, 30*time.Second), api.NodeRegistration{NodeSpec: api.NodeSpec{
		ID: id, Labels: labels, Capabilities: map[string][]string{"exec": {"1"}},
		Resources: api.Resources{CPUMillis: cpu, MemoryMB: mem, GPU: gpu, DiskMB: 1000}, Slots: slots,
	}})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return res
}

// stuckReport describes, straight from each replica's state (the test's
// context may be over by then), a task that did not finish and what the
// leader's scheduler saw.
func stuckReport(c *Cluster, id string) string {
	var b strings.Builder
	for i := range c.Replicas {
		srv := c.Server(i)
		if srv == nil {
			fmt.Fprintf(&b, "replica %d: stopped\n", i)
			continue
		}
		st := srv.FSM().State()
		task, err := st.Task(id)
		if err != nil {
			fmt.Fprintf(&b, "replica %d (leader %v): %v\n", i, srv.IsLeader(), err)
			continue
		}
		counts, _ := st.CountTasks()
		stats := srv.SchedulerStats()
		fmt.Fprintf(&b, "replica %d (leader %v, applied %d): task %s, %d attempts, not before %s; tasks by state %v; scheduler passes %d, queue depth %d\n",
			i, srv.IsLeader(), st.Index(), task.State, task.Attempts, task.NotBefore().Time().Format(time.RFC3339Nano), counts, stats.Passes.Load(), stats.QueueDepth.Load())
		if attempts, err := st.AttemptsOfTask(id); err == nil {
			for _, a := range attempts {
				fmt.Fprintf(&b, "  attempt %d on %s: %s, reserved %s, finished %s (index %d..%d)\n", a.Number, a.NodeID, a.State,
					a.ReservedAt.Time().Format(time.RFC3339Nano), a.FinishedAt.Time().Format(time.RFC3339Nano), a.CreateIndex, a.ModifyIndex)
			}
		}
		if nodes, err := st.Nodes(); err == nil {
			for _, n := range nodes {
				fmt.Fprintf(&b, "  node %s: %s/%s/%s\n", n.ID, n.Management, n.Liveness, n.Scheduling)
			}
		}
	}
	return b.String()
}

func waitTaskState(t *testing.T, cl *api.Client, id string, states ...string) api.Task {
	t.Helper()
	var last api.Task
	if !Eventually(60*time.Second, func() bool {
		task, _, err := cl.GetTask(context.Background(), id, api.ReadOptions{Consistent: true})
		if err != nil {
			return false
		}
		last = task
		for _, s := range states {
			if task.State == s {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("task %s stuck in %s (want %v); timeline %+v", id, last.State, states, last.Timeline)
	}
	return last
}

// Nodes register through a follower; the leader places tasks on them; a
// task no node can take says why, in its explain and in its timeline.
func TestPlacementAndExplainOverHTTP(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true})
	cl := c.Client(c.Follower())
	ctx := Ctx(t, time.Minute)
	reg := registerNode(t, cl, "edge-1", 2000, 2048, 0, 2, map[string]string{"zone": "a"})
	if reg.SessionGeneration != 1 {
		t.Fatalf("first registration starts session 1, got %d", reg.SessionGeneration)
	}
	registerNode(t, cl, "edge-2", 4000, 4096, 0, 4, map[string]string{"zone": "b", "disk": "ssd"})

	s := echoSpec("placed")
	s.PreferredLabels = map[string]string{"disk": "ssd"}
	s.Resources = api.Resources{CPUMillis: 500, MemoryMB: 128}
	sub, _, err := cl.SubmitTask(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	task := waitTaskState(t, cl, sub.ID, "SCHEDULED")
	if len(task.Attempts) != 1 || task.Attempts[0].NodeID != "edge-2" || task.Attempts[0].State != "RESERVED" || task.Attempts[0].LeaseVersion == 0 {
		t.Fatalf("want one reserved attempt on edge-2 (preferred label): %+v", task.Attempts)
	}
	node, _, err := cl.GetNode(ctx, "edge-2", api.ReadOptions{Consistent: true})
	if err != nil || node.Reserved.CPUMillis != 500 || node.RunningAttempts != 1 || node.Free.CPUMillis != 3500 || len(node.Attempts) != 1 {
		t.Fatalf("edge-2 books: %+v %v", node, err)
	}

	// A GPU task cannot be placed anywhere: explain says so, node by node.
	g := echoSpec("gpu")
	g.Resources = api.Resources{GPU: 1}
	gsub, _, err := cl.SubmitTask(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := cl.ExplainTask(ctx, gsub.ID, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Total != 2 || ex.Eligible != 0 || ex.Summary != "0/2 nodes eligible: 2 GPU below minimum" {
		t.Fatalf("explain: %+v", ex)
	}
	if ex.Nodes[0].Reasons[0] != "GPU below minimum (0 < 1 units)" || ex.Nodes[0].Codes[0] != "gpu_below_minimum" {
		t.Fatalf("reason text: %+v", ex.Nodes[0])
	}
	// The leader records the explanation in the task's timeline.
	if !Eventually(20*time.Second, func() bool {
		task, _, err := cl.GetTask(ctx, gsub.ID, api.ReadOptions{Consistent: true})
		if err != nil {
			return false
		}
		for _, e := range task.Timeline {
			if e.Kind == "waiting" && e.Message == ex.Summary {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the waiting reason never reached the timeline")
	}
	// Draining edge-2 keeps its attempt but refuses new work.
	n, err := cl.DrainNode(ctx, "edge-2", true)
	if err != nil || n.Management != "DRAINING" || n.RunningAttempts != 1 {
		t.Fatalf("drain: %+v %v", n, err)
	}
	ex, err = cl.Explain(ctx, api.ExplainRequest{TaskSpec: api.TaskSpec{Resources: api.Resources{CPUMillis: 3000}}}, api.ReadOptions{Consistent: true})
	if err != nil || ex.Summary != "0/2 nodes eligible: 1 CPU below minimum, 1 not active" {
		t.Fatalf("what-if after drain: %+v %v", ex, err)
	}
	if n, err = cl.SetNodeEligibility(ctx, "edge-1", false); err != nil || n.Scheduling != "INELIGIBLE" {
		t.Fatalf("eligibility: %+v %v", n, err)
	}
	nodes, _, err := cl.ListNodes(ctx, api.ReadOptions{Consistent: true})
	if err != nil || len(nodes) != 2 || nodes[0].ID != "edge-1" {
		t.Fatalf("list nodes: %+v %v", nodes, err)
	}
	if _, err := cl.DrainNode(ctx, "ghost", true); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("drain of unknown node: want 404, got %v", err)
	}
	if _, err := cl.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: "bad id"}}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("bad registration: want 400, got %v", err)
	}
	// Re-registration starts a new session; heartbeats for the old one are refused.
	again := registerNode(t, cl, "edge-1", 2000, 2048, 0, 2, map[string]string{"zone": "a"})
	if again.SessionGeneration != 2 {
		t.Fatalf("re-registration: session %d", again.SessionGeneration)
	}
	if _, err := cl.Heartbeat(ctx, "edge-1", 1); !errors.Is(err, api.ErrConflict) {
		t.Fatal("a heartbeat from an old session must be refused")
	}
	if hb, err := cl.Heartbeat(ctx, "edge-1", 2); err != nil || hb.Liveness != "READY" {
		t.Fatalf("heartbeat: %v", err)
	}
}

// The worked example of docs/scheduling.md over HTTP, with the leader's clock moved
// so node-c's heartbeat is 90 s old, and profile scoring off: the
// reference formula alone.
func TestSeedExampleOverHTTP(t *testing.T) {
	clock := NewFakeClock(time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC))
	c := NewClusterWith(t, 3, Setup{Clock: clock.Now, Config: []ClusterOption{func(cfg *config.Server) {
		cfg.Scheduler.ProfileScale, cfg.Scheduler.RandomTopK = 0, 1
	}}})
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	registerNode(t, cl, "node-c", 16000, 8192, 0, 8, nil)
	clock.Advance(90 * time.Second)
	registerNode(t, cl, "node-a", 4000, 8192, 0, 8, map[string]string{"disk": "ssd"})
	if _, err := cl.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{ID: "node-b", Capabilities: map[string][]string{"exec": {"1"}},
		Resources: api.Resources{CPUMillis: 8000, MemoryMB: 8192}, Slots: 8, Weight: 150}}); err != nil {
		t.Fatal(err)
	}
	// node-a runs two attempts: two placed tasks pinned to it.
	for i := 0; i < 2; i++ {
		s := echoSpec(fmt.Sprintf("busy-%d", i))
		s.PreferredLabels = map[string]string{"disk": "ssd"}
		s.Resources = api.Resources{CPUMillis: 100}
		sub, _, err := cl.SubmitTask(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if task := waitTaskState(t, cl, sub.ID, "SCHEDULED"); task.Attempts[0].NodeID != "node-a" {
			t.Fatalf("busy task went to %s", task.Attempts[0].NodeID)
		}
	}
	whatIf := func(cores int64, ttl int64) api.Explanation {
		req := api.ExplainRequest{TaskSpec: api.TaskSpec{PreferredLabels: map[string]string{"disk": "ssd"}, Resources: api.Resources{CPUMillis: cores * 1000}}}
		req.HeartbeatTTLSeconds = &ttl
		ex, err := cl.Explain(ctx, req, api.ReadOptions{Consistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}
	ex := whatIf(2, 60)
	if ex.Summary != "2/3 nodes eligible: 1 heartbeat expired" || ex.Nodes[0].NodeID != "node-a" || *ex.Nodes[0].Score != 1_080_000 ||
		ex.Nodes[1].NodeID != "node-b" || *ex.Nodes[1].Score != 150_000 {
		t.Fatalf("reference case: %+v", ex)
	}
	if ex = whatIf(32, 60); ex.Eligible != 0 || !strings.HasPrefix(ex.Summary, "0/3 nodes eligible: 3 CPU below minimum") {
		t.Fatalf("32-core case: %+v", ex)
	}
	if ex = whatIf(2, 120); ex.Eligible != 3 || ex.Nodes[0].NodeID != "node-a" {
		t.Fatalf("120s TTL case: %+v", ex)
	}
}

// Many concurrent submits against a few small nodes while the leader is
// killed mid-stream and an in-process "agent" completes attempts: no
// node is ever over capacity on any replica at any index, no task has two
// live attempts, and the replicas agree.
func TestConcurrentPlacementWithLeaderLoss(t *testing.T) {
	// No agent heartbeats here: keep the registered nodes fresh for the
	// whole test however slow the machine is.
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true, Config: []ClusterOption{func(cfg *config.Server) {
		cfg.Scheduler.HeartbeatTTL = time.Hour
	}}})
	cl := c.AllClient()
	for i := 0; i < 3; i++ {
		registerNode(t, cl, fmt.Sprintf("small-%d", i), 1000, 1024, 1, 2, nil)
	}
	// Longer than every wait below put together (the submits, the
	// restart, two minutes for the tasks to succeed): under -race on a
	// busy machine this test has taken over 90 s, and an expired context
	// failed every later read while the cluster was fine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The completer ends reserved attempts through whichever replica
	// leads, as agents will.
	stopCompleter := make(chan struct{})
	var completed sync.WaitGroup
	completed.Add(1)
	go func() {
		defer completed.Done()
		for {
			select {
			case <-stopCompleter:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for i := range c.Replicas {
				srv := c.Server(i)
				if srv == nil || !srv.IsLeader() {
					continue
				}
				tasks, _ := srv.FSM().State().Tasks(fsm.TaskFilter{State: fsm.TaskScheduled, Limit: 50})
				for _, task := range tasks {
					a, err := srv.FSM().State().Attempt(task.CurrentAttempt())
					if err != nil {
						continue
					}
					b, _ := fsm.Encode(fsm.MsgAttemptEnd, fsm.AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: fsm.AttemptSucceeded, Now: time.Now().UTC()})
					_, _, _ = srv.ApplyCommand(ctx, b)
				}
			}
		}
	}()

	const clients, perClient = 6, 25
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked []api.SubmitResponse
	)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				s := echoSpec(fmt.Sprintf("load-%d-%d", w, i))
				s.Resources = api.Resources{CPUMillis: 300, MemoryMB: 100, GPU: int64(i % 2)}
				res, _, err := cl.SubmitTask(ctx, s)
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, res)
				mu.Unlock()
			}
		}()
	}
	// Kill the leader once some work is in.
	Eventually(30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > clients*perClient/3 })
	old := c.WaitForLeader()
	c.Stop(old)
	wg.Wait()
	c.Start(old)

	// Everything acknowledged eventually succeeds.
	deadline := time.Now().Add(2 * time.Minute)
	for _, a := range acked {
		var last api.Task
		for {
			task, _, err := cl.GetTask(ctx, a.ID, api.ReadOptions{Consistent: true})
			if err == nil && task.State == "SUCCEEDED" {
				break
			}
			last = task
			if time.Now().After(deadline) {
				t.Fatalf("task %s stuck in %s (last read error: %v): %+v\n%s", a.ID, last.State, err, last.Timeline, stuckReport(c, a.ID))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	close(stopCompleter)
	completed.Wait()
	if len(acked) != clients*perClient {
		t.Fatalf("only %d of %d submits acknowledged", len(acked), clients*perClient)
	}
	// Replicas agree: same state hash at the same applied index.
	leader := c.WaitForLeader()
	idx := c.Replicas[leader].Server.FSM().Index()
	c.WaitApplied(idx)
	var hashes []string
	for _, r := range c.Replicas {
		if !Eventually(10*time.Second, func() bool { return r.Server.FSM().Index() == c.Replicas[leader].Server.FSM().Index() }) {
			t.Fatalf("%s did not converge", r.Cfg.ID)
		}
	}
	for _, r := range c.Replicas {
		st := r.Server.FSM().State()
		if err := st.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", r.Cfg.ID, err)
		}
		h, err := st.Hash()
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("replicas disagree: %v", hashes)
	}
	stats := c.Replicas[leader].Server.SchedulerStats()
	t.Logf("new leader: %d passes, %d placements in %d entries, rejections %v", stats.Passes.Load(), stats.Placements.Load(), stats.Entries.Load(), stats.Rejections())
}

// With every slot taken, a pass has only explanations left to do; the
// waiting tasks are looked over for them at most once per explain scan
// interval (a second at most), not on every pass (each finished attempt
// and each submit starts one). New arrivals are explained at the next
// look, and none is left unexplained.
func TestFullClusterPassesDoNotRescanTheBacklog(t *testing.T) {
	clock := NewFakeClock(time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC))
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true, Clock: clock.Now})
	cl := c.AllClient()
	ctx := Ctx(t, 2*time.Minute)
	registerNode(t, cl, "only", 4000, 4096, 0, 1, nil) // one slot, no agent behind it
	first := submit(t, cl, echoSpec("first"))
	waitTaskState(t, cl, first, "SCHEDULED") // the slot stays taken: the clock does not move

	explainedAll := func(ids []string) bool {
		for _, id := range ids {
			task, _, err := cl.GetTask(ctx, id, api.ReadOptions{Consistent: true})
			if err != nil || task.State != "PENDING" || !slices.ContainsFunc(task.Timeline, func(e api.TimelineEvent) bool { return e.Kind == "waiting" }) {
				return false
			}
		}
		return true
	}
	var specs []api.TaskSpec
	for i := range 100 {
		specs = append(specs, echoSpec(fmt.Sprint("backlog-", i)))
	}
	res, err := cl.SubmitTasks(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	var backlog []string
	for _, r := range res.Tasks {
		backlog = append(backlog, r.ID)
	}
	// More than one pass explains at most 64: the look goes on until all
	// are explained, then rests.
	if !Eventually(30*time.Second, func() bool { return explainedAll(backlog) }) {
		t.Fatal("every waiting task of the backlog should be explained")
	}

	leader := c.Server(c.WaitForLeader()).SchedulerStats()
	passes, scanned := leader.Passes.Load(), leader.Scanned.Load()
	var late []string
	for i := range 20 {
		late = append(late, submit(t, cl, echoSpec(fmt.Sprint("late-", i))))
	}
	if !Eventually(30*time.Second, func() bool { return leader.QueueDepth.Load() == 120 }) {
		t.Fatalf("a pass should see the late submits queued: depth %d", leader.QueueDepth.Load())
	}
	// The clock has not moved, so none of the passes since looked past
	// the head of the queue: before, each walked all waiting tasks.
	dp, ds := leader.Passes.Load()-passes, leader.Scanned.Load()-scanned
	if dp == 0 || ds > dp {
		t.Fatalf("%d passes with every slot taken looked at %d waiting tasks, want at most one each", dp, ds)
	}
	if explainedAll(late[:1]) {
		t.Fatal("a task that arrived within the interval is explained at the next look, not before")
	}
	clock.Advance(2 * time.Second)
	if !Eventually(30*time.Second, func() bool { return explainedAll(late) }) {
		t.Fatal("the late arrivals should be explained once the interval passed")
	}
}
