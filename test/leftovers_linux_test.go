package test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd/api"
)

// An agent killed outright (SIGKILL) together with its lease guard
// leaves its task running when no cgroup holds it. Started again on the same data directory, the agent
// kills what its earlier run left before it reports the attempt lost, so
// the run the cluster places next cannot overlap it.
func TestRestartedAgentKillsWhatItsKilledRunLeftRunning(t *testing.T) {
	bin := buildHerd(t)
	c := NewClusterWith(t, 3, Setup{CheckInvariants: true})
	cl := c.AllClient()
	var servers []string
	for _, r := range c.Replicas {
		servers = append(servers, r.Cfg.HTTPAddr)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "agent.log")
	start := func() *exec.Cmd {
		t.Helper()
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { log.Close() })
		cmd := exec.Command(bin, "agent", "-id", "edge-1", "-servers", strings.Join(servers, ","), "-data-dir", filepath.Join(dir, "edge-1"),
			"-slots", "1", "-limits", "none", "-log-level", "info")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- agent log ---\n%s", tail(b, 3000))
		}
	})
	agentProc := start()
	ctx := Ctx(t, 2*time.Minute)
	one := 1
	res, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: "loop", Command: []string{"sh", "-c", "while :; do sleep 0.05; done"}, MaxAttempts: &one})
	if err != nil {
		t.Fatal(err)
	}
	attempt := waitTaskState(t, cl, res.ID, api.TaskRunning).Attempts[0].ID
	var pid int
	if !Eventually(30*time.Second, func() bool { pid = processWithEnv("HERD_ATTEMPT_ID=" + attempt); return pid != 0 }) {
		t.Fatal("the attempt's process never showed up")
	}
	// Both the agent and its lease guard, which would otherwise stop the
	// task at once: what is left when both die together (an OOM kill of
	// each, a kill of everything). The agent is frozen first, so that it
	// cannot start its guard again, then the guard killed, then the
	// agent. (A guard merely stopped would not do: when its agent dies,
	// its process group is orphaned and the kernel continues it.)
	guard := guardOf(agentProc.Process.Pid)
	if guard == 0 {
		t.Fatal("the agent runs no lease guard")
	}
	if err := agentProc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !Eventually(10*time.Second, func() bool { return !alive(guard) }) {
		t.Fatal("the guard outlived its SIGKILL")
	}
	if err := agentProc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agentProc.Wait()
	if !alive(pid) {
		t.Fatalf("the task's process %d ended with its agent; the test needs it left running", pid)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	start()
	if !Eventually(60*time.Second, func() bool { return !alive(pid) }) {
		t.Fatalf("the restarted agent left process %d of its earlier run running", pid)
	}
	task := waitTaskState(t, cl, res.ID, api.TaskFailed)
	if a := task.Attempts[0]; a.State != api.AttemptLost || !timelineSays(task, "left running were killed") {
		t.Fatalf("the attempt ended %s; the timeline: %+v", a.State, task.Timeline)
	}
}

// processWithEnv is the pid of a process whose environment holds entry,
// or 0.
func processWithEnv(entry string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), []byte("\x00"+entry+"\x00")) {
			return pid
		}
	}
	return 0
}

// alive reports whether pid runs: it exists and is not a zombie (an
// orphan's reaper may take its time).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, ok := bytes.Cut(b, []byte(") "))
	return ok && len(rest) > 0 && rest[0] != 'Z'
}
