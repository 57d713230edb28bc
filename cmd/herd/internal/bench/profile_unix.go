//go:build unix

package bench

import (
	"os"
	"syscall"
)

// stopProfile asks a herd process to stop its CPU profile (SIGUSR1).
func stopProfile(p *os.Process) error { return p.Signal(syscall.SIGUSR1) }
