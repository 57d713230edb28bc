package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// startSleeper runs a real long process as an earlier run of an agent
// would have left it: in its own process group, with the node's and the
// attempt's ids in its environment, working in dir.
func startSleeper(t *testing.T, node, attempt, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HERD_NODE_ID=" + node, "HERD_ATTEMPT_ID=" + attempt}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

func killedBySignal(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// The processes an earlier run left are killed, with their group: one
// still working under the agent's work directory, and one elsewhere whose
// attempt the cluster lists as running here. Another node's, and this
// node id's outside the work directory for an attempt not listed (another
// agent's with the same id), are left alone.
func TestLeftoverProcessesOfAnEarlierRunAreKilled(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	inside, elsewhere := filepath.Join(work, "attempt-1"), filepath.Join(root, "elsewhere")
	for _, d := range []string{inside, elsewhere} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	node := "leftover-test-" + filepath.Base(root)
	underWork := startSleeper(t, node, "a-work", inside)
	listedOne := startSleeper(t, node, "a-listed", elsewhere)
	otherNode := startSleeper(t, node+"-other", "a-other", inside)
	notOurs := startSleeper(t, node, "a-stranger", elsewhere)

	found := killLeftovers(node, work, map[string]bool{"a-listed": true})
	if found["a-work"] != 1 || found["a-listed"] != 1 || len(found) != 2 {
		t.Fatalf("found %v, want a-work and a-listed once each", found)
	}
	for name, cmd := range map[string]*exec.Cmd{"under the work directory": underWork, "listed": listedOne} {
		if !killedBySignal(t, cmd) {
			t.Errorf("the process %s was not killed", name)
		}
	}
	for name, cmd := range map[string]*exec.Cmd{"of another node": otherNode, "of another agent with the same id": notOurs} {
		// Not reaped if it still runs; a killed one would be.
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); err != nil || pid != 0 {
			t.Errorf("the process %s ended (%v, %v)", name, ws, err)
		}
	}
}
