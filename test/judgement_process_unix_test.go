//go:build unix

package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd/api"
)

// eventsSay reports whether a timeline holds an event of kind whose
// message contains text.
func eventsSay(events []api.TimelineEvent, kind, text string) bool {
	return slices.ContainsFunc(events, func(e api.TimelineEvent) bool {
		return (kind == "" || e.Kind == kind) && strings.Contains(e.Message, text)
	})
}

// Bad tasks are not bad nodes: on three real agents, a class that
// succeeds everywhere and four tasks of it that exit non-zero wherever
// they run, submitted among twenty good ones. Each bad task fails on
// three nodes and its timeline names it the suspect; no node is
// quarantined or demoted; every good task succeeds, and later work of
// the class runs on all three nodes.
func TestProcessesBadTasksBlameNoNode(t *testing.T) {
	s := newSite(t, "")
	ids := []string{"edge-1", "edge-2", "edge-3"}
	for _, id := range ids {
		s.agent(id, systemPath(), "-slots", "2", "-labels", "id="+id)
	}
	s.ready(ids...)
	three := 3
	task := func(name, script string) api.TaskSpec {
		return api.TaskSpec{Name: name, Class: "build", Command: []string{"sh", "-c", script}, MaxAttempts: &three}
	}
	var specs []api.TaskSpec
	for i := 0; i < 24; i++ {
		if i%6 == 2 {
			specs = append(specs, task(fmt.Sprintf("bad-%d", i), "echo broken input >&2; exit 3"))
			continue
		}
		specs = append(specs, task(fmt.Sprintf("good-%d", i), "exit 0"))
	}
	tasks := s.finished(s.submit(specs...), 120*time.Second)
	for _, tk := range tasks {
		bad := strings.HasPrefix(tk.Name, "bad-")
		switch {
		case bad && (tk.State != api.TaskFailed || len(tk.Attempts) != 3):
			t.Fatalf("bad task %s: %s after %d attempts", tk.ID, tk.State, len(tk.Attempts))
		case bad && !eventsSay(tk.Timeline, "blame", "the task is the suspect, not the nodes"):
			t.Fatalf("bad task %s's timeline does not blame it: %+v", tk.ID, tk.Timeline)
		case !bad && tk.State != api.TaskSucceeded:
			t.Fatalf("good task %s ended %s: %+v", tk.ID, tk.State, tk.Timeline)
		}
	}
	for _, id := range ids {
		if n := s.node(id); n.Quarantine != nil || n.Tier.Demotions != 0 {
			t.Fatalf("node %s judged for bad work: quarantine %+v, tier %+v", id, n.Quarantine, n.Tier)
		}
	}
	// Every node still takes the class.
	ran := map[string]bool{}
	var pinned []api.TaskSpec
	for _, id := range ids {
		sp := task("after-"+id, "exit 0")
		sp.RequiredLabels = map[string]string{"id": id}
		pinned = append(pinned, sp)
	}
	for _, tk := range s.finished(s.submit(pinned...), 60*time.Second) {
		if tk.State != api.TaskSucceeded {
			t.Fatalf("task %s on a node after the bad work: %s %+v", tk.ID, tk.State, tk.Timeline)
		}
		ran[tk.Attempts[len(tk.Attempts)-1].NodeID] = true
	}
	if len(ran) != 3 {
		t.Fatalf("later work of the class ran on %v, want all three nodes", ran)
	}
}

// A black hole for classes never seen before: an agent whose tasks
// cannot find sh (its PATH lacks it) fails every attempt in
// milliseconds. Tasks of four new classes are all done by the healthy
// nodes; the hole is quarantined by its third failure, and its built-in
// health check fails saying why, so the quarantine holds.
func TestProcessesNewClassBlackHoleIsCaught(t *testing.T) {
	s := newSite(t, `profiles {
  health_recheck = "500ms"
}
`)
	s.agent("good-1", systemPath(), "-slots", "2")
	s.agent("good-2", systemPath(), "-slots", "2")
	nosh := filepath.Join(s.base, "no-sh")
	if err := os.MkdirAll(nosh, 0o750); err != nil {
		t.Fatal(err)
	}
	s.agent("nosh", nosh, "-slots", "2")
	s.ready("good-1", "good-2", "nosh")
	three := 3
	var specs []api.TaskSpec
	for i := 0; i < 16; i++ {
		specs = append(specs, api.TaskSpec{Name: fmt.Sprintf("new-%d", i), Class: fmt.Sprintf("fresh-%d", i%4), Command: []string{"sh", "-c", "exit 0"}, MaxAttempts: &three})
	}
	for _, tk := range s.finished(s.submit(specs...), 120*time.Second) {
		if tk.State != api.TaskSucceeded || tk.Attempts[len(tk.Attempts)-1].NodeID == "nosh" {
			t.Fatalf("task %s: %s %+v", tk.ID, tk.State, tk.Timeline)
		}
	}
	n := s.node("nosh")
	failed := 0
	for _, a := range n.Attempts {
		if a.State == api.AttemptFailed {
			failed++
		}
	}
	if n.Quarantine == nil || failed == 0 || failed > 3+2 {
		// At most its two slots were filled before its first failure came
		// back; from then on it is on probation, one attempt at a time.
		t.Fatalf("the hole failed %d attempts; quarantine %+v", failed, n.Quarantine)
	}
	t.Logf("quarantined after %d failed attempts: %s", failed, n.Quarantine.Reason)
	if !Eventually(30*time.Second, func() bool {
		n = s.node("nosh")
		return n.HealthCheck != nil && n.HealthCheck.Answered > 0 && !n.HealthCheck.Passed
	}) {
		t.Fatalf("the built-in health check did not fail: %+v", n.HealthCheck)
	}
	if !strings.Contains(n.HealthCheck.Output, "a task's command cannot start: sh") {
		t.Fatalf("health check output %q", n.HealthCheck.Output)
	}
	if n.Quarantine == nil {
		t.Fatal("a failing check released the quarantine")
	}
}

// A hung node: its copy of the tool a class runs never returns, where the
// others' take a second. A speculative task that prefers the hung node
// goes there, is marked slow past 5× the class's median (the floor set to
// 2 s), gets a backup on another node that wins, and its hung attempt is
// cancelled; the node's events say slow. A plain task preferring it times
// out there and its retry goes elsewhere despite the preference.
func TestProcessesHungNodeIsFlaggedAndABackupWins(t *testing.T) {
	s := newSite(t, `profiles {
  slow_attempt_floor = "2s"
}
`)
	fast := filepath.Join(s.base, "tools-fast")
	script(t, filepath.Join(fast, "work"), "sleep 1")
	hung := filepath.Join(s.base, "tools-hung")
	script(t, filepath.Join(hung, "work"), "exec sleep 600")
	s.agent("fast-1", fast+":"+systemPath(), "-slots", "2", "-labels", "id=fast-1")
	s.agent("fast-2", fast+":"+systemPath(), "-slots", "2", "-labels", "id=fast-2")
	s.agent("hung", hung+":"+systemPath(), "-slots", "2", "-labels", "spot=cheap")
	s.ready("fast-1", "fast-2", "hung")
	three, timeout := 3, int64(8)
	task := func(name string) api.TaskSpec {
		return api.TaskSpec{Name: name, Class: "etl", Command: []string{"work"}, MaxAttempts: &three, TimeoutSeconds: &timeout}
	}
	// The class's median comes from the fast nodes.
	var warm []api.TaskSpec
	for i := 0; i < 4; i++ {
		sp := task(fmt.Sprintf("warm-%d", i))
		sp.RequiredLabels = map[string]string{"id": []string{"fast-1", "fast-2"}[i%2]}
		warm = append(warm, sp)
	}
	s.finished(s.submit(warm...), 60*time.Second)

	spec := task("speculative")
	spec.Speculative = true
	// Room for the backup to win on a loaded machine: the hung attempt
	// is marked slow at 5 s (five times the class's median), and its
	// backup must finish before this timeout ends the race another way.
	long := int64(30)
	spec.TimeoutSeconds = &long
	spec.PreferredLabels = map[string]string{"spot": "cheap"}
	plain := task("plain")
	plain.PreferredLabels = map[string]string{"spot": "cheap"}
	ids := s.submit(spec, plain)
	tasks := s.finished(ids, 90*time.Second)

	sp := tasks[0]
	if sp.State != api.TaskSucceeded || len(sp.Attempts) != 2 || sp.Attempts[0].NodeID != "hung" {
		t.Fatalf("speculative task: %s, attempts %+v", sp.State, sp.Attempts)
	}
	if a := sp.Attempts[0]; a.State != api.AttemptCancelled {
		t.Fatalf("the hung attempt is %s, want CANCELLED", a.State)
	}
	if b := sp.Attempts[1]; b.State != api.AttemptSucceeded || b.NodeID == "hung" {
		t.Fatalf("the backup: %+v", b)
	}
	if !eventsSay(sp.Timeline, "slow", "attempt 1 on hung has run") || !eventsSay(sp.Timeline, "", "finished first") {
		t.Fatalf("the timeline does not tell the race: %+v", sp.Timeline)
	}
	pl := tasks[1]
	if pl.State != api.TaskSucceeded || pl.Attempts[0].NodeID != "hung" || pl.Attempts[0].State != api.AttemptTimedOut {
		t.Fatalf("plain task: %s, attempts %+v", pl.State, pl.Attempts)
	}
	for _, a := range pl.Attempts[1:] {
		if a.NodeID == "hung" {
			t.Fatalf("a retry went back to the hung node: %+v", pl.Attempts)
		}
	}
	n := s.node("hung")
	if !eventsSay(n.Events, "slow", "has run") {
		t.Fatalf("the hung node's events do not say slow: %+v", n.Events)
	}
	// The cancelled attempt's process is stopped by its agent.
	if !Eventually(30*time.Second, func() bool {
		n := s.node("hung")
		return n.RunningAttempts == 0
	}) {
		t.Fatalf("the hung node still holds attempts: %+v", s.node("hung"))
	}
}

// A producer's node dies while its consumer is being placed elsewhere:
// the consumer's attempts cannot fetch the input, end as input
// unavailable and cost it none of its attempts; once the dead node is
// declared DOWN the producer stage re-runs on the other producer node,
// the consumer follows, and the job succeeds, its tasks' timelines
// saying why they waited.
func TestProcessesConsumerWaitsForALostProducer(t *testing.T) {
	s := newSite(t, `liveness {
  heartbeat_interval = "1s"
  leader_grace = "1s"
}
`)
	for id, role := range map[string]string{"prep-1": "prep", "prep-2": "prep", "infer": "infer"} {
		s.agent(id, systemPath(), "-slots", "2", "-labels", "role="+role)
	}
	s.ready("prep-1", "prep-2", "infer")
	ctx := context.Background()
	if _, err := s.cl.DrainNode(ctx, "infer", true); err != nil {
		t.Fatal(err)
	}
	on := func(role, script string) api.TaskSpec {
		sp := stageTask(script)
		sp.RequiredLabels = map[string]string{"role": role}
		return sp
	}
	res, err := s.cl.SubmitJob(ctx, api.JobSpec{Name: "lineage", Stages: []api.StageSpec{
		{Name: "acquire", Outputs: []string{"raw.bin"}, Task: on("prep", `printf 'frame-9' > raw.bin`)},
		{Name: "infer", DependsOn: []string{"acquire"}, Inputs: []string{"acquire.raw.bin"}, Outputs: []string{"labels.txt"},
			Task: on("infer", `printf 'owl:%s' "$(cat "$HERD_INPUTS/acquire/raw.bin")" > labels.txt`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	if !Eventually(60*time.Second, func() bool {
		j, _, err := s.cl.GetJob(ctx, res.ID, api.ReadOptions{})
		if err != nil || j.Stages[0].State != "SUCCEEDED" {
			return false
		}
		holder = j.Stages[0].Tasks[0].NodeID
		return true
	}) {
		t.Fatal("the producer never succeeded")
	}
	// The holder dies; the consumer is placed at once, while the holder
	// is not declared down yet.
	_ = s.agents[holder].Process.Signal(syscall.SIGKILL)
	_ = s.agents[holder].Wait() // gone, its data port with it
	if _, err := s.cl.DrainNode(ctx, "infer", false); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, s.cl, res.ID)
	if j.State != api.JobSucceeded {
		t.Fatalf("job %s: %+v", j.State, j.Timeline)
	}
	// The consumer placed while the holder was dead but not yet declared
	// so waited, its attempts free; the producer's re-run made the stage
	// a new generation of it, which ran.
	first, _, err := s.cl.GetTask(ctx, res.ID+".1.0", api.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !eventsSay(first.Timeline, "input_unavailable", "could not fetch an input from a live node") {
		t.Fatalf("the consumer never waited on the lost input (the scenario was not exercised): %+v", first.Timeline)
	}
	for _, id := range []string{first.ID, j.Stages[1].Tasks[0].ID} {
		tk, _, err := s.cl.GetTask(ctx, id, api.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range tk.Attempts {
			if a.State == api.AttemptFailed || a.State == api.AttemptTimedOut {
				t.Fatalf("consumer %s paid for the lost input: attempts %+v, timeline %+v", id, tk.Attempts, tk.Timeline)
			}
		}
	}
	if last, _, _ := s.cl.GetTask(ctx, j.Stages[1].Tasks[0].ID, api.ReadOptions{}); last.State != api.TaskSucceeded {
		t.Fatalf("the consumer that ran: %s", last.State)
	}
	if !eventsSay(j.Timeline, "", "no live node holds") {
		t.Fatalf("the job's timeline does not say why the producer re-ran: %+v", j.Timeline)
	}
}
