//go:build !unix

package bench

import "os"

// stopProfile does nothing where there is no SIGUSR1: the process's
// profile runs until it exits.
func stopProfile(*os.Process) error { return nil }
