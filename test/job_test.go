package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
)

// waitJob waits for a job to end and returns it.
func waitJob(t *testing.T, cl *api.Client, id string) api.Job {
	t.Helper()
	var j api.Job
	if !Eventually(90*time.Second, func() bool {
		var err error
		j, _, err = cl.GetJob(Ctx(t, 10*time.Second), id, api.ReadOptions{})
		return err == nil && (j.State == api.JobSucceeded || j.State == api.JobFailed || j.State == api.JobCancelled)
	}) {
		t.Fatalf("job %s did not end: %+v", id, j)
	}
	return j
}

// edgeAgents starts agents edge-1..edge-n with their data directories,
// returned by node id, and waits for them to register.
func edgeAgents(t *testing.T, c *Cluster, n int) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	var agents []*AgentHandle
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("edge-%d", i)
		dirs[id] = t.TempDir()
		agents = append(agents, c.StartAgent(agent.Config{ID: id, DataDir: dirs[id], Resources: api.Resources{CPUMillis: 2000, MemoryMB: 4096}, Slots: 2}))
	}
	WaitRegistered(t, agents...)
	return dirs
}

func stageTask(script string) api.TaskSpec {
	return api.TaskSpec{Command: []string{"sh", "-c", script}, MaxAttempts: ptrTo(3)}
}

// keptOutput reads a stage task's output from the data directory of the
// agent that holds it.
func keptOutput(t *testing.T, dirs map[string]string, node, task, output string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dirs[node], "outputs", task+":"+output))
	if err != nil {
		t.Fatalf("output %s of %s on %s: %v", output, task, node, err)
	}
	return string(b)
}

// The image pipeline as four stages on three agents: acquire, preprocess,
// infer, return, each reading the file the one before left and
// transforming it. The job succeeds with the right content, and with
// capacity to spare every stage lands where its input is.
func TestJobImagePipeline(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	dirs := edgeAgents(t, c, 3)
	cl := c.AllClient()
	spec := api.JobSpec{Name: "images", IdempotencyKey: "images-1", Stages: []api.StageSpec{
		{Name: "acquire", Outputs: []string{"raw.bin"}, Task: stageTask(`printf 'frame-7' > raw.bin`)},
		{Name: "preprocess", DependsOn: []string{"acquire"}, Inputs: []string{"acquire.raw.bin"}, Outputs: []string{"pre.bin"},
			Task: stageTask(`tr a-z A-Z < "$HERD_INPUTS/acquire/raw.bin" > pre.bin`)},
		{Name: "infer", DependsOn: []string{"preprocess"}, Inputs: []string{"preprocess.pre.bin"}, Outputs: []string{"labels.txt"},
			Task: stageTask(`printf 'cat:%s' "$(cat "$HERD_INPUTS/preprocess/pre.bin")" > labels.txt`)},
		{Name: "return", DependsOn: []string{"infer"}, Inputs: []string{"infer.labels.txt"}, Outputs: []string{"report.txt"},
			Task: stageTask(`printf '%s from %s' "$(cat "$HERD_INPUTS/infer/labels.txt")" "$HERD_JOB_ID" > report.txt`)},
	}}
	res, err := cl.SubmitJob(Ctx(t, 30*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, cl, res.ID)
	if j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	var prev string
	for _, s := range j.Stages {
		if s.State != "SUCCEEDED" || len(s.Tasks) != 1 || s.Tasks[0].Attempts != 1 {
			t.Fatalf("stage %s: %+v", s.Name, s)
		}
		if prev != "" && s.Tasks[0].NodeID != prev {
			t.Errorf("stage %s ran on %s, not on %s which holds its input", s.Name, s.Tasks[0].NodeID, prev)
		}
		prev = s.Tasks[0].NodeID
	}
	last := j.Stages[3].Tasks[0]
	if got, want := keptOutput(t, dirs, last.NodeID, last.ID, "report.txt"), "cat:FRAME-7 from "+res.ID; got != want {
		t.Fatalf("final output %q, want %q", got, want)
	}
	// The same key again (here through every replica) returns the job.
	again, err := cl.SubmitJob(Ctx(t, 30*time.Second), spec)
	if err != nil || again.ID != res.ID {
		t.Fatalf("resubmit: %+v %v", again, err)
	}
}

// A fan-out of 10 spread over three nodes, then a fan-in that sees all
// ten outputs: those made elsewhere are fetched from the nodes holding
// them, checked against their SHA-256. The same with TLS and ACLs on,
// where an agent fetches from another's data port with its certificate.
func TestJobFanOutFanIn(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "secure"}[secure], func(t *testing.T) {
			setup := agentSetup()
			setup.Secure = secure
			jobFanOutFanIn(t, NewClusterWith(t, 3, setup))
		})
	}
}

func jobFanOutFanIn(t *testing.T, c *Cluster) {
	dirs := edgeAgents(t, c, 3)
	cl := c.AllClient()
	res, err := cl.SubmitJob(Ctx(t, 30*time.Second), api.JobSpec{Name: "fan", Stages: []api.StageSpec{
		{Name: "part", Count: 10, Outputs: []string{"n.txt"}, Task: stageTask(`sleep 0.2; echo "$HERD_INSTANCE" > n.txt`)},
		{Name: "sum", DependsOn: []string{"part"}, Inputs: []string{"part.n.txt"}, Outputs: []string{"sum.txt"},
			Task: stageTask(`cat "$HERD_INPUTS"/part/*/n.txt | sort -n | tr '\n' ' ' > sum.txt`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, cl, res.ID)
	if j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	nodes := map[string]bool{}
	for _, tk := range j.Stages[0].Tasks {
		nodes[tk.NodeID] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("the fan-out ran on %d node(s); the fan-in fetched nothing", len(nodes))
	}
	sum := j.Stages[1].Tasks[0]
	if got := keptOutput(t, dirs, sum.NodeID, sum.ID, "sum.txt"); got != "0 1 2 3 4 5 6 7 8 9 " {
		t.Fatalf("the fan-in saw %q", got)
	}
}

// A cycle, a dangling reference and a duplicate stage name are each a 400
// naming the stage and field, and commit nothing.
func TestJobValidationOverHTTP(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	cl := c.AllClient()
	task := stageTask("true")
	for name, c := range map[string]struct {
		stages []api.StageSpec
		want   string
	}{
		"cycle":     {[]api.StageSpec{{Name: "a", DependsOn: []string{"b"}, Task: task}, {Name: "b", DependsOn: []string{"a"}, Task: task}}, "stages[a].depends_on: dependency cycle a → b → a"},
		"dangling":  {[]api.StageSpec{{Name: "a", Task: task}, {Name: "b", DependsOn: []string{"a"}, Inputs: []string{"a.missing"}, Task: task}}, `stages[b].inputs: "a.missing"`},
		"duplicate": {[]api.StageSpec{{Name: "a", Task: task}, {Name: "a", Task: task}}, "stages[a].name: is used by two stages"},
	} {
		_, err := cl.SubmitJob(Ctx(t, 10*time.Second), api.JobSpec{Name: name, Stages: c.stages})
		if !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a 400 saying %q", name, err, c.want)
		}
	}
	list, _, err := cl.ListJobs(Ctx(t, 10*time.Second), "", 10, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Jobs) != 0 {
		t.Fatalf("invalid jobs were committed: %+v %v", list, err)
	}
	tasks, _, err := cl.ListTasks(Ctx(t, 10*time.Second), api.TaskQuery{}, api.ReadOptions{Consistent: true})
	if err != nil || len(tasks.Tasks) != 0 {
		t.Fatalf("invalid jobs created tasks: %+v %v", tasks, err)
	}
}

// The same job submitted through two replicas at once is one job.
func TestJobIdempotentThroughTwoReplicas(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	spec := api.JobSpec{Name: "once", IdempotencyKey: "once-1", Stages: []api.StageSpec{{Name: "a", Task: stageTask("true")}}}
	var wg sync.WaitGroup
	ids := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Client(i).SubmitJob(Ctx(t, 30*time.Second), spec)
			ids[i], errs[i] = res.ID, err
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || ids[0] != ids[1] {
		t.Fatalf("two submits: %v %v, ids %v", errs[0], errs[1], ids)
	}
	list, _, err := c.AllClient().ListJobs(Ctx(t, 10*time.Second), "", 10, api.ReadOptions{Consistent: true})
	if err != nil || len(list.Jobs) != 1 {
		t.Fatalf("jobs: %+v %v", list, err)
	}
	if list.Jobs[0].ID != ids[0] {
		t.Fatalf("listed %s, submitted %s", list.Jobs[0].ID, ids[0])
	}
}

// The third stage's node is cut off from every server mid-run (gossip and
// HTTP): its agent stops the stage when its lease runs out, the stage
// reruns on the other node able to run it, fetching its input again from
// the node holding it, and the stages before keep their single attempt.
func TestJobStageCutOffRerunsAlone(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	dirs := map[string]string{"prep": t.TempDir(), "infer-1": t.TempDir(), "infer-2": t.TempDir()}
	prep := c.StartAgent(agent.Config{ID: "prep", DataDir: dirs["prep"], Slots: 2, Labels: map[string]string{"role": "prep"}})
	faults := map[string]*FaultTransport{}
	handles := map[string]*AgentHandle{}
	for i, id := range []string{"infer-1", "infer-2"} {
		h, ft := faultyAgent(c, agent.Config{ID: id, DataDir: dirs[id], Slots: 2, Labels: map[string]string{"role": "infer"}}, uint64(7+i))
		faults[id], handles[id] = ft, h
	}
	WaitRegistered(t, prep, handles["infer-1"], handles["infer-2"])
	time.Sleep(c.Replicas[0].Cfg.Liveness.LeaderGrace) // verdicts are not held back
	cl := c.AllClient()
	on := func(role, script string) api.TaskSpec {
		s := stageTask(script)
		s.RequiredLabels = map[string]string{"role": role}
		return s
	}
	res, err := cl.SubmitJob(Ctx(t, 30*time.Second), api.JobSpec{Name: "cut", Stages: []api.StageSpec{
		{Name: "acquire", Outputs: []string{"raw.bin"}, Task: on("prep", `printf 'frame-3' > raw.bin`)},
		{Name: "preprocess", DependsOn: []string{"acquire"}, Inputs: []string{"acquire.raw.bin"}, Outputs: []string{"pre.bin"},
			Task: on("prep", `tr a-z A-Z < "$HERD_INPUTS/acquire/raw.bin" > pre.bin`)},
		{Name: "infer", DependsOn: []string{"preprocess"}, Inputs: []string{"preprocess.pre.bin"}, Outputs: []string{"labels.txt"},
			Task: on("infer", `sleep 2; printf 'dog:%s' "$(cat "$HERD_INPUTS/preprocess/pre.bin")" > labels.txt`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	if !Eventually(30*time.Second, func() bool {
		j, _, err := cl.GetJob(Ctx(t, 10*time.Second), res.ID, api.ReadOptions{})
		if err != nil || len(j.Stages[2].Tasks) == 0 {
			return false
		}
		tk, _, err := cl.GetTask(Ctx(t, 10*time.Second), j.Stages[2].Tasks[0].ID, api.ReadOptions{})
		if err != nil || tk.State != api.TaskRunning {
			return false
		}
		victim = tk.Attempts[len(tk.Attempts)-1].NodeID
		return true
	}) {
		t.Fatal("the infer stage never ran")
	}
	faults[victim].Cut(true)
	handles[victim].Transport.Cut()
	j := waitJob(t, cl, res.ID)
	if j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	if j.Stages[0].Tasks[0].Attempts != 1 || j.Stages[1].Tasks[0].Attempts != 1 {
		t.Fatalf("the first stages reran: %+v", j.Stages)
	}
	infer := j.Stages[2].Tasks[0]
	if infer.Attempts < 2 || infer.NodeID == victim {
		t.Fatalf("the infer stage did not rerun elsewhere: %+v (cut %s)", infer, victim)
	}
	if got := keptOutput(t, dirs, infer.NodeID, infer.ID, "labels.txt"); got != "dog:FRAME-3" {
		t.Fatalf("output %q", got)
	}
}

// A schedule @every 2s across a leader kill and a full-cluster restart:
// no slot fires twice (every run is of a distinct slot, in order), and
// the slots missed while no leader existed are caught up once, as the
// job's run_once policy says, visibly in its firings.
func TestScheduleAcrossLeaderKillAndFullRestart(t *testing.T) {
	c := NewClusterWith(t, 3, agentSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 2}, 0, 1, 2)
	WaitRegistered(t, a)
	cl := c.AllClient()
	res, err := cl.SubmitJob(Ctx(t, 30*time.Second), api.JobSpec{Name: "health-report", Schedule: &api.Schedule{Cron: "@every 2s", CatchUp: "run_once"},
		Stages: []api.StageSpec{{Name: "report", Task: stageTask("true")}}})
	if err != nil {
		t.Fatal(err)
	}
	firings := func(n int) api.Job {
		t.Helper()
		var j api.Job
		if !Eventually(60*time.Second, func() bool {
			var err error
			j, _, err = c.AllClient().GetJob(Ctx(t, 10*time.Second), res.ID, api.ReadOptions{Consistent: true})
			return err == nil && len(j.Firings) >= n
		}) {
			t.Fatalf("fewer than %d firings: %+v", n, j.Firings)
		}
		return j
	}
	firings(2)
	leader := c.WaitForLeader()
	c.Stop(leader)
	c.WaitForLeader()
	j := firings(4)
	c.Start(leader)
	before := len(j.Firings)
	c.StopAll()
	// The cluster is down for several slots: time must pass for them to
	// be missed.
	time.Sleep(5 * time.Second)
	for i := range c.Replicas {
		c.Start(i)
	}
	c.WaitForLeader()
	j = firings(before + 2)
	caught := false
	for i, f := range j.Firings {
		if i > 0 && !f.Slot.After(j.Firings[i-1].Slot) {
			t.Fatalf("slot %v handled after %v: %+v", f.Slot, j.Firings[i-1].Slot, j.Firings)
		}
		caught = caught || strings.Contains(f.Outcome, "caught up: ")
	}
	if !caught {
		t.Fatalf("no firing caught up the slots missed while the cluster was down: %+v", j.Firings)
	}
	list, _, err := cl.ListJobs(Ctx(t, 10*time.Second), "", 1000, api.ReadOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, r := range list.Jobs {
		if r.ScheduledBy == res.ID {
			if runs[r.ID] {
				t.Fatalf("run %s listed twice", r.ID)
			}
			runs[r.ID] = true
		}
	}
	fired := 0
	for _, f := range j.Firings {
		if f.Run != "" {
			fired++
			if !runs[f.Run] {
				t.Fatalf("firing %+v names a run that does not exist", f)
			}
			// A run is read by its id (job@slot), and so is its stage's
			// task, made from it.
			run, _, err := cl.GetJob(Ctx(t, 10*time.Second), f.Run, api.ReadOptions{Consistent: true})
			if err != nil || run.ID != f.Run {
				t.Fatalf("status of run %s: %+v, %v", f.Run, run, err)
			}
			for _, st := range run.Stages {
				for _, id := range st.TaskIDs {
					if _, _, err := cl.GetTask(Ctx(t, 10*time.Second), id, api.ReadOptions{Consistent: true}); err != nil {
						t.Fatalf("status of run %s's task %s: %v", f.Run, id, err)
					}
				}
			}
		}
	}
	if fired == 0 || len(runs) < fired {
		t.Fatalf("%d runs for %d firings that ran", len(runs), fired)
	}
	if out := j.NextFiring; out.IsZero() {
		t.Fatal("no next firing shown")
	}
}

// Finished stages are not rerun because the node holding their outputs
// died, unless a later stage needs an output no live node holds: then the
// stages that made it rerun, and the timeline says why.
func TestJobRerunsTheProducerOfALostOutput(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	dirs := map[string]string{}
	handles := map[string]*AgentHandle{}
	for id, role := range map[string]string{"prep-1": "prep", "prep-2": "prep", "infer": "infer"} {
		dirs[id] = t.TempDir()
		handles[id] = c.StartAgent(agent.Config{ID: id, DataDir: dirs[id], Slots: 2, Labels: map[string]string{"role": role}})
	}
	WaitRegistered(t, handles["prep-1"], handles["prep-2"], handles["infer"])
	time.Sleep(c.Replicas[0].Cfg.Liveness.LeaderGrace) // verdicts are not held back
	cl := c.AllClient()
	ctx := Ctx(t, time.Minute)
	// The infer node takes nothing until the prep stages' node is gone.
	if _, err := cl.DrainNode(ctx, "infer", true); err != nil {
		t.Fatal(err)
	}
	on := func(role, script string) api.TaskSpec {
		s := stageTask(script)
		s.RequiredLabels = map[string]string{"role": role}
		return s
	}
	res, err := cl.SubmitJob(ctx, api.JobSpec{Name: "lost", Stages: []api.StageSpec{
		{Name: "acquire", Outputs: []string{"raw.bin"}, Task: on("prep", `printf 'frame-5' > raw.bin`)},
		{Name: "preprocess", DependsOn: []string{"acquire"}, Inputs: []string{"acquire.raw.bin"}, Outputs: []string{"pre.bin"},
			Task: on("prep", `tr a-z A-Z < "$HERD_INPUTS/acquire/raw.bin" > pre.bin`)},
		{Name: "infer", DependsOn: []string{"preprocess"}, Inputs: []string{"preprocess.pre.bin"}, Outputs: []string{"labels.txt"},
			Task: on("infer", `printf 'owl:%s' "$(cat "$HERD_INPUTS/preprocess/pre.bin")" > labels.txt`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	if !Eventually(30*time.Second, func() bool {
		j, _, err := cl.GetJob(ctx, res.ID, api.ReadOptions{})
		if err != nil || j.Stages[1].State != "SUCCEEDED" {
			return false
		}
		holder = j.Stages[1].Tasks[0].NodeID
		return true
	}) {
		t.Fatal("the prep stages never succeeded")
	}
	handles[holder].Stop()
	if !Eventually(30*time.Second, func() bool {
		n, _, err := cl.GetNode(ctx, holder, api.ReadOptions{})
		return err == nil && n.Liveness == api.LivenessDown
	}) {
		t.Fatalf("%s was never declared DOWN", holder)
	}
	if _, err := cl.DrainNode(ctx, "infer", false); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, cl, res.ID)
	if j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	reran := false
	for _, e := range j.Timeline {
		reran = reran || strings.HasPrefix(e.Message, "stage preprocess reruns") && strings.Contains(e.Message, "no live node holds")
	}
	if !reran {
		t.Fatalf("the timeline does not say why preprocess reran: %+v", j.Timeline)
	}
	infer := j.Stages[2].Tasks[0]
	if got := keptOutput(t, dirs, infer.NodeID, infer.ID, "labels.txt"); got != "owl:FRAME-5" {
		t.Fatalf("output %q", got)
	}
	for _, s := range j.Stages[:2] {
		if s.Tasks[0].NodeID == holder {
			t.Fatalf("stage %s's latest run is still on the dead node: %+v", s.Name, s.Tasks[0])
		}
	}
}
