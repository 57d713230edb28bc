//go:build !linux

package agent

import (
	"fmt"
	"runtime"
)

// Resource limits rest on Linux interfaces (cgroups, prlimit); elsewhere
// every method reports itself unsupported and attempts run unlimited,
// under the method "none".

func newCgroupV2() (limiter, error) { return nil, errLimitsUnsupported() }
func newCgroupV1() (limiter, error) { return nil, errLimitsUnsupported() }
func newRlimits() (limiter, error)  { return nil, errLimitsUnsupported() }

func errLimitsUnsupported() error {
	return fmt.Errorf("unsupported on %s: resource limits need Linux", runtime.GOOS)
}
