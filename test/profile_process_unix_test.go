//go:build unix

package test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd/api"
)

// site is a deployment of real processes: three `herd server` and any
// number of `herd agent`, each agent with its own PATH, as the boxes of a
// real site have different tools installed.
type site struct {
	t       *testing.T
	bin     string
	base    string
	servers []*serverProc
	agents  map[string]*exec.Cmd
	join    []string
	cl      *api.Client
}

// newSite starts three servers with serverConf (HCL) and waits for a
// leader.
func newSite(t *testing.T, serverConf string) *site {
	t.Helper()
	s := &site{t: t, bin: buildHerd(t), base: t.TempDir(), agents: map[string]*exec.Cmd{}}
	conf := filepath.Join(s.base, "server.hcl")
	if err := os.WriteFile(conf, []byte(serverConf), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		p := &serverProc{id: fmt.Sprintf("s%d", i), http: FreeAddr(t), raft: FreeAddr(t), dir: filepath.Join(s.base, fmt.Sprintf("s%d", i)),
			extra: []string{"-config", conf}}
		s.servers = append(s.servers, p)
		s.join = append(s.join, p.http)
	}
	for _, p := range s.servers {
		p.start(t, s.bin, s.join)
	}
	stopAtCleanup(t, s.servers)
	t.Cleanup(func() {
		for id, a := range s.agents {
			_ = a.Process.Signal(syscall.SIGKILL)
			_ = a.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(s.base, id+".log"))
				t.Logf("--- %s log ---\n%s", id, tail(b, 3000))
			}
		}
	})
	cl, err := api.NewClient(s.join...)
	if err != nil {
		t.Fatal(err)
	}
	cl.Retries, cl.RetryWait = 60, 250*time.Millisecond
	s.cl = cl
	return s
}

// agent starts `herd agent` with PATH set to path and the extra flags.
func (s *site) agent(id, path string, args ...string) {
	s.t.Helper()
	log, err := os.Create(filepath.Join(s.base, id+".log"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { log.Close() })
	all := append([]string{"agent", "-id", id, "-servers", strings.Join(s.join, ","), "-data-dir", filepath.Join(s.base, id),
		"-heartbeat-interval", "1s", "-log-level", "info"}, args...)
	cmd := exec.Command(s.bin, all...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start agent %s: %v", id, err)
	}
	s.agents[id] = cmd
}

// ready waits until every node named is registered and READY.
func (s *site) ready(ids ...string) {
	s.t.Helper()
	for _, id := range ids {
		if !Eventually(60*time.Second, func() bool {
			n, _, err := s.cl.GetNode(context.Background(), id, api.ReadOptions{})
			return err == nil && n.Liveness == api.LivenessReady
		}) {
			s.t.Fatalf("node %s never became READY", id)
		}
	}
}

func (s *site) node(id string) api.Node {
	s.t.Helper()
	n, _, err := s.cl.GetNode(context.Background(), id, api.ReadOptions{Consistent: true})
	if err != nil {
		s.t.Fatalf("node %s: %v", id, err)
	}
	return n
}

// submit submits specs and returns their ids.
func (s *site) submit(specs ...api.TaskSpec) []string {
	s.t.Helper()
	res, err := s.cl.SubmitTasks(context.Background(), specs)
	if err != nil {
		s.t.Fatalf("submit: %v", err)
	}
	ids := make([]string, len(res.Tasks))
	for i, r := range res.Tasks {
		ids[i] = r.ID
	}
	return ids
}

// finished waits for every task to end and returns them.
func (s *site) finished(ids []string, timeout time.Duration) []api.Task {
	s.t.Helper()
	out := make([]api.Task, len(ids))
	for i, id := range ids {
		if !Eventually(timeout, func() bool {
			t, _, err := s.cl.GetTask(context.Background(), id, api.ReadOptions{})
			out[i] = t
			return err == nil && terminal(t.State)
		}) {
			s.t.Fatalf("task %s did not finish: %+v", id, out[i])
		}
	}
	return out
}

// script writes an executable shell script.
func script(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func systemPath() string {
	return "/usr/local/bin:/usr/bin:/bin"
}

// The black hole of a real site: three agents, one started with a PATH
// that lacks the tool the tasks call (a missing dependency). With a
// backlog of 60 such tasks, the broken node is quarantined after at most
// 3 failed attempts, every task succeeds on the healthy nodes, and the
// quarantine shows in herd node status with its reason. Its health check
// (the site's: is the tool there?) fails until the tool is put back; then
// it passes and releases the node.
func TestProcessesBlackHoleIsQuarantinedThenReleased(t *testing.T) {
	s := newSite(t, `profiles {
  quarantine_suspect = "3s"
  quarantine_confirmed = "10s"
  health_recheck = "300ms"
}
`)
	good := filepath.Join(s.base, "tools-good")
	script(t, filepath.Join(good, "herdtool"), "exit 0")
	missing := filepath.Join(s.base, "tools-missing")
	if err := os.MkdirAll(missing, 0o750); err != nil {
		t.Fatal(err)
	}
	s.agent("good-1", good+":"+systemPath(), "-slots", "2", "-labels", "role=good")
	s.agent("good-2", good+":"+systemPath(), "-slots", "2", "-labels", "role=good")
	s.agent("broken", missing+":"+systemPath(), "-slots", "1", "-health-check", "command -v herdtool")
	s.ready("good-1", "good-2", "broken")

	task := func(i int) api.TaskSpec {
		max := 5
		return api.TaskSpec{Name: fmt.Sprintf("tool-%d", i), Class: "tool", Command: []string{"sh", "-c", "herdtool"}, MaxAttempts: &max}
	}
	// The class has succeeded on a healthy node before the backlog comes.
	warm := task(0)
	warm.RequiredLabels = map[string]string{"role": "good"}
	s.finished(s.submit(warm), 30*time.Second)

	specs := make([]api.TaskSpec, 60)
	for i := range specs {
		specs[i] = task(i + 1)
	}
	began := time.Now()
	tasks := s.finished(s.submit(specs...), 120*time.Second)
	t.Logf("60 tasks done in %v", time.Since(began).Round(time.Millisecond))
	for _, tk := range tasks {
		if tk.State != api.TaskSucceeded {
			t.Fatalf("task %s ended %s: %+v", tk.ID, tk.State, tk.Timeline)
		}
		last := tk.Attempts[len(tk.Attempts)-1]
		if last.NodeID == "broken" {
			t.Fatalf("task %s succeeded on the broken node", tk.ID)
		}
	}
	n := s.node("broken")
	failed := 0
	for _, a := range n.Attempts {
		if a.State == api.AttemptFailed {
			failed++
		}
	}
	if failed == 0 || failed > 3 {
		t.Fatalf("the broken node failed %d attempts; it should be quarantined after at most 3", failed)
	}
	if n.Quarantine == nil || !strings.Contains(n.Quarantine.Reason, "black hole") {
		t.Fatalf("broken node not quarantined: %+v", n.Quarantine)
	}
	out, err := exec.Command(s.bin, "node", "status", "-address", s.join[0], "broken").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Quarantine") || !strings.Contains(string(out), "black hole") {
		t.Fatalf("herd node status does not show the quarantine (%v):\n%s", err, out)
	}
	t.Logf("quarantined after %d failed attempts: %s", failed, n.Quarantine.Reason)
	began = time.Now()
	// Its health check fails while the tool is missing.
	if !Eventually(30*time.Second, func() bool {
		n := s.node("broken")
		return n.Quarantine != nil && n.Quarantine.CheckFailed
	}) {
		t.Fatalf("the health check never failed: %+v", s.node("broken").HealthCheck)
	}
	t.Logf("health check failed after %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	// The tool is put back: the next check passes and releases the node.
	script(t, filepath.Join(missing, "herdtool"), "exit 0")
	if !Eventually(30*time.Second, func() bool { return s.node("broken").Quarantine == nil }) {
		t.Fatalf("the passing health check did not release the node: %+v", s.node("broken"))
	}
	t.Logf("released %v after the tool came back", time.Since(began).Round(time.Millisecond))
	n = s.node("broken")
	released := false
	for _, e := range n.Events {
		released = released || e.Kind == "quarantine" && strings.HasPrefix(e.Message, "released")
	}
	if !released || n.HealthCheck == nil || !n.HealthCheck.Passed {
		t.Fatalf("release not recorded: %+v %+v", n.Events, n.HealthCheck)
	}
	// And it takes work again.
	pinned := task(99)
	pinned.RequiredLabels = nil
	ids := s.submit(pinned)
	_ = s.finished(ids, 30*time.Second)
}

// A slow node: one agent's runs of a class take 5 times as long as the
// others' (its copy of the tool is slower; the margin over the 2.5× that
// demotes holds on a loaded machine, where every run starts later). It
// is demoted within 5 runs of the class, and, the tasks being of size
// medium (tiers L1 and L2), gets none of them once it is L3. Back at normal speed, it is promoted
// after the dwell time and keeps its tier while it runs them at speed.
func TestProcessesSlowNodeIsDemotedThenPromoted(t *testing.T) {
	s := newSite(t, `profiles {
  l1_min_cores = 1000
  l2_min_cores = 1
  l2_min_memory_mb = 1
  dwell = "4s"
  health_recheck = "500ms"
}
`)
	fast := filepath.Join(s.base, "tools-fast")
	script(t, filepath.Join(fast, "herdwork"), "sleep 0.2")
	slow := filepath.Join(s.base, "tools-slow")
	script(t, filepath.Join(slow, "herdwork"), "sleep 1")
	for _, id := range []string{"fast-1", "fast-2"} {
		s.agent(id, fast+":"+systemPath(), "-slots", "1")
	}
	s.agent("slow", slow+":"+systemPath(), "-slots", "1")
	s.ready("fast-1", "fast-2", "slow")
	if tier := s.node("slow").Tier.Tier; tier != "L2" {
		t.Fatalf("every node should start at L2 here, slow is %q", tier)
	}
	work := func(n int) []api.TaskSpec {
		out := make([]api.TaskSpec, n)
		for i := range out {
			out[i] = api.TaskSpec{Class: "infer", Size: "medium", Command: []string{"sh", "-c", "herdwork"}}
		}
		return out
	}
	demoted := func() bool { return s.node("slow").Tier.Tier == "L3" }
	runsOnSlow := func(tasks []api.Task) int {
		n := 0
		for _, tk := range tasks {
			for _, a := range tk.Attempts {
				if a.NodeID == "slow" && a.State == api.AttemptSucceeded {
					n++
				}
			}
		}
		return n
	}
	var before []api.Task
	for round := 0; !demoted(); round++ {
		if round == 10 {
			t.Fatalf("the slow node was never demoted: %+v", s.node("slow"))
		}
		before = append(before, s.finished(s.submit(work(6)...), 60*time.Second)...)
	}
	n := s.node("slow")
	var why string
	for _, e := range n.Events {
		if e.Kind == "tier" {
			why = e.Message
		}
	}
	if !strings.HasPrefix(why, "L2 → L3: 3 of the last") || !strings.Contains(why, "class infer took over 2.5× the fleet median") {
		t.Fatalf("tier event %q", why)
	}
	runsBefore := 0
	for _, a := range n.Attempts {
		if a.State == api.AttemptSucceeded && !a.FinishedAt.After(n.Tier.ChangedAt) {
			runsBefore++
		}
	}
	if runsBefore > 5 {
		t.Fatalf("demoted after %d runs of the class, more than 5", runsBefore)
	}
	t.Logf("demoted after %d runs: %s; runs so far: %s", runsBefore, why, runTimes(before))
	// Its copy of the tool is fixed; while demoted it takes none of the
	// medium tasks.
	script(t, filepath.Join(slow, "herdwork"), "sleep 0.2")
	after := s.finished(s.submit(work(6)...), 60*time.Second)
	if demoted() {
		if got := runsOnSlow(after); got != 0 {
			t.Fatalf("an L3 node ran %d tasks of size medium", got)
		}
	}
	if !Eventually(30*time.Second, func() bool { return s.node("slow").Tier.Tier == "L2" }) {
		t.Fatalf("never promoted after the dwell: %+v", s.node("slow").Tier)
	}
	n = s.node("slow")
	for _, e := range n.Events {
		if e.Kind == "tier" {
			why = e.Message
		}
	}
	if !strings.HasPrefix(why, "L3 → L2: healthy for 4s") {
		t.Fatalf("promotion event %q", why)
	}
	// At normal speed it keeps its tier and takes its share again.
	again := s.finished(s.submit(work(12)...), 60*time.Second)
	if runsOnSlow(again) == 0 {
		t.Fatal("the promoted node took none of the work")
	}
	if tier := s.node("slow").Tier.Tier; tier != "L2" {
		t.Fatalf("demoted again at normal speed: %s; runs: %s", tier, runTimes(again))
	}
}

// runTimes lists each node's run times of tasks, for the log.
func runTimes(tasks []api.Task) string {
	by := map[string][]string{}
	for _, tk := range tasks {
		for _, a := range tk.Attempts {
			if a.State == api.AttemptSucceeded {
				by[a.NodeID] = append(by[a.NodeID], a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond).String())
			}
		}
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(by)) {
		out = append(out, id+" "+strings.Join(by[id], " "))
	}
	return strings.Join(out, "; ")
}

// A pipeline's third stage loses its node mid-run (SIGKILL of the agent
// running it): the stage reruns on another node, fetching its input again
// from the node that holds it; the first two stages keep their single
// attempt and the final output is right.
func TestProcessesPipelineSurvivesSIGKILLOfAStageNode(t *testing.T) {
	s := newSite(t, `liveness {
  heartbeat_interval = "500ms"
  max_heartbeat_interval = "1s"
  leader_grace = "1s"
}
`)
	s.agent("prep", systemPath(), "-slots", "2", "-labels", "role=prep", "-heartbeat-interval", "500ms", "-no-bench")
	s.agent("infer-1", systemPath(), "-slots", "2", "-labels", "role=infer", "-heartbeat-interval", "500ms", "-no-bench")
	s.agent("infer-2", systemPath(), "-slots", "2", "-labels", "role=infer", "-heartbeat-interval", "500ms", "-no-bench")
	s.ready("prep", "infer-1", "infer-2")
	on := func(role, script string) api.TaskSpec {
		return api.TaskSpec{Command: []string{"sh", "-c", script}, RequiredLabels: map[string]string{"role": role}, MaxAttempts: ptrTo(3)}
	}
	spec := api.JobSpec{Name: "images", Stages: []api.StageSpec{
		{Name: "acquire", Outputs: []string{"raw.bin"}, Task: on("prep", `printf 'frame-9' > raw.bin`)},
		{Name: "preprocess", DependsOn: []string{"acquire"}, Inputs: []string{"acquire.raw.bin"}, Outputs: []string{"pre.bin"},
			Task: on("prep", `tr a-z A-Z < "$HERD_INPUTS/acquire/raw.bin" > pre.bin`)},
		{Name: "infer", DependsOn: []string{"preprocess"}, Inputs: []string{"preprocess.pre.bin"}, Outputs: []string{"labels.txt"},
			Task: on("infer", `sleep 3; printf 'cat:%s' "$(cat "$HERD_INPUTS/preprocess/pre.bin")" > labels.txt`)},
		{Name: "return", DependsOn: []string{"infer"}, Inputs: []string{"infer.labels.txt"}, Outputs: []string{"report.txt"},
			Task: on("prep", `cp "$HERD_INPUTS/infer/labels.txt" report.txt`)},
	}}
	res, err := s.cl.SubmitJob(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the third stage to run, then kill its node's agent.
	var victim string
	if !Eventually(60*time.Second, func() bool {
		j, _, err := s.cl.GetJob(context.Background(), res.ID, api.ReadOptions{})
		if err != nil || len(j.Stages[2].Tasks) == 0 {
			return false
		}
		tk, _, err := s.cl.GetTask(context.Background(), j.Stages[2].Tasks[0].ID, api.ReadOptions{})
		if err != nil || tk.State != api.TaskRunning {
			return false
		}
		victim = tk.Attempts[len(tk.Attempts)-1].NodeID
		return true
	}) {
		t.Fatal("the infer stage never ran")
	}
	if err := s.agents[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var j api.Job
	if !Eventually(120*time.Second, func() bool {
		j, _, err = s.cl.GetJob(context.Background(), res.ID, api.ReadOptions{})
		return err == nil && (j.State == api.JobSucceeded || j.State == api.JobFailed)
	}) || j.State != api.JobSucceeded {
		t.Fatalf("job after the kill: %+v", j)
	}
	for i, st := range j.Stages {
		if i != 2 && st.Tasks[0].Attempts != 1 {
			t.Errorf("stage %s took %d attempts; only the killed one should rerun", st.Name, st.Tasks[0].Attempts)
		}
	}
	infer := j.Stages[2].Tasks[0]
	if infer.Attempts < 2 || infer.NodeID == victim {
		t.Fatalf("the infer stage did not rerun elsewhere: %+v (killed %s)", infer, victim)
	}
	last := j.Stages[3].Tasks[0]
	b, err := os.ReadFile(filepath.Join(s.base, last.NodeID, "outputs", last.ID+":report.txt"))
	if err != nil || string(b) != "cat:FRAME-9" {
		t.Fatalf("final output %q (%v)", b, err)
	}
}
