package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/spec"
)

// runIntervals reads the log the split-brain task writes (one line per
// tick: attempt id and the time in nanoseconds) into each attempt's first
// and last tick.
// awaitRunsApart waits (within) until the task's second attempt runs on
// node and has ticked for a fifth of a second, and fails the test unless
// the first attempt's last tick came before the second's first: the two
// runs never overlapped. task reads the task (false: not now). It returns
// the second attempt.
func awaitRunsApart(t *testing.T, within time.Duration, task func() (api.Task, bool), file string, first api.Attempt, node string) api.Attempt {
	t.Helper()
	var second api.Attempt
	if !Eventually(within, func() bool {
		tk, ok := task()
		if !ok || len(tk.Attempts) < 2 || tk.Attempts[1].State != api.AttemptRunning {
			return false
		}
		second = tk.Attempts[1]
		run, ran := runIntervals(t, file)[second.ID]
		return ran && run[1]-run[0] >= int64(200*time.Millisecond)
	}) {
		t.Fatalf("the task never ran again on %s for a fifth of a second", node)
	}
	if second.NodeID != node {
		t.Fatalf("the second attempt is on %s, want %s", second.NodeID, node)
	}
	runs := runIntervals(t, file)
	a, b := runs[first.ID], runs[second.ID]
	if a[1] >= b[0] {
		t.Fatalf("the runs overlap: the first ran on for %v after the second started", time.Duration(a[1]-b[0]))
	}
	t.Logf("the first run stopped %v before the second started", time.Duration(b[0]-a[1]).Round(time.Millisecond))
	return second
}

func runIntervals(t *testing.T, path string) map[string][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // no tick yet
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, ts, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			continue // a line cut short when its writer was killed
		}
		iv, seen := out[id]
		if !seen {
			iv = [2]int64{n, n}
		}
		iv[0], iv[1] = min(iv[0], n), max(iv[1], n)
		out[id] = iv
	}
	return out
}

// tickerSpec is a task that appends its attempt id and the time to a
// file shared by every node, every 20 ms, until it is stopped.
func tickerSpec(name, file string) api.TaskSpec {
	s := shSpec(name, fmt.Sprintf(`while :; do echo "$HERD_ATTEMPT_ID $(date +%%s%%N)" >> %s; sleep 0.02; done`, file))
	s.TimeoutSeconds = ptrTo(int64(300))
	return s
}

// An agent cut off from every server (gossip and HTTP, both ways) while
// it runs a long task stops the task itself before the leader re-places
// it: the two runs of the task, one per node, never overlap, although the
// cut-off agent stays alive all along.
func TestCutOffAgentStopsItsAttemptBeforeItRunsElsewhere(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	cutOff, ft := faultyAgent(c, agent.Config{ID: "cut-off", Slots: 1, Labels: map[string]string{"first": "yes"}}, 3)
	WaitRegistered(t, cutOff)
	cl := c.AllClient()
	time.Sleep(c.Replicas[0].Cfg.Liveness.LeaderGrace) // verdicts are not held back
	file := filepath.Join(t.TempDir(), "ticks")
	ts := tickerSpec("twice", file)
	ts.PreferredLabels = map[string]string{"first": "yes"}
	id := submit(t, cl, ts)
	first := waitTaskState(t, cl, id, api.TaskRunning).Attempts[0]
	if first.NodeID != "cut-off" {
		t.Fatalf("the task started on %s", first.NodeID)
	}
	other := c.StartAgent(agent.Config{ID: "other", Slots: 1})
	WaitRegistered(t, other)
	if !Eventually(10*time.Second, func() bool { _, ticked := runIntervals(t, file)[first.ID]; return ticked }) {
		t.Fatal("the first run never ticked")
	}

	ft.Cut(true)
	cutOff.Transport.Cut()
	awaitRunsApart(t, 60*time.Second, func() (api.Task, bool) {
		task, _, err := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
		return task, err == nil
	}, file, first, "other")
	if cutOff.Agent.Fences() == 0 {
		t.Fatal("the cut-off agent did not stop the attempt itself")
	}
	// Back in touch, the agent says why the first run ended.
	ft.Cut(false)
	cutOff.Transport.Heal()
	if !Eventually(30*time.Second, func() bool {
		task, _, err := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
		return err == nil && timelineSays(task, "as its agent reports: stopped on cut-off: no contact with the cluster")
	}) {
		task, _, _ := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
		t.Fatalf("the timeline does not say the agent stopped the first run: %+v", task.Timeline)
	}
	// And the node's events.
	if !Eventually(30*time.Second, func() bool {
		return slices.ContainsFunc(node(t, cl, "cut-off").Events, func(e api.TimelineEvent) bool {
			return e.Kind == "agent" && strings.Contains(e.Message, first.ID) && strings.Contains(e.Message, "no contact with the cluster")
		})
	}) {
		t.Fatalf("the node's events do not say the agent stopped the attempt: %+v", node(t, cl, "cut-off").Events)
	}
}

// A cut healed well within the lease stops nothing and re-places
// nothing.
func TestShortCutStopsNothing(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup(func(c *config.Server) { c.Liveness.DownAfter = 10 }))
	blip, ft := faultyAgent(c, agent.Config{ID: "blip", Slots: 1}, 4)
	WaitRegistered(t, blip)
	cl := c.AllClient()
	file := filepath.Join(t.TempDir(), "ticks")
	id := submit(t, cl, tickerSpec("once", file))
	running := waitTaskState(t, cl, id, api.TaskRunning).Attempts[0]
	lv := c.Replicas[0].Cfg.Liveness
	ft.Cut(true)
	blip.Transport.Cut()
	time.Sleep(lv.Lease(lv.HeartbeatInterval) / 3)
	ft.Cut(false)
	blip.Transport.Heal()
	// Well past the cut: the attempt runs on, nothing else started.
	time.Sleep(2 * lv.Lease(lv.HeartbeatInterval))
	task, _, err := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
	if err != nil || len(task.Attempts) != 1 || task.Attempts[0].State != api.AttemptRunning {
		t.Fatalf("after a short cut: %+v (%v)", task.Attempts, err)
	}
	if blip.Agent.Fences() != 0 {
		t.Fatalf("the agent stopped %d attempts over a short cut", blip.Agent.Fences())
	}
	before := runIntervals(t, file)[running.ID][1]
	if !Eventually(5*time.Second, func() bool { return runIntervals(t, file)[running.ID][1] > before }) {
		t.Fatal("the attempt does not tick any more")
	}
}

func timelineSays(task api.Task, s string) bool {
	return slices.ContainsFunc(task.Timeline, func(e api.TimelineEvent) bool { return strings.Contains(e.Message, s) })
}

// A task checks its lease through its agent with `herd lease check`: it
// is current while it runs; once its node is declared DOWN (the agent
// still alive and in touch) it is told it is not.
func TestLeaseCheckSaysWhenTheAttemptIsNoLongerCurrent(t *testing.T) {
	bin := buildHerd(t)
	setup := gossipSetup(func(c *config.Server) { c.Liveness.LeaderGrace = time.Hour })
	c := NewClusterWith(t, 3, setup)
	ag := c.StartAgent(agent.Config{ID: "checker", Slots: 1})
	WaitRegistered(t, ag)
	cl := c.AllClient()
	envFile := filepath.Join(t.TempDir(), "env")
	s := shSpec("checks", fmt.Sprintf(`env | grep -E '^HERD_(ATTEMPT_ID|LEASE|AGENT_ADDR)=' > %s.tmp && mv %s.tmp %s; sleep 300`, envFile, envFile, envFile))
	id := submit(t, cl, s)
	waitTaskState(t, cl, id, api.TaskRunning)
	var taskEnv []string
	if !Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(envFile)
		taskEnv = strings.Fields(string(b))
		return err == nil && len(taskEnv) == 3
	}) {
		t.Fatalf("the task's environment: %q", taskEnv)
	}
	check := func() (int, string) {
		cmd := exec.Command(bin, "lease", "check")
		cmd.Env = append(os.Environ(), taskEnv...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := check(); code != 0 || !strings.Contains(out, "current") {
		t.Fatalf("while the attempt runs: exit %d, %s", code, out)
	}
	leader := c.Replicas[c.WaitForLeader()].Server
	if _, err := leader.DeclareNodeDown(Ctx(t, 10*time.Second), "checker", "test: declared down"); err != nil {
		t.Fatal(err)
	}
	if code, out := check(); code != 1 || !strings.Contains(out, "not current") {
		t.Fatalf("after the node was declared DOWN: exit %d, %s", code, out)
	}
}

// A task that opts out (on_disconnect keep_running) runs on when its
// agent is cut off, is re-placed as soon as its node is DOWN, and the
// timeline says the two may overlap. An unknown value is refused.
func TestKeepRunningTaskIsNotStopped(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	cutOff, ft := faultyAgent(c, agent.Config{ID: "cut-off", Slots: 1, Labels: map[string]string{"first": "yes"}}, 3)
	WaitRegistered(t, cutOff)
	cl := c.AllClient()
	bad := tickerSpec("bad", filepath.Join(t.TempDir(), "x"))
	bad.OnDisconnect = "sometimes"
	if _, _, err := cl.SubmitTask(Ctx(t, 10*time.Second), bad); !isClientError(err) || !strings.Contains(err.Error(), "on_disconnect") {
		t.Fatalf("an unknown on_disconnect: %v", err)
	}
	time.Sleep(c.Replicas[0].Cfg.Liveness.LeaderGrace)
	file := filepath.Join(t.TempDir(), "ticks")
	ts := tickerSpec("twice", file)
	ts.PreferredLabels = map[string]string{"first": "yes"}
	ts.OnDisconnect = spec.OnDisconnectKeepRunning
	id := submit(t, cl, ts)
	first := waitTaskState(t, cl, id, api.TaskRunning).Attempts[0]
	other := c.StartAgent(agent.Config{ID: "other", Slots: 1})
	WaitRegistered(t, other)
	ft.Cut(true)
	cutOff.Transport.Cut()
	var task api.Task
	if !Eventually(60*time.Second, func() bool {
		var err error
		task, _, err = cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
		if err != nil || len(task.Attempts) < 2 || task.Attempts[1].State != api.AttemptRunning {
			return false
		}
		_, ran := runIntervals(t, file)[task.Attempts[1].ID]
		return ran
	}) {
		t.Fatal("the task never ran again on the other node")
	}
	if !timelineSays(task, "may still be running there") {
		t.Fatalf("the timeline does not explain the overlap: %+v", task.Timeline)
	}
	// The first run ticks on beside the second.
	before := runIntervals(t, file)[first.ID][1]
	if !Eventually(5*time.Second, func() bool { return runIntervals(t, file)[first.ID][1] > before }) {
		t.Fatal("the cut-off agent stopped the keep_running attempt")
	}
	if cutOff.Agent.Fences() != 0 {
		t.Fatalf("the cut-off agent stopped %d attempts", cutOff.Agent.Fences())
	}
}
