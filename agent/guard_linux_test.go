package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// guardFixture is a guard run in the test's process on a pipe, and the
// "attempts" it guards: real processes carrying the HERD_* variables an
// agent gives its tasks.
type guardFixture struct {
	t       *testing.T
	dir     string
	cfg     guardConfig
	w       io.WriteCloser
	done    chan error
	started []*exec.Cmd
}

func newGuardFixture(t *testing.T) *guardFixture {
	t.Helper()
	dir := t.TempDir()
	f := &guardFixture{t: t, dir: dir, done: make(chan error, 1), cfg: guardConfig{
		Node: "guarded-" + filepath.Base(dir), DataDir: dir, WorkRoot: filepath.Join(dir, "work"),
		AgentAddr: "unix:" + filepath.Join(dir, "agent.sock"), AgentGroup: syscall.Getpgrp(),
	}}
	if err := os.MkdirAll(f.cfg.WorkRoot, 0o750); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	go func() { f.done <- RunGuard(r, hclog.NewNullLogger()); r.Close() }()
	line, err := f.cfg.line()
	if err != nil {
		t.Fatal(err)
	}
	f.send(line)
	t.Cleanup(func() {
		_ = w.Close()
		for _, c := range f.started {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	})
	return f
}

func (f *guardFixture) send(line string) {
	f.t.Helper()
	if _, err := io.WriteString(f.w, line); err != nil {
		f.t.Fatal(err)
	}
}

// attempt starts a process group for attempt id that runs until killed,
// its child included, ignoring SIGTERM when stubborn.
func (f *guardFixture) attempt(id string, stubborn bool) *exec.Cmd {
	f.t.Helper()
	script := "sleep 600 & wait"
	if stubborn {
		script = "trap '' TERM; sleep 600 & wait; wait"
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = f.cfg.WorkRoot
	cmd.Env = append(os.Environ(), "HERD_NODE_ID="+f.cfg.Node, "HERD_ATTEMPT_ID="+id, "HERD_AGENT_ADDR="+f.cfg.AgentAddr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.started = append(f.started, cmd)
	return cmd
}

// ended waits for cmd to exit and returns the signal that ended it.
func ended(t *testing.T, cmd *exec.Cmd, within time.Duration) syscall.Signal {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("process %d still runs after %v", cmd.Process.Pid, within)
	}
	sig, _ := signalled(cmd.ProcessState)
	return sig
}

func running(cmd *exec.Cmd) bool {
	return syscall.Kill(cmd.Process.Pid, 0) == nil && !exited(cmd.Process.Pid)
}

// exited reports a zombie: the process ended and waits to be reaped.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func (f *guardFixture) state(deadline int64, ttl, grace, margin time.Duration, keep ...string) {
	f.t.Helper()
	f.send(guardState{deadline: deadline, ttl: ttl, grace: grace, margin: margin, keep: keep}.line())
}

// When the lease runs out unrenewed, the guard stops the attempts itself
// (SIGTERM, then SIGKILL for one that ignores it) before the lease ends,
// records why for each, and spares the attempts kept on a disconnect.
func TestGuardStopsAttemptsWhenTheLeaseRunsOut(t *testing.T) {
	f := newGuardFixture(t)
	polite := f.attempt("a-polite", false)
	stubborn := f.attempt("a-stubborn", true)
	kept := f.attempt("a-kept", false)
	ttl, grace := 800*time.Millisecond, 200*time.Millisecond
	deadline := monoNow() + int64(ttl)
	f.state(deadline, ttl, grace, 20*time.Millisecond, "a-kept")
	if sig := ended(t, polite, 10*time.Second); sig != syscall.SIGTERM {
		t.Errorf("the attempt that heeds SIGTERM ended by %v", sig)
	}
	if sig := ended(t, stubborn, 10*time.Second); sig != syscall.SIGKILL {
		t.Errorf("the attempt that ignores SIGTERM ended by %v", sig)
	}
	if late := monoNow() - deadline; late > 0 {
		// The kill pass runs before the deadline; only a machine too
		// loaded to run the guard on time sees it after.
		t.Logf("the stubborn attempt was reaped %v after the lease ended", time.Duration(late))
	}
	if !running(kept) {
		t.Error("the guard stopped an attempt kept running on a disconnect")
	}
	for _, id := range []string{"a-polite", "a-stubborn"} {
		why := takeFenceRecord(f.dir, id)
		if !strings.Contains(why, "by the agent's lease guard: the lease ran out while the agent gave no sign of life") {
			t.Errorf("attempt %s: the record says %q", id, why)
		}
	}
	if why := takeFenceRecord(f.dir, "a-kept"); why != "" {
		t.Errorf("the kept attempt has a record: %q", why)
	}
}

// A renewal pushes the guard's deadline on: nothing is stopped while the
// lease keeps being renewed, and a goodbye ends the guard with the
// attempts untouched.
func TestGuardLeavesAttemptsAloneWhileRenewedAndAfterGoodbye(t *testing.T) {
	f := newGuardFixture(t)
	cmd := f.attempt("a-1", false)
	ttl := 300 * time.Millisecond
	until := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(until) {
		f.state(monoNow()+int64(ttl), ttl, 50*time.Millisecond, 10*time.Millisecond)
		time.Sleep(ttl / 5)
	}
	if !running(cmd) {
		t.Fatal("the guard stopped an attempt whose lease was being renewed")
	}
	f.state(monoNow()+int64(ttl), ttl, 50*time.Millisecond, 10*time.Millisecond)
	f.send("bye\n")
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not exit on goodbye")
	}
	time.Sleep(2 * ttl) // past the deadline the guard was last told of
	if !running(cmd) {
		t.Fatal("a guard that was told goodbye stopped an attempt")
	}
}

// The agent's pipe closing without a goodbye is its death: the guard
// stops its attempts at once, whatever is left of the lease, and exits.
// Processes of another node, or of an agent with another work root, are
// not its own.
func TestGuardStopsAttemptsWhenTheAgentDies(t *testing.T) {
	f := newGuardFixture(t)
	mine := f.attempt("a-mine", false)
	stranger := exec.Command("sh", "-c", "sleep 600")
	stranger.Dir = t.TempDir()
	stranger.Env = append(os.Environ(), "HERD_NODE_ID="+f.cfg.Node, "HERD_ATTEMPT_ID=a-other-agent")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	f.started = append(f.started, stranger)
	f.state(monoNow()+int64(time.Hour), time.Hour, 100*time.Millisecond, 10*time.Millisecond)
	_ = f.w.Close()
	if sig := ended(t, mine, 10*time.Second); sig != syscall.SIGTERM {
		t.Errorf("the attempt ended by %v", sig)
	}
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not exit once its agent was gone")
	}
	if !running(stranger) {
		t.Error("the guard stopped a process of another agent")
	}
	if why := takeFenceRecord(f.dir, "a-mine"); !strings.Contains(why, "the agent exited without stopping it") {
		t.Errorf("the record says %q", why)
	}
}

func TestGuardStateLineRoundTrips(t *testing.T) {
	s := guardState{deadline: 123456789, ttl: 25 * time.Second, grace: 3 * time.Second, margin: 500 * time.Millisecond, keep: []string{"a", "b"}}
	fields := strings.Fields(s.line())
	got, err := parseGuardState(fields[1:])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(s) {
		t.Fatalf("%+v became %+v", s, got)
	}
	for _, bad := range []string{"state 1 2 3", "state x 2 3 4 -", "state -1 2 3 4 -"} {
		if _, err := parseGuardState(strings.Fields(bad)[1:]); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

// With cgroup v1 the agent's launching thread sits in an attempt's groups
// for a moment, so a group's process list can name the agent: the guard
// never takes the agent (nor itself) for an attempt, whatever the groups
// say, and still takes the other processes they name.
func TestGuardNeverTargetsTheAgent(t *testing.T) {
	dir := t.TempDir()
	grp := filepath.Join(dir, "pool-1")
	if err := os.MkdirAll(grp, 0o755); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	agentPid := os.Getppid() // any live process other than this one stands for the agent
	procs := fmt.Sprintf("%d\n%d\n%d\n", agentPid, os.Getpid(), other.Process.Pid)
	if err := os.WriteFile(filepath.Join(grp, "cgroup.procs"), []byte(procs), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := scanGuarded(guardConfig{Node: "edge-1", AgentPID: agentPid, Cgroups: []guardCgroup{{Dir: dir}}})
	if len(targets) != 1 || targets[0].pid != other.Process.Pid {
		t.Fatalf("targets %+v: want only pid %d (the agent %d and the guard %d are never targets)", targets, other.Process.Pid, agentPid, os.Getpid())
	}
}
