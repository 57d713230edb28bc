package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
)

// Data gravity: a task reading a large dataset goes to the slower node
// that holds it (and reads it there, at the path its agent gives), while
// with the dataset on no node the faster node wins. Every replica then
// explains the task alike: the same summary, and for each node the same
// tier and score.
func TestLocalityPullsTaskToItsData(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	video := filepath.Join(t.TempDir(), "video.raw")
	slow := c.StartAgent(agent.Config{ID: "slow", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 4096}, Slots: 2,
		Datasets: map[string]string{"video": video}, DatasetRefresh: 100 * time.Millisecond})
	fast := c.StartAgent(agent.Config{ID: "fast", Resources: api.Resources{CPUMillis: 8000, MemoryMB: 4096}, Slots: 2})
	WaitRegistered(t, slow, fast)
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	reads := func(name string) api.TaskSpec {
		s := shSpec(name, `test -e "$HERD_INPUT_VIDEO"`)
		s.Inputs = []string{"video"}
		s.MaxAttempts = ptrTo(1)
		return s
	}
	// No node holds the video yet: the faster node wins (and the task,
	// finding no input there, fails: its input is nowhere).
	first := waitTaskState(t, cl, submit(t, cl, reads("nowhere")), "FAILED", "SUCCEEDED")
	if got := first.Attempts[0].NodeID; got != "fast" {
		t.Fatalf("with the input on no node the task went to %s, not the faster node", got)
	}
	// 3.2 GB on the slow node (a sparse file: its size is what counts).
	f, err := os.Create(video)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3_200_000_000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !Eventually(20*time.Second, func() bool {
		n, _, err := cl.GetNode(ctx, "slow", api.ReadOptions{})
		return err == nil && len(n.Datasets) == 1 && n.Datasets[0].Bytes == 3_200_000_000
	}) {
		t.Fatal("the slow node never advertised its dataset")
	}
	id := submit(t, cl, reads("near-data"))
	task := waitTaskState(t, cl, id, "SUCCEEDED", "FAILED")
	if task.State != "SUCCEEDED" || task.Attempts[0].NodeID != "slow" {
		t.Fatalf("the task reading the video should run where it is: %s on %s", task.State, task.Attempts[0].NodeID)
	}
	ex, err := cl.ExplainTask(ctx, id, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Nodes[0].NodeID != "slow" || ex.Nodes[0].Parts == nil || ex.Nodes[0].Parts.Inputs != "holds 3.2 of 3.2 GB of inputs" {
		t.Fatalf("explain: %+v", ex.Nodes[0])
	}
	// Every replica explains it the same way.
	index := c.Server(c.WaitForLeader()).FSM().Index()
	c.WaitApplied(index)
	var want string
	for i := range c.Replicas {
		ex, err := c.Client(i).ExplainTask(ctx, id, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := ex.Summary
		for _, n := range ex.Nodes {
			got += fmt.Sprintf("; %s %s %v %d", n.NodeID, n.Tier, n.Eligible, deref(n.Score))
		}
		if i == 0 {
			want = got
		} else if got != want {
			t.Fatalf("replica %d explains %q, replica 0 %q", i, got, want)
		}
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// An agent measures its node (medians over rounds of samples, with their
// spread) and, once registered, its link to the servers. An operator's
// requests reach the agent through its assignments watch: a rebench
// commits a new measurement, a health check request an answer (the
// built-in check passes on a healthy box).
func TestRebenchAndHealthCheckOnRequest(t *testing.T) {
	setup := agentSetup()
	setup.Bench = true
	c := NewClusterWith(t, 3, setup)
	a := c.StartAgent(agent.Config{ID: "edge-1", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 4096}, Slots: 1})
	WaitRegistered(t, a)
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	var n api.Node
	var err error
	if !Eventually(20*time.Second, func() bool {
		n, _, err = cl.GetNode(ctx, "edge-1", api.ReadOptions{})
		return err == nil && n.Profile != nil && n.Profile.RTTMicros > 0
	}) {
		t.Fatalf("the link to the servers was never measured: %+v (%v)", n.Profile, err)
	}
	if p := n.Profile; p.Cores == 0 || p.MeasuredAt.IsZero() || !p.Benchmarked || p.Rounds < 1 || p.CPUScore <= 0 || p.NetworkMBps <= 0 {
		t.Fatalf("profile %+v", p)
	}
	first := n.Profile.MeasuredAt
	if _, err := cl.RequestRebench(ctx, "edge-1"); err != nil {
		t.Fatal(err)
	}
	if !Eventually(20*time.Second, func() bool {
		n, _, err = cl.GetNode(ctx, "edge-1", api.ReadOptions{})
		return err == nil && n.Profile != nil && n.Profile.MeasuredAt.After(first)
	}) {
		t.Fatalf("the rebench was never reported: %+v", n.Profile)
	}
	if _, err := cl.RequestHealthCheck(ctx, "edge-1"); err != nil {
		t.Fatal(err)
	}
	if !Eventually(20*time.Second, func() bool {
		n, _, err = cl.GetNode(ctx, "edge-1", api.ReadOptions{})
		hc := n.HealthCheck
		return err == nil && hc != nil && hc.Answered == hc.Requested && hc.Passed
	}) {
		t.Fatalf("the health check was never answered: %+v", n.HealthCheck)
	}
	if want := "built-in check"; !strings.Contains(n.HealthCheck.Output, want) {
		t.Fatalf("check output %q lacks %q", n.HealthCheck.Output, want)
	}
}

// A bad task is not a bad node: work that fails everywhere, fast, on
// real agents, exhausts its attempts and leaves every node unquarantined
// at its tier.
func TestBadTaskIsNotABadNode(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	var agents []*AgentHandle
	ids := []string{"edge-1", "edge-2", "edge-3"}
	for _, id := range ids {
		agents = append(agents, c.StartAgent(agent.Config{ID: id, Resources: api.Resources{CPUMillis: 2000, MemoryMB: 4096}, Slots: 2}))
	}
	WaitRegistered(t, agents...)
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	tiers := map[string]string{}
	for _, id := range ids {
		n, _, err := cl.GetNode(ctx, id, api.ReadOptions{Consistent: true})
		if err != nil {
			t.Fatal(err)
		}
		tiers[n.ID] = n.Tier.Tier
	}
	var tasks []string
	for i := 0; i < 4; i++ {
		s := shSpec(fmt.Sprintf("bad-%d", i), "echo bad input >&2; exit 3")
		s.Class = "parse"
		s.MaxAttempts = ptrTo(3)
		tasks = append(tasks, submit(t, cl, s))
	}
	for _, id := range tasks {
		if task := waitTaskState(t, cl, id, "FAILED", "SUCCEEDED"); task.State != "FAILED" || len(task.Attempts) != 3 {
			t.Fatalf("task %s: %s after %d attempts", id, task.State, len(task.Attempts))
		}
	}
	for _, id := range ids {
		n, _, err := cl.GetNode(ctx, id, api.ReadOptions{Consistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if n.Quarantine != nil || n.Tier.Tier != tiers[n.ID] || n.Tier.Demotions != 0 {
			t.Fatalf("node %s punished for bad work: quarantine %+v, tier %+v", n.ID, n.Quarantine, n.Tier)
		}
	}
}
