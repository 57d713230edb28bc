//go:build !linux

package bench

import (
	"fmt"
	"os"
)

// benchOneCore needs Linux's CPU affinity: elsewhere the step is skipped,
// saying so.
func benchOneCore(string, string, benchSizes, *Result) error {
	fmt.Fprintln(os.Stderr, "bench: one-core: skipped: pinning processes to one CPU is measured on Linux only")
	return nil
}
