package agent

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestAwaitExitReturnsOnExitWithoutReaping checks that awaitExit returns
// only once the process has exited, and leaves it for Wait to reap with
// its exit status.
func TestAwaitExitReturnsOnExitWithoutReaping(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read line; exit 3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		awaitExit(cmd.Process.Pid)
	}()
	// The shell waits for its line: awaitExit must still be waiting.
	if state := procState(t, cmd.Process.Pid); state == "Z" {
		t.Fatalf("the shell exited before its input came")
	}
	select {
	case <-done:
		t.Fatalf("awaitExit returned while the process runs (state %s)", procState(t, cmd.Process.Pid))
	default:
	}
	stdin.Close()
	<-done
	// Exited, not reaped: a zombie until Wait.
	if state := procState(t, cmd.Process.Pid); state != "Z" {
		t.Fatalf("after awaitExit the process is in state %q, want Z (exited, not reaped)", state)
	}
	if code := exitCodeOf(t, cmd.Wait()); code != 3 {
		t.Fatalf("Wait after awaitExit: exit status %d, want 3", code)
	}
}

// TestAwaitExitOfAReapedProcessReturns checks that awaitExit does not
// hang on a process that is already gone.
func TestAwaitExitOfAReapedProcessReturns(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	awaitExit(cmd.Process.Pid)
}

// procState is the state letter of /proc/PID/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("read the process's state: %v", err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// TestWaitProcessReapsLoneAndConcurrentWaits checks that waitProcess
// returns each process's own exit status, waited for alone or beside
// others.
func TestWaitProcessReapsLoneAndConcurrentWaits(t *testing.T) {
	lone := exec.Command("sh", "-c", "exit 7")
	if err := lone.Start(); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(t, waitProcess(lone)); code != 7 {
		t.Fatalf("a lone wait: exit status %d, want 7", code)
	}
	const n = 4
	var (
		cmds   [n]*exec.Cmd
		inputs [n]io.WriteCloser
		errs   [n]chan error
	)
	for i := range n {
		cmds[i] = exec.Command("sh", "-c", "read line; exit "+strconv.Itoa(i+1))
		var err error
		if inputs[i], err = cmds[i].StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- waitProcess(cmds[i]) }()
	}
	// Every process waits for its line: the waits overlap, and end in
	// the reverse order of their start.
	for i := n - 1; i >= 0; i-- {
		inputs[i].Close()
		if code := exitCodeOf(t, <-errs[i]); code != i+1 {
			t.Fatalf("wait %d beside others: exit status %d, want %d", i, code, i+1)
		}
	}
}

// exitCodeOf is the exit status in a Wait's error (0 for none).
func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("wait: %v", err)
	}
	return exit.ExitCode()
}
