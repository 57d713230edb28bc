package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the child pid has exited, without reaping it,
// so that the caller's Wait then returns at once. It waits through the
// runtime's poller on a pidfd: a Wait alone blocks an OS thread in
// waitid for the process's whole run, and on a busy agent every such
// wait costs the runtime a handoff of its processor to another thread
// and back, more of the agent's CPU than the few short system calls
// made here (an attempt launched while nothing else runs costs a little
// more this way). Where pidfds are missing (kernels before 5.3) it
// returns at once and the caller's Wait blocks as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	// A non-blocking descriptor is registered with the poller.
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		// Done once it has exited, or when waitid cannot tell (the
		// caller's Wait then says why); not yet while it runs.
		return err != nil || info.Signo != 0
	})
}
