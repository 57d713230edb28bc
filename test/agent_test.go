package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
)

// fastRetries shortens the retry backoff and the reclaim timeout.
func fastRetries(c *config.Server) {
	c.Scheduler.RetryBase = 50 * time.Millisecond
	c.Scheduler.RetryCap = 500 * time.Millisecond
	c.Scheduler.ScheduleToStartTimeout = 10 * time.Second
}

func agentSetup() Setup {
	return Setup{CheckInvariants: true, Config: []ClusterOption{fastRetries}}
}

func shSpec(name, script string) api.TaskSpec {
	return api.TaskSpec{Name: name, IdempotencyKey: name, Command: []string{"sh", "-c", script}}
}

// waitAgentStarted waits until h's agent has started n attempts (their
// processes run, or are about to). A test that cuts the agent off before
// that may find the attempt never ran: an agent without a lease starts
// nothing, and one whose start cannot be committed in time stops it.
func waitAgentStarted(t *testing.T, h *AgentHandle, n uint64) {
	t.Helper()
	if !Eventually(10*time.Second, func() bool { started, _, _ := h.Agent.Stats(); return started >= n }) {
		t.Fatalf("the agent never started %d attempts", n)
	}
}

func ptrTo[T any](v T) *T { return &v }

func submit(t *testing.T, cl *api.Client, s api.TaskSpec) string {
	t.Helper()
	res, _, err := cl.SubmitTask(Ctx(t, 30*time.Second), s)
	if err != nil {
		t.Fatalf("submit %s: %v", s.Name, err)
	}
	return res.ID
}

// Test 1: two agents registered through different replicas run 50 tasks,
// all SUCCEEDED, spread over both, never over capacity.
func TestAgentsRunTasksToSuccess(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 3}, 0, 1, 2)
	b := c.StartAgent(agent.Config{ID: "edge-2", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 3}, 2, 1, 0)
	WaitRegistered(t, a, b)
	cl := c.AllClient()
	var ids []string
	for i := 0; i < 50; i++ {
		s := shSpec(fmt.Sprintf("ok-%d", i), "echo task $HERD_TASK_ID attempt $HERD_ATTEMPT_NUMBER on $HERD_NODE_ID; sleep 0.05")
		s.Resources = api.Resources{CPUMillis: 1000, MemoryMB: 64}
		ids = append(ids, submit(t, cl, s))
	}
	perNode := map[string]int{}
	for _, id := range ids {
		task := waitTaskState(t, cl, id, "SUCCEEDED")
		at := task.Attempts[len(task.Attempts)-1]
		perNode[at.NodeID]++
		if !strings.Contains(at.OutputTail, "task "+id+" attempt 1 on "+at.NodeID) || at.ExitCode != 0 {
			t.Fatalf("output tail / exit code of %s: %q %d", id, at.OutputTail, at.ExitCode)
		}
	}
	if perNode["edge-1"] == 0 || perNode["edge-2"] == 0 {
		t.Fatalf("work should spread over both agents: %v", perNode)
	}
	for _, h := range []*AgentHandle{a, b} {
		// A result is committed before its agent reads the answer, so the
		// agent's count can trail the task states by a moment.
		var started, completed, rejected uint64
		Eventually(10*time.Second, func() bool {
			started, completed, rejected = h.Agent.Stats()
			return started > 0 && completed >= started
		})
		if started == 0 || completed != started || rejected != 0 {
			t.Fatalf("%s: started %d, completed %d, rejected %d", h.Agent.Config().ID, started, completed, rejected)
		}
	}
	t.Logf("spread: %v", perNode)
}

// Test 2: a task that exits 1 is retried on the other node, and ends
// FAILED after max_attempts with one attempt per try in its timeline.
func TestFailingTaskRetriesElsewhereThenFails(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	WaitRegistered(t,
		c.StartAgent(agent.Config{ID: "edge-1", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 2}),
		c.StartAgent(agent.Config{ID: "edge-2", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 2}))
	cl := c.AllClient()
	s := shSpec("fails", "echo boom >&2; exit 1")
	s.MaxAttempts = ptrTo(3)
	task := waitTaskState(t, cl, submit(t, cl, s), "FAILED")
	if len(task.Attempts) != 3 {
		t.Fatalf("want 3 attempts, got %+v", task.Attempts)
	}
	for i, a := range task.Attempts {
		if a.Number != i+1 || a.State != "FAILED" || a.ExitCode != 1 || !strings.Contains(a.OutputTail, "boom") {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
	}
	if task.Attempts[0].NodeID == task.Attempts[1].NodeID {
		t.Fatalf("the retry should go to the other node: %s then %s", task.Attempts[0].NodeID, task.Attempts[1].NodeID)
	}
	var selected, finished int
	for _, e := range task.Timeline {
		switch e.Kind {
		case "node_selected":
			selected++
		case "finished":
			finished++
		}
	}
	if selected != 3 || finished != 3 || task.Timeline[len(task.Timeline)-1].Kind != "failed" {
		t.Fatalf("timeline should show each attempt: %+v", task.Timeline)
	}
}

// Test 3: a task that outlives its timeout ends TIMED_OUT, and its whole
// process group is gone.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	cl := c.AllClient()
	marker := fmt.Sprintf("%d.25", 40+time.Now().Nanosecond()%50)
	s := shSpec("slow", fmt.Sprintf("sleep %s & sleep %s; wait", marker, marker))
	s.TimeoutSeconds = ptrTo(int64(1))
	s.MaxAttempts = ptrTo(1)
	id := submit(t, cl, s)
	// The shell and its two sleeps carry the marker.
	if !Eventually(20*time.Second, func() bool { return len(ProcessesWith("sleep "+marker)) >= 3 }) {
		t.Fatal("the task's two processes never ran")
	}
	task := waitTaskState(t, cl, id, "TIMED_OUT")
	if task.Attempts[0].State != "TIMED_OUT" {
		t.Fatalf("attempt: %+v", task.Attempts[0])
	}
	if !Eventually(10*time.Second, func() bool { return len(ProcessesWith("sleep "+marker)) == 0 }) {
		t.Fatalf("orphans left behind: %v", ProcessesWith("sleep "+marker))
	}
}

// Test 4: the zombie. An attempt's node is declared down while the attempt
// still runs (its agent cut off); the task succeeds elsewhere; the
// zombie's later completion gets 409 and changes nothing.
//
// The leader re-places a DOWN node's attempts only once the lease it gave
// the agent has run out: leases of 2 s here (1 s intervals, DOWN after 2),
// with the leader's own verdicts held back so that the test declares the
// node down itself.
func TestZombieResultIsRejected(t *testing.T) {
	setup := agentSetup()
	setup.Config = append(setup.Config, func(c *config.Server) {
		c.Liveness.HeartbeatInterval, c.Liveness.MaxHeartbeatInterval = time.Second, time.Second
		c.Liveness.SuspectAfter, c.Liveness.DownAfter, c.Liveness.LeaderGrace = 1, 2, time.Hour
	})
	c := NewClusterWith(t, 3, setup)
	zombie := c.StartAgent(agent.Config{ID: "edge-z", Labels: map[string]string{"first": "yes"}, Slots: 2})
	// Both registered first, or the task may go to edge-ok alone.
	WaitRegistered(t, zombie, c.StartAgent(agent.Config{ID: "edge-ok", Slots: 2}))
	cl := c.AllClient()
	// The zombie's process must end while it is cut off (were it still
	// running at the heal, the agent would stop it, taken back, and report
	// nothing): it sleeps 1 s there, 3 s on the node that replaces it.
	s := shSpec("zombie", `if [ "$HERD_NODE_ID" = edge-z ]; then sleep 1; else sleep 3; fi; echo finished on $HERD_NODE_ID`)
	s.PreferredLabels = map[string]string{"first": "yes"}
	id := submit(t, cl, s)
	task := waitTaskState(t, cl, id, "RUNNING")
	first := task.Attempts[0]
	if first.NodeID != "edge-z" {
		t.Fatalf("first attempt should run on edge-z, got %s", first.NodeID)
	}
	waitAgentStarted(t, zombie, 1)
	zombie.Transport.Cut()
	leader := c.Replicas[c.WaitForLeader()].Server
	if _, err := leader.DeclareNodeDown(Ctx(t, 10*time.Second), "edge-z", "test: partitioned"); err != nil {
		t.Fatal(err)
	}
	task = waitTaskState(t, cl, id, "SUCCEEDED")
	if len(task.Attempts) != 2 || task.Attempts[0].State != "LOST" || task.Attempts[1].NodeID != "edge-ok" {
		t.Fatalf("want attempt 1 LOST and attempt 2 done on edge-ok: %+v", task.Attempts)
	}
	// The zombie finishes meanwhile and delivers its result once healed.
	zombie.Transport.Heal()
	if !Eventually(30*time.Second, func() bool { _, _, rejected := zombie.Agent.Stats(); return rejected >= 1 }) {
		t.Fatal("the zombie's result was never refused")
	}
	// The same by hand: 409 with the stale-result code.
	_, err := cl.CompleteAttempt(Ctx(t, 10*time.Second), first.ID, api.AttemptCompleteRequest{LeaseVersion: first.LeaseVersion, ExitCode: 0})
	var se *api.StatusError
	if !errors.As(err, &se) || se.Code != 409 || se.Reason != "stale_result" {
		t.Fatalf("zombie completion: want 409 stale_result, got %v", err)
	}
	after, _, err := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true})
	if err != nil || after.State != "SUCCEEDED" || after.Attempts[0].State != "LOST" || after.Attempts[1].State != "SUCCEEDED" {
		t.Fatalf("the zombie changed the task: %+v %v", after, err)
	}
	// The same in a batch, next to a repeat of the winning result: each
	// report is answered on its own.
	second := after.Attempts[1]
	results, err := cl.ReportAttempts(Ctx(t, 10*time.Second), []api.AttemptReportItem{
		{AttemptID: first.ID, Complete: &api.AttemptCompleteRequest{LeaseVersion: first.LeaseVersion}},
		{AttemptID: second.ID, Complete: &api.AttemptCompleteRequest{LeaseVersion: second.LeaseVersion}},
	})
	if err != nil {
		t.Fatalf("report batch: %v", err)
	}
	if results[0].Status != 409 || results[0].Code != "stale_result" || results[0].Report != nil {
		t.Fatalf("the zombie's result in a batch: want 409 stale_result, got %+v", results[0])
	}
	if results[1].Report == nil || !results[1].Report.Duplicate || results[1].Report.Attempt.State != "SUCCEEDED" {
		t.Fatalf("the repeated result in a batch: want an accepted duplicate, got %+v", results[1])
	}
	rejections := 0
	for _, e := range after.Timeline {
		if e.Kind == "stale_result_rejected" && strings.Contains(e.Message, fmt.Sprintf("attempt 1, lease %d", first.LeaseVersion)) {
			rejections++
		}
	}
	if rejections < 2 {
		t.Fatalf("both stale results should be in the timeline: %+v", after.Timeline)
	}
	// The zombie node comes back with a new session.
	if !Eventually(20*time.Second, func() bool {
		n, _, err := cl.GetNode(context.Background(), "edge-z", api.ReadOptions{Consistent: true})
		return err == nil && n.Liveness == "READY" && n.SessionGeneration >= 2
	}) {
		t.Fatal("edge-z did not re-register after being declared down")
	}
}

// Test 5: a memory-hungry task is stopped by its memory limit: with a
// cgroup where one can be made, and with rlimits (which work everywhere).
func TestMemoryLimit(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	cl := c.AllClient()
	// tail of 300 MB without a newline holds it all in memory: bounded even
	// if no limit applied, far over the 32 MB the task asks for.
	hog := "head -c 300000000 /dev/zero | tail >/dev/null && echo survived"
	for _, method := range []string{"auto", "rlimit"} {
		t.Run(method, func(t *testing.T) {
			h := c.StartAgent(agent.Config{ID: "mem-" + method, Limits: method, Labels: map[string]string{"method": method}, Slots: 1})
			if method == "auto" && !strings.HasPrefix(h.Agent.LimitMethod(), "cgroup") {
				t.Skipf("no writable cgroup with a memory controller here (agent uses %s)", h.Agent.LimitMethod())
			}
			s := shSpec("hog-"+method, hog)
			s.RequiredLabels = map[string]string{"method": method}
			s.Resources = api.Resources{MemoryMB: 32}
			s.MaxAttempts = ptrTo(1)
			s.TimeoutSeconds = ptrTo(int64(60))
			task := waitTaskState(t, cl, submit(t, cl, s), "FAILED", "SUCCEEDED")
			a := task.Attempts[0]
			if task.State != "FAILED" || strings.Contains(a.OutputTail, "survived") {
				t.Fatalf("the hog was not stopped by %s: %+v", h.Agent.LimitMethod(), a)
			}
			// The attempt says why it ended, as the timeline does.
			if strings.HasPrefix(h.Agent.LimitMethod(), "cgroup") && !strings.Contains(a.Error, "memory limit") {
				t.Fatalf("the attempt's error %q does not say the memory limit stopped it", a.Error)
			}
			if a.Error != "" && !slices.ContainsFunc(task.Timeline, func(e api.TimelineEvent) bool { return strings.HasSuffix(e.Message, ": "+a.Error) }) {
				t.Fatalf("the attempt's error %q is not the reason its timeline gives: %+v", a.Error, task.Timeline)
			}
			t.Logf("%s stopped the hog: exit %d, error %q, tail %q", h.Agent.LimitMethod(), a.ExitCode, a.Error, a.OutputTail)
		})
	}
}

// Test 6: cancel kills the running process; the task ends CANCELLED.
func TestCancelKillsRunningAttempt(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 1})
	cl := c.AllClient()
	marker := fmt.Sprintf("%d.75", 40+time.Now().Nanosecond()%50)
	id := submit(t, cl, shSpec("cancel-me", "exec sleep "+marker))
	waitTaskState(t, cl, id, "RUNNING")
	if !Eventually(10*time.Second, func() bool { return len(ProcessesWith("sleep "+marker)) >= 1 }) {
		t.Fatal("process never started")
	}
	task, err := cl.CancelTask(Ctx(t, 10*time.Second), id, "test cancel")
	if err != nil || task.State != "CANCELLED" || task.Attempts[0].State != "CANCELLED" || task.Attempts[0].Error != "test cancel" {
		t.Fatalf("cancel: %+v %v", task, err)
	}
	if !Eventually(10*time.Second, func() bool { return len(ProcessesWith("sleep "+marker)) == 0 }) {
		t.Fatal("the cancelled process still runs")
	}
	if !Eventually(10*time.Second, func() bool { return len(h.Agent.Running()) == 0 }) {
		t.Fatalf("agent still tracks %v", h.Agent.Running())
	}
	// Cancelling again is fine; the task stays CANCELLED.
	if task, err = cl.CancelTask(Ctx(t, 10*time.Second), id, ""); err != nil || task.State != "CANCELLED" {
		t.Fatalf("second cancel: %+v %v", task, err)
	}
}

// Test 7: the agent survives the loss of the replica it talks to and keeps
// working through another.
func TestAgentSurvivesLossOfItsReplica(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	h := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2}, 1, 2, 0)
	cl := c.AllClient()
	waitTaskState(t, cl, submit(t, cl, shSpec("before", "true")), "SUCCEEDED")
	c.Stop(1) // the replica the agent prefers
	c.WaitForLeader()
	for i := 0; i < 5; i++ {
		waitTaskState(t, cl, submit(t, cl, shSpec(fmt.Sprintf("after-%d", i), "true")), "SUCCEEDED")
	}
	// The cluster commits a result before the agent reads its answer, so
	// the agent's count can trail the task state by a moment.
	var completed uint64
	if !Eventually(10*time.Second, func() bool {
		_, completed, _ = h.Agent.Stats()
		return completed >= 6
	}) || completed != 6 {
		t.Fatalf("agent completed %d attempts, want 6", completed)
	}
}

// An attempt reserved on a node whose agent never starts it is reclaimed
// after the schedule-to-start timeout and the task is requeued.
func TestNeverStartedAttemptIsReclaimed(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true, Config: []ClusterOption{fastRetries, func(cfg *config.Server) {
		cfg.Scheduler.ScheduleToStartTimeout = time.Second
	}}})
	cl := c.AllClient()
	registerNode(t, cl, "silent", 4000, 4096, 0, 2, nil) // no agent behind it
	s := shSpec("never-started", "true")
	s.MaxAttempts = ptrTo(2)
	task := waitTaskState(t, cl, submit(t, cl, s), "FAILED")
	if len(task.Attempts) != 2 {
		t.Fatalf("want 2 attempts, both reclaimed: %+v", task.Attempts)
	}
	for _, a := range task.Attempts {
		if a.State != "LOST" {
			t.Fatalf("attempt %d: %+v", a.Number, a)
		}
	}
	found := false
	for _, e := range task.Timeline {
		if strings.Contains(e.Message, "not started within 1s") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the timeline should say why: %+v", task.Timeline)
	}
}

// An agent that restarts while one of its attempts runs reports the lost
// process, and the task is retried instead of waiting for a timeout.
func TestAgentRestartReportsLostAttempt(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	dir := t.TempDir()
	h := c.StartAgent(agent.Config{ID: "edge-1", DataDir: dir, Slots: 1})
	cl := c.AllClient()
	marker := fmt.Sprintf("%d.5", 40+time.Now().Nanosecond()%50)
	id := submit(t, cl, shSpec("long", "exec sleep "+marker))
	waitTaskState(t, cl, id, "RUNNING")
	h.Stop()
	if len(ProcessesWith("sleep "+marker)) != 0 {
		t.Fatal("a stopping agent must not leave its attempts running")
	}
	c.StartAgent(agent.Config{ID: "edge-1", DataDir: dir, Slots: 1})
	task := waitTaskState(t, cl, id, "RUNNING", "PENDING", "SCHEDULED")
	if !Eventually(30*time.Second, func() bool {
		task, _, _ = cl.GetTask(context.Background(), id, api.ReadOptions{Consistent: true})
		return len(task.Attempts) >= 2 && task.Attempts[0].State == "LOST"
	}) {
		t.Fatalf("the restarted agent should report attempt 1 lost: %+v", task.Attempts)
	}
	if _, err := cl.CancelTask(Ctx(t, 10*time.Second), id, "done"); err != nil {
		t.Fatal(err)
	}
}

// Finished tasks are forgotten after the retention, and then the jobs
// they made; pending ones are kept.
func TestFinishedTasksAreForgottenAfterRetention(t *testing.T) {
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true, Config: []ClusterOption{fastRetries, func(cfg *config.Server) {
		cfg.Scheduler.TaskRetention = time.Second
	}}})
	c.StartAgent(agent.Config{ID: "edge-1", Slots: 2})
	cl := c.AllClient()
	done := submit(t, cl, shSpec("short-lived", "true"))
	waitTaskState(t, cl, done, "SUCCEEDED")
	s := shSpec("stuck", "true")
	s.RequiredLabels = map[string]string{"nowhere": "yes"}
	stuck := submit(t, cl, s)
	if !Eventually(30*time.Second, func() bool {
		_, _, err := cl.GetTask(context.Background(), done, api.ReadOptions{Consistent: true})
		return errors.Is(err, api.ErrNotFound)
	}) {
		t.Fatal("the finished task was never forgotten")
	}
	if n, _, err := cl.GetNode(context.Background(), "edge-1", api.ReadOptions{Consistent: true}); err != nil || len(n.Attempts) != 0 {
		t.Fatalf("the node should not list forgotten attempts: %+v %v", n.Attempts, err)
	}
	if task, _, err := cl.GetTask(context.Background(), stuck, api.ReadOptions{Consistent: true}); err != nil || task.State != "PENDING" {
		t.Fatalf("a pending task must be kept: %+v %v", task, err)
	}
	job, err := cl.SubmitJob(Ctx(t, 30*time.Second), api.JobSpec{Name: "once", IdempotencyKey: "once", Stages: []api.StageSpec{{Name: "a", Task: stageTask("true")}}})
	if err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, cl, job.ID); j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	if !Eventually(30*time.Second, func() bool {
		_, _, err := cl.GetJob(context.Background(), job.ID, api.ReadOptions{Consistent: true})
		return errors.Is(err, api.ErrNotFound)
	}) {
		t.Fatal("the finished job was never forgotten")
	}
	if again, err := cl.SubmitJob(Ctx(t, 30*time.Second), api.JobSpec{Name: "once", IdempotencyKey: "once", Stages: []api.StageSpec{{Name: "a", Task: stageTask("true")}}}); err != nil || again.ID == job.ID {
		t.Fatalf("the forgotten job's key answered with %+v (%v)", again, err)
	}
}

// An attempt that ends before its agent reports the start (the agent
// runs it as soon as it is assigned, the cluster lets it run that long
// without a committed start) has its start committed with its end, in
// one entry: the timeline has both, the start dated by how long the
// process ran, within the reservation and the end. One that runs longer
// has its start committed while it runs.
func TestAStartUnreportedAtTheEndIsCommittedWithIt(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Resources: api.Resources{CPUMillis: 2000, MemoryMB: 1024}, Slots: 2}, 1, 0, 2)
	WaitRegistered(t, a)
	cl := c.AllClient()
	short := submit(t, cl, shSpec("short", "true"))
	long := submit(t, cl, shSpec("long", "sleep 1"))
	for _, id := range []string{short, long} {
		task := waitTaskState(t, cl, id, "SUCCEEDED")
		var started, finished *api.TimelineEvent
		for i, e := range task.Timeline {
			switch e.Kind {
			case "started":
				started = &task.Timeline[i]
			case "finished":
				finished = &task.Timeline[i]
			}
		}
		if started == nil || finished == nil {
			t.Fatalf("%s: timeline %+v lacks its start or end", task.Name, task.Timeline)
		}
		at := task.Attempts[0]
		if at.StartedAt.Before(at.ReservedAt) || at.FinishedAt.Before(at.StartedAt) {
			t.Fatalf("%s: reserved %v, started %v, finished %v: out of order", task.Name, at.ReservedAt, at.StartedAt, at.FinishedAt)
		}
		sameEntry := started.Index == finished.Index
		if task.Name == "short" && !sameEntry || task.Name == "long" && sameEntry {
			t.Fatalf("%s: started at index %d, finished at %d", task.Name, started.Index, finished.Index)
		}
	}
}

// A result that reaches the cluster late, its agent's link cut when the
// process ended, records how long the task ran on the node: the end is
// dated by the agent's measure after the committed start, not when the
// report finally committed. The node's profile judges its speed by
// these times; a slow link is not a slow node.
func TestALateResultRecordsTheRunNotTheReportsWay(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 1})
	WaitRegistered(t, a)
	cl := c.AllClient()
	dir := t.TempDir()
	id := submit(t, cl, shSpec("late", fmt.Sprintf(`until [ -e %[1]s/go ]; do sleep 0.02; done; sleep 0.2; touch %[1]s/done`, dir)))
	waitTaskState(t, cl, id, "RUNNING")
	a.Transport.Cut()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !Eventually(30*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "done")); return err == nil }) {
		t.Fatal("the task never ended")
	}
	ended := time.Now()
	// The result waits on the cut link this long.
	const held = 3 * time.Second
	time.Sleep(held)
	a.Transport.Heal()
	task := waitTaskState(t, cl, id, "SUCCEEDED")
	at := task.Attempts[0]
	if ran := at.FinishedAt.Sub(at.StartedAt); ran < 200*time.Millisecond {
		t.Fatalf("recorded run %v, shorter than the task's own sleep", ran)
	}
	if late := at.FinishedAt.Sub(ended); late > held/2 {
		t.Fatalf("the end is dated %v after the process ended (the report was held %v): the report's way counted as run time", late, held)
	}
	for _, e := range task.Timeline {
		if e.Kind == "finished" && !e.Time.Equal(at.FinishedAt) {
			t.Fatalf("the timeline's end %v differs from the attempt's %v", e.Time, at.FinishedAt)
		}
	}
}
