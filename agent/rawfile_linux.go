package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// readSmallFile reads a small kernel-generated file (a cgroup's list of
// processes, a proc file) whole into buf, growing it as needed, with
// plain open, read and close. An *os.File would add the runtime's poller
// to each: cgroup files can be polled, so opening one registers it with
// epoll and closing it removes it, besides the fcntl calls that set and
// check its mode and a stat for its size, eight system calls where three
// do, and an agent reads one per attempt.
func readSmallFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// outputPipe makes the pipe an attempt's output goes through: its read
// end non-blocking and in the runtime's poller, for the goroutine that
// copies from it, and its write end blocking and outside the poller. The
// write end is only ever the child's stdout and stderr: os.Pipe would
// register it with epoll, unregister it at its close and switch it back
// to blocking mode for the fork, six system calls an attempt for nothing.
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// emptyDir reports whether dir exists and holds nothing. It reads the
// directory with plain calls: an *os.File would try the poller (which
// refuses a directory) and set and unset its non-blocking mode around
// it, five system calls more, and an agent checks a directory per
// attempt.
func emptyDir(dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var buf [4096]byte
	for {
		n, err := unix.ReadDirent(fd, buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false
		}
		if n <= 0 {
			return true
		}
		// ParseDirent leaves out "." and "..".
		if _, count, _ := unix.ParseDirent(buf[:n], 1, nil); count > 0 {
			return false
		}
	}
}
