package agent

import (
	"errors"
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
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait after awaitExit: %v, want exit status 3", err)
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
