//go:build unix

package agent

import (
	"os"
	"syscall"
)

// An attempt's process leads a process group of its own, so that the
// agent can signal everything it started at once, including children
// that outlive it.

func groupLeader() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// terminateGroup asks the group led by pid to stop (SIGTERM).
func terminateGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGTERM) }

// killGroup kills the group led by pid (SIGKILL).
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// signalled reports the signal that ended the process, if one did.
func signalled(ps *os.ProcessState) (syscall.Signal, bool) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal(), true
	}
	return 0, false
}

// freeDiskMB is the space available to unprivileged users under dir.
func freeDiskMB(dir string) int64 {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize) >> 20
}

// diskSpace is the space and inodes available to unprivileged users
// under dir; ok is false when the file system cannot tell.
func diskSpace(dir string) (freeBytes, freeInodes uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	inodes := uint64(st.Ffree)
	if st.Files == 0 {
		inodes = ^uint64(0) // a file system without an inode count
	}
	return uint64(st.Bavail) * uint64(st.Bsize), inodes, true
}

// ownProcessGroup is the agent's own process group.
func ownProcessGroup() int { return syscall.Getpgrp() }
