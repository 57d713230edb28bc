package agent

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"herd/api"

	"golang.org/x/sys/unix"
)

// rlimits caps the process's data segment (heap and anonymous mappings)
// at the memory request. A CPU rate cannot be expressed as an rlimit, so
// CPU is not enforced by this method.
type rlimits struct{}

func newRlimits() (limiter, error) { return rlimits{}, nil }

func (rlimits) Name() string { return "rlimit" }

func (rlimits) Prepare(_ string, res api.Resources, _ *syscall.SysProcAttr) (limitHandle, error) {
	return rlimitHandle{memory: res.MemoryMB, set: new(bool)}, nil
}

type rlimitHandle struct {
	memory int64
	set    *bool // the limit was set during Launch
}

// Launch starts the process stopped at its first instruction (traced),
// sets its rlimit, and lets it go: rlimits of another process can only be
// set once it exists, and this way it never runs unlimited. Where tracing
// is not allowed, the limit is set right after the start instead.
func (h rlimitHandle) Launch(cmd *exec.Cmd) error {
	if h.memory <= 0 {
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() {
		// Ptrace requests must come from the thread that forked the child.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd.SysProcAttr.Ptrace = true
		if err := cmd.Start(); err != nil {
			done <- err
			return
		}
		pid := cmd.Process.Pid
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil || !ws.Stopped() {
			done <- fmt.Errorf("process %d did not stop at exec (%v)", pid, err)
			return
		}
		err := h.apply(pid)
		if derr := syscall.PtraceDetach(pid); derr != nil && err == nil {
			err = fmt.Errorf("release traced process %d: %w", pid, derr)
		}
		if err == nil {
			*h.set = true
		}
		done <- err
	}()
	err := <-done
	switch {
	case err != nil && cmd.Process == nil:
		// Tracing refused (a sandbox): start untraced, limit right after.
		cmd.SysProcAttr.Ptrace = false
		return cmd.Start()
	case err != nil:
		// Started but never limited: do not let it run.
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	}
	return err
}

func (h rlimitHandle) apply(pid int) error {
	lim := &unix.Rlimit{Cur: uint64(h.memory) << 20, Max: uint64(h.memory) << 20}
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, lim, nil); err != nil {
		return fmt.Errorf("prlimit data of %d: %w", pid, err)
	}
	return nil
}

func (h rlimitHandle) Started(pid int) error {
	if h.memory <= 0 || *h.set {
		return nil
	}
	return h.apply(pid)
}

func (rlimitHandle) KillAll() {}

func (rlimitHandle) OOMKilled() bool { return false }

// Contained is false: a process that left the group is out of sight.
func (rlimitHandle) Contained() bool { return false }

func (rlimitHandle) Release() {}
