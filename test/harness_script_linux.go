//go:build linux

package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// runDocScript runs a bash script made of a docs page's commands in dir,
// in a process group of its own that is killed with everything it
// started (the servers and agents it runs in the background) when the
// script ends, the time is up or the test's process goes. On a failure
// the test logs the tails of the named log files of dir. It returns the
// script's combined output, or fails the test with it.
func runDocScript(t *testing.T, dir, script string, timeout time.Duration, logs ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			for _, f := range logs {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				t.Logf("--- %s ---\n%s", f, tail(b, 2500))
			}
		}
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the page's commands failed: %v\n--- script ---\n%s\n--- output ---\n%s", err, script, tail(out, 6000))
	}
	return out
}
