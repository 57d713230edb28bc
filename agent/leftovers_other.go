//go:build !linux

package agent

// killLeftovers finds nothing where there is no /proc to read: an
// earlier run's processes are left as they are.
func killLeftovers(nodeID, workRoot string, listed map[string]bool) map[string]int { return nil }
