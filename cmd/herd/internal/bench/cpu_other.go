//go:build !unix

package bench

import "time"

// CPU times are read with getrusage, which only Unix systems have;
// elsewhere they read zero and the CPU-per-task figures with them.

func processCPU() time.Duration  { return 0 }
func childrenCPU() time.Duration { return 0 }
