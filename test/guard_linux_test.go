//go:build linux

package test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"herd/api"
	"herd/spec"
)

// Real processes at liveness timings scaled down tenfold (500 ms
// heartbeats stretched to at most 1 s, DOWN after 5 missed: a lease of
// 2.5 s to 5 s), agents with the lease guard that `herd agent` runs.
const guardSiteConf = `liveness {
  heartbeat_interval = "500ms"
  max_heartbeat_interval = "1s"
  leader_grace = "1s"
}
`

func guardAgentFlags(extra ...string) []string {
	return append([]string{"-heartbeat-interval", "500ms", "-no-bench", "-limits", "none"}, extra...)
}

// restart starts agent id again on its data directory, its earlier
// process gone, with its log appended to.
func (s *site) restart(id string, args ...string) {
	s.t.Helper()
	log, err := os.OpenFile(filepath.Join(s.base, id+".log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { log.Close() })
	all := append([]string{"agent", "-id", id, "-servers", strings.Join(s.join, ","), "-data-dir", filepath.Join(s.base, id),
		"-log-level", "info"}, args...)
	cmd := exec.Command(s.bin, all...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start agent %s: %v", id, err)
	}
	s.agents[id] = cmd
}

// serveImage serves img from a registry on loopback and returns its
// reference.
func serveImage(t *testing.T, img v1.Image) string {
	t.Helper()
	regsrv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(regsrv.Close)
	return pushImage(t, strings.TrimPrefix(regsrv.URL, "http://"), "test/guard:1", img)
}

// guardOf is the pid of agent pid's lease guard, or 0.
func guardOf(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 2 || f[1] != fmt.Sprint(pid) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasSuffix(string(cmdline), "\x00agent-guard\x00") {
			var child int
			fmt.Sscan(e.Name(), &child)
			return child
		}
	}
	return 0
}

func (s *site) task(id string) api.Task {
	s.t.Helper()
	task, _, err := s.cl.GetTask(context.Background(), id, api.ReadOptions{Consistent: true})
	if err != nil {
		s.t.Fatalf("task %s: %v", id, err)
	}
	return task
}

// An agent stopped with SIGSTOP (a hung box, a debugger, a swapped-out
// board) runs no code, so its lease guard stops its attempt when the
// lease ends: the run the leader places elsewhere afterwards never
// overlaps it, although the agent never got to stop it. Resumed, the
// agent reports the attempt LOST with the guard's reason, which the
// cluster records as a stale report, and nothing else happens.
func TestProcessesStoppedAgentsAttemptEndsBeforeItRunsElsewhere(t *testing.T) {
	s := newSite(t, guardSiteConf)
	s.agent("stopped", systemPath(), guardAgentFlags("-slots", "1", "-labels", "first=yes")...)
	s.agent("other", systemPath(), guardAgentFlags("-slots", "1")...)
	s.ready("stopped", "other")
	file := filepath.Join(t.TempDir(), "ticks")
	ts := tickerSpec("twice", file)
	ts.PreferredLabels = map[string]string{"first": "yes"}
	id := s.submit(ts)[0]
	var first api.Attempt
	if !Eventually(60*time.Second, func() bool {
		task := s.task(id)
		if len(task.Attempts) == 0 || task.Attempts[0].State != api.AttemptRunning {
			return false
		}
		first = task.Attempts[0]
		_, ticked := runIntervals(t, file)[first.ID]
		return ticked
	}) {
		t.Fatal("the first run never ticked")
	}
	if first.NodeID != "stopped" {
		t.Fatalf("the task started on %s", first.NodeID)
	}
	stopped := s.agents["stopped"]
	if err := stopped.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopped.Process.Signal(syscall.SIGCONT) })
	second := awaitRunsApart(t, 90*time.Second, func() (api.Task, bool) { return s.task(id), true }, file, first, "other")
	if got := s.task(id).Attempts[0].State; got != api.AttemptLost {
		t.Fatalf("the first attempt is %s, want LOST", got)
	}

	if err := stopped.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !Eventually(60*time.Second, func() bool {
		return timelineSays(s.task(id), "by the agent's lease guard: the lease ran out while the agent gave no sign of life")
	}) {
		t.Fatalf("the timeline does not say the guard stopped the first run: %+v", s.task(id).Timeline)
	}
	// Nothing else happens: the second run goes on alone, the first
	// attempt stays LOST, no third attempt.
	before := runIntervals(t, file)[second.ID][1]
	if !Eventually(10*time.Second, func() bool { return runIntervals(t, file)[second.ID][1] > before }) {
		t.Fatal("the second run stopped ticking after the first agent resumed")
	}
	task := s.task(id)
	if len(task.Attempts) != 2 || task.Attempts[0].State != api.AttemptLost || task.Attempts[1].State != api.AttemptRunning {
		t.Fatalf("after the resume: %+v", task.Attempts)
	}
	if n := len(runIntervals(t, file)); n != 2 {
		t.Fatalf("%d attempts ticked, want 2", n)
	}
}

// An agent killed outright (SIGKILL, an OOM kill, a crash) takes its
// attempts with it: its lease guard (started again by the agent if it
// dies itself) stops them at once rather than leave them running as
// orphans, and the restarted agent reports them LOST with the reason.
// A task that opted into keep_running is spared until the agent starts
// again, which stops what its earlier run left.
func TestProcessesKilledAgentsAttemptsEndWithIt(t *testing.T) {
	s := newSite(t, guardSiteConf)
	s.agent("edge-1", systemPath(), guardAgentFlags("-slots", "2")...)
	s.ready("edge-1")
	id := s.submit(shSpec("orphan", "sleep 600 & wait"))[0]
	task := waitTaskState(t, s.cl, id, api.TaskRunning)
	attempt := task.Attempts[0].ID
	var pid int
	if !Eventually(30*time.Second, func() bool { pid = processWithEnv("HERD_ATTEMPT_ID=" + attempt); return pid != 0 }) {
		t.Fatal("the attempt's process never showed up")
	}
	// A task that opted into running on when cut off is spared.
	keepSpec := shSpec("kept", "sleep 600 & wait")
	keepSpec.OnDisconnect = spec.OnDisconnectKeepRunning
	keptID := s.submit(keepSpec)[0]
	kept := waitTaskState(t, s.cl, keptID, api.TaskRunning).Attempts[0].ID
	var keptPid int
	if !Eventually(30*time.Second, func() bool { keptPid = processWithEnv("HERD_ATTEMPT_ID=" + kept); return keptPid != 0 }) {
		t.Fatal("the kept attempt's process never showed up")
	}
	t.Cleanup(func() { _ = syscall.Kill(keptPid, syscall.SIGKILL) })
	agentProc := s.agents["edge-1"]
	// A guard that dies is started again, and the new one does the work.
	first := guardOf(agentProc.Process.Pid)
	if first == 0 {
		t.Fatal("the agent runs no lease guard")
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !Eventually(10*time.Second, func() bool { g := guardOf(agentProc.Process.Pid); return g != 0 && g != first }) {
		t.Fatal("the agent did not start its lease guard again")
	}
	killed := time.Now()
	if err := agentProc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agentProc.Wait()
	// The lease is at most 5 s at these timings; the guard acts at once.
	if !Eventually(5*time.Second, func() bool { return !alive(pid) && processWithEnv("HERD_ATTEMPT_ID="+attempt) == 0 }) {
		t.Fatalf("the task's process %d outlived its killed agent", pid)
	}
	t.Logf("the attempt's processes were gone %v after the agent was killed", time.Since(killed).Round(time.Millisecond))
	if !alive(keptPid) {
		t.Fatal("the guard stopped a task that opted into keep_running")
	}
	s.restart("edge-1", guardAgentFlags("-slots", "2")...)
	// What the killed run left of the kept task, the restarted agent stops.
	if !Eventually(60*time.Second, func() bool { return !alive(keptPid) }) {
		t.Fatal("the restarted agent left the kept task of its earlier run running")
	}
	if !Eventually(60*time.Second, func() bool {
		task = s.task(id)
		return task.Attempts[0].State == api.AttemptLost && timelineSays(task, "the agent exited without stopping it")
	}) {
		t.Fatalf("the restarted agent did not report the attempt LOST with the guard's reason: %+v %+v", task.Attempts, task.Timeline)
	}
}

// The same for a container task: the guard stops the container's
// processes (its first process, whose end ends its PID namespace).
func TestProcessesKilledAgentsContainerEndsWithIt(t *testing.T) {
	bb := staticBusybox(t)
	if os.Geteuid() != 0 {
		t.Skip("containers need root (the agent runs them with the OCI runtime as root)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("no runc to run containers with (Debian: apt-get install runc)")
	}
	s := newSite(t, guardSiteConf)
	ref := serveImage(t, busyboxImage(t, bb, "guard-test"))
	s.agent("edge-1", systemPath(), guardAgentFlags("-slots", "1")...)
	s.ready("edge-1")
	if n := s.node("edge-1"); len(n.Capabilities["oci"]) == 0 {
		t.Skipf("the agent runs no containers here: %+v", n.Conditions)
	}
	id := s.submit(ociSpec("contained", ref, "sleep 600"))[0]
	task := waitTaskState(t, s.cl, id, api.TaskRunning)
	attempt := task.Attempts[0].ID
	var pid int
	if !Eventually(60*time.Second, func() bool { pid = processWithEnv("HERD_ATTEMPT_ID=" + attempt); return pid != 0 }) {
		t.Fatal("the container's process never showed up")
	}
	agentProc := s.agents["edge-1"]
	if err := agentProc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agentProc.Wait()
	if !Eventually(10*time.Second, func() bool { return processWithEnv("HERD_ATTEMPT_ID="+attempt) == 0 }) {
		t.Fatalf("the container's process %d outlived its killed agent", pid)
	}
	s.restart("edge-1", guardAgentFlags("-slots", "1")...)
	if !Eventually(60*time.Second, func() bool { return s.task(id).Attempts[0].State == api.AttemptLost }) {
		t.Fatalf("the restarted agent did not report the attempt LOST: %+v", s.task(id).Attempts)
	}
}

// An agent restarted under three running tasks, once on purpose (SIGTERM,
// as systemd stops it) and once killed outright: each time every attempt
// that ran ends exactly once, LOST with the reason, none of its processes
// is left, the tasks run again as new attempts, and no two attempts of a
// task ever run at once.
func TestProcessesRestartedAgentEndsEachAttemptOnce(t *testing.T) {
	s := newSite(t, guardSiteConf)
	flags := guardAgentFlags("-slots", "3")
	s.agent("edge-1", systemPath(), flags...)
	s.ready("edge-1")
	file := filepath.Join(t.TempDir(), "ticks")
	var ids []string
	for i := range 3 {
		ts := tickerSpec(fmt.Sprintf("restart-%d", i), file)
		ts.MaxAttempts = ptrTo(5)
		ids = append(ids, s.submit(ts)...)
	}
	// runningAttempts waits for attempt number n of every task to run and
	// tick, and returns their ids.
	runningAttempts := func(n int) []string {
		t.Helper()
		var out []string
		for _, id := range ids {
			var at api.Attempt
			if !Eventually(90*time.Second, func() bool {
				task := s.task(id)
				if len(task.Attempts) < n || task.Attempts[n-1].State != api.AttemptRunning {
					return false
				}
				at = task.Attempts[n-1]
				_, ticked := runIntervals(t, file)[at.ID]
				return ticked
			}) {
				t.Fatalf("attempt %d of task %s never ran: %+v", n, id, s.task(id).Attempts)
			}
			out = append(out, at.ID)
		}
		return out
	}
	for round, how := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		old := runningAttempts(round + 1)
		proc := s.agents["edge-1"]
		if err := proc.Process.Signal(how); err != nil {
			t.Fatal(err)
		}
		_ = proc.Wait()
		for _, at := range old {
			if !Eventually(10*time.Second, func() bool { return processWithEnv("HERD_ATTEMPT_ID="+at) == 0 }) {
				t.Fatalf("after %v: attempt %s still runs with its agent gone", how, at)
			}
		}
		s.restart("edge-1", flags...)
		runningAttempts(round + 2)
		for i, id := range ids {
			task := s.task(id)
			at := task.Attempts[round]
			if at.ID != old[i] || at.State != api.AttemptLost {
				t.Fatalf("after %v: attempt %d of %s: %+v", how, round+1, id, at)
			}
			var ends []string
			for _, e := range task.Timeline {
				// The attempt's end, not what its agent said of it later.
				if e.Kind == "finished" && strings.HasPrefix(e.Message, fmt.Sprintf("attempt %d on edge-1 ", round+1)) {
					ends = append(ends, e.Message)
				}
			}
			if len(ends) != 1 || !strings.Contains(ends[0], "LOST: ") {
				t.Fatalf("after %v: attempt %d of %s ended %d times: %+v", how, round+1, id, len(ends), task.Timeline)
			}
			// Stopped on purpose, the agent stopped them itself; killed,
			// its guard did. The restarted agent says which, unless the
			// node was declared DOWN first (a slow restart on a loaded
			// machine), whose reclaim then ended them.
			want := map[syscall.Signal]string{syscall.SIGTERM: "the agent restarted; the process is gone", syscall.SIGKILL: "the agent exited without stopping it"}[how]
			if !strings.Contains(ends[0], want) && !strings.Contains(ends[0], "reclaimed: node down") {
				t.Fatalf("after %v: %q says neither %q nor that the node was declared down", how, ends[0], want)
			}
			t.Logf("after %v: %s", how, ends[0])
		}
	}
	runs := runIntervals(t, file)
	for _, id := range ids {
		task := s.task(id)
		for i := 1; i < len(task.Attempts); i++ {
			prev, next := runs[task.Attempts[i-1].ID], runs[task.Attempts[i].ID]
			if prev[1] >= next[0] {
				t.Fatalf("task %s: attempt %d ran on %v into attempt %d", id, i, time.Duration(prev[1]-next[0]), i+1)
			}
		}
	}
}
