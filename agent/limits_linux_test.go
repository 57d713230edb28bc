package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd/api"

	"golang.org/x/sys/unix"
)

// v1ForTest returns a cgroup v1 limiter, or skips where none can be made
// (not root, or no v1 hierarchies).
func v1ForTest(t *testing.T) *cgroupV1 {
	t.Helper()
	l, err := newCgroupV1()
	if err != nil {
		t.Skipf("no cgroup v1 here: %v", err)
	}
	c := l.(*cgroupV1)
	t.Cleanup(c.drain)
	return c
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func runIn(t *testing.T, h limitHandle, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := h.Launch(cmd); err != nil {
		t.Fatal(err)
	}
	if err := h.Started(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// A v1 cgroup pair is reused by the next attempt once its processes are
// gone, with every limit rewritten (none left over from the last one).
func TestCgroupV1GroupsAreReusedWithFreshLimits(t *testing.T) {
	c := v1ForTest(t)
	h, err := c.Prepare("a1", api.Resources{MemoryMB: 64, CPUMillis: 500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := h.(*cgroupV1Handle)
	if got := readTrim(t, filepath.Join(first.mem, "memory.limit_in_bytes")); got != "67108864" {
		t.Fatalf("memory limit %s, want 64 MiB", got)
	}
	if got := readTrim(t, filepath.Join(first.cpu, "cpu.cfs_quota_us")); got != "50000" {
		t.Fatalf("cpu quota %s, want 50000", got)
	}
	if err := runIn(t, h, "true").Wait(); err != nil {
		t.Fatal(err)
	}
	h.KillAll()
	if h.OOMKilled() {
		t.Fatal("a process that exited normally was reported OOM-killed")
	}
	h.Release()

	h2, err := c.Prepare("a2", api.Resources{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := h2.(*cgroupV1Handle)
	defer second.Release()
	if second.v1Group != first.v1Group {
		t.Fatalf("the idle group %s was not reused (got %s)", first.mem, second.mem)
	}
	if got := readTrim(t, filepath.Join(second.cpu, "cpu.cfs_quota_us")); got != "-1" {
		t.Fatalf("a reused group kept a cpu quota: %s", got)
	}
	if got := readTrim(t, filepath.Join(second.mem, "memory.limit_in_bytes")); got == "67108864" {
		t.Fatal("a reused group kept the last attempt's memory limit")
	}
}

// A group that still holds a process when released (one that escaped its
// process group) is not handed to the next attempt.
func TestCgroupV1GroupWithAStragglerIsNotReused(t *testing.T) {
	c := v1ForTest(t)
	h, err := c.Prepare("a1", api.Resources{MemoryMB: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := runIn(t, h, "sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & exit 0")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(h.(*cgroupV1Handle).mem, "cgroup.procs")
	deadline := time.Now().Add(5 * time.Second)
	for readTrim(t, procs) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the straggler never showed in the cgroup")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.Release() // the straggler still runs
	if n := len(c.idle); n != 0 {
		t.Fatalf("a group holding a process went back to the pool (%d idle)", n)
	}
	h.KillAll()
	g := h.(*cgroupV1Handle).v1Group
	for readTrim(t, procs) != "" && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	c.discard(g) // what Release could not remove while the straggler ran
	if _, err := os.Stat(g.mem); !os.IsNotExist(err) {
		t.Errorf("the straggler's cgroup %s is still there: %v", g.mem, err)
	}
}

// A reused group counts OOM kills from where the last attempt left it:
// an attempt killed by its memory limit is reported so, and the next one
// in the same group, which exits normally, is not; limits change with
// each attempt's request and are written only when they differ.
func TestCgroupV1ReuseKeepsOOMCountsAndLimitsStraight(t *testing.T) {
	c := v1ForTest(t)
	run := func(res api.Resources, script string) (*cgroupV1Handle, bool) {
		t.Helper()
		h, err := c.Prepare("a", res, nil)
		if err != nil {
			t.Fatal(err)
		}
		cmd := runIn(t, h, "sh", "-c", script)
		_ = cmd.Wait()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		h.KillAll()
		oom := h.OOMKilled()
		h.Release()
		return h.(*cgroupV1Handle), oom
	}
	// tail keeps the last lines of a stream without newlines: all of it.
	hog, oom := run(api.Resources{MemoryMB: 16}, "head -c 400000000 /dev/zero | tail >/dev/null")
	if !oom {
		t.Skip("the memory hog was not OOM-killed (swap without memsw accounting?)")
	}
	next, oom := run(api.Resources{MemoryMB: 16}, "true")
	if next.v1Group != hog.v1Group {
		t.Fatalf("the idle group was not reused")
	}
	if oom {
		t.Fatal("an attempt after an OOM-killed one in the same group was reported OOM-killed")
	}
	for _, step := range []struct {
		res        api.Resources
		mem, quota string
	}{
		{api.Resources{MemoryMB: 32, CPUMillis: 250}, "33554432", "25000"},
		{api.Resources{MemoryMB: 32, CPUMillis: 250}, "33554432", "25000"},
		{api.Resources{CPUMillis: 1500}, "", "150000"},
		{api.Resources{MemoryMB: 16}, "16777216", "-1"},
	} {
		h, err := c.Prepare("a", step.res, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := h.(*cgroupV1Handle)
		if g.v1Group != hog.v1Group {
			t.Fatalf("the idle group was not reused")
		}
		mem := readTrim(t, filepath.Join(g.mem, "memory.limit_in_bytes"))
		if step.mem != "" && mem != step.mem || step.mem == "" && mem == "33554432" {
			t.Errorf("%+v: memory limit %s, want %s", step.res, mem, step.mem)
		}
		if quota := readTrim(t, filepath.Join(g.cpu, "cpu.cfs_quota_us")); quota != step.quota {
			t.Errorf("%+v: cpu quota %s, want %s", step.res, quota, step.quota)
		}
		h.Release()
	}
}

// herd's v1 cpu group weighs as many busy processes as the machine has
// CPUs: at the default weight, busy processes outside it hold the tasks'
// forks back for seconds.
func TestCgroupV1TasksWeighTheMachinesCPUs(t *testing.T) {
	c := v1ForTest(t)
	want := strconv.Itoa(runtime.NumCPU() * 1024)
	if got := readTrim(t, filepath.Join(c.cpuRoot, "cpu.shares")); got != want {
		t.Fatalf("cpu.shares of %s is %s, want %s", c.cpuRoot, got, want)
	}
}

// A new limiter removes the empty pooled groups of agents that no longer
// run, and keeps those of a running one and any group still holding a
// process.
func TestCgroupV1RemovesTheGroupsOfDeadAgents(t *testing.T) {
	c := v1ForTest(t)
	// A pid that is surely dead: a child that has exited and been reaped.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	// A live one that is not this process: a sleeping child.
	alive := exec.Command("sleep", "60")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alive.Process.Kill(); _ = alive.Wait() })
	deadEmpty := fmt.Sprintf("pool-%d-1-1", dead)
	deadBusy := fmt.Sprintf("pool-%d-1-2", dead)
	liveEmpty := fmt.Sprintf("pool-%d-1-1", alive.Process.Pid)
	for _, name := range []string{deadEmpty, deadBusy, liveEmpty} {
		for _, root := range []string{c.memRoot, c.cpuRoot} {
			if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(filepath.Join(root, name)) })
		}
	}
	// A leftover process of the dead agent still sits in one group.
	left := exec.Command("sleep", "60")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = left.Process.Kill(); _ = left.Wait() })
	if err := os.WriteFile(filepath.Join(c.memRoot, deadBusy, "cgroup.procs"), []byte(strconv.Itoa(left.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	again := v1ForTest(t)
	exists := func(root, name string) bool { _, err := os.Stat(filepath.Join(root, name)); return err == nil }
	if exists(again.memRoot, deadEmpty) || exists(again.cpuRoot, deadEmpty) {
		t.Fatal("the dead agent's empty group was kept")
	}
	if !exists(again.memRoot, deadBusy) {
		t.Fatal("a group still holding a process was removed")
	}
	if !exists(again.memRoot, liveEmpty) || !exists(again.cpuRoot, liveEmpty) {
		t.Fatal("a running agent's group was removed")
	}
}

// The thread a v1 launch moves into an attempt's cgroups is never the
// process's main thread, whose memory group the whole agent's memory is
// charged to: landing on it, the launch hands its work to another
// thread. The first thread asked plays the main thread here.
func TestLockOffMainThreadHandsOverFromTheMainThread(t *testing.T) {
	orig := onMainThread
	t.Cleanup(func() { onMainThread = orig })
	var mu sync.Mutex
	var asked []int
	onMainThread = func() bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, unix.Gettid())
		return len(asked) == 1
	}
	ran := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lockOffMainThread(func() {
			ran <- unix.Gettid()
			runtime.UnlockOSThread()
		})
	}()
	<-done
	got := <-ran
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] == asked[1] || got != asked[1] {
		t.Fatalf("threads asked %v, the work ran on %d: want it on the second, another thread than the first", asked, got)
	}
}
