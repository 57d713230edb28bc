//go:build !linux

package agent

// awaitExit returns at once: the caller's Wait blocks until the process
// exits.
func awaitExit(int) {}
