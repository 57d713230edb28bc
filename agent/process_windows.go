//go:build windows

package agent

import (
	"os"
	"syscall"
)

// Windows has no process groups to signal: the agent stops an attempt's
// main process only, and does not measure free disk. Agents are meant to
// run on Linux; this keeps the package building for tooling elsewhere.

func groupLeader() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func terminateGroup(pid int) { killGroup(pid) }

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func signalled(*os.ProcessState) (syscall.Signal, bool) { return 0, false }

func freeDiskMB(string) int64 { return 0 }

func diskSpace(string) (uint64, uint64, bool) { return 0, 0, false }

func ownProcessGroup() int { return 0 }
