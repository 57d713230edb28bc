package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"herd/api"
)

// limiter enforces an attempt's CPU and memory request.
type limiter interface {
	// Name is the method, as logged and reported: cgroup-v2, cgroup-v1,
	// rlimit or none.
	Name() string
	// Prepare runs before the process starts; it may set attributes of the
	// child (cgroup v2 places it in its cgroup atomically at clone).
	Prepare(attemptID string, res api.Resources, attr *syscall.SysProcAttr) (limitHandle, error)
}

// limitHandle is one attempt's limits.
type limitHandle interface {
	// Launch starts the process under the limits. Methods that can place
	// the process before it runs its first instruction do so.
	Launch(cmd *exec.Cmd) error
	// Started runs right after the process started.
	Started(pid int) error
	// KillAll kills every process of the attempt, including ones that left
	// the process group (where the method can see them).
	KillAll()
	// OOMKilled reports whether the memory limit killed a process.
	OOMKilled() bool
	// Contained reports, after KillAll, that no process of the attempt
	// is left anywhere: nothing can still write into its directory.
	Contained() bool
	// Release removes what Prepare created.
	Release()
}

// cpuQuota converts millicores into a CFS quota per 100 ms period.
func cpuQuota(millis int64) (quota, period int64) {
	return millis * 100, 100_000
}

// pickLimiter returns the first method of the wanted kind that works on
// this machine, with the reasons the others were passed over.
func pickLimiter(want, dataDir string) (limiter, []string) {
	var skipped []string
	try := func(name string, mk func() (limiter, error)) limiter {
		l, err := mk()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", name, err))
			return nil
		}
		return l
	}
	if want == "auto" || want == "cgroup-v2" {
		if l := try("cgroup-v2", newCgroupV2); l != nil {
			return l, skipped
		}
	}
	if want == "auto" || want == "cgroup-v1" {
		if l := try("cgroup-v1", newCgroupV1); l != nil {
			return l, skipped
		}
	}
	if want != "none" {
		if l := try("rlimit", newRlimits); l != nil {
			return l, skipped
		}
	}
	return noLimits{}, skipped
}

type noLimits struct{}

func (noLimits) Name() string { return "none" }

func (noLimits) Prepare(string, api.Resources, *syscall.SysProcAttr) (limitHandle, error) {
	return noHandle{}, nil
}

// noHandle starts the process as it is and enforces nothing.
type noHandle struct{}

func (noHandle) Launch(cmd *exec.Cmd) error { return cmd.Start() }
func (noHandle) Started(int) error          { return nil }
func (noHandle) KillAll()                   {}
func (noHandle) OOMKilled() bool            { return false }
func (noHandle) Contained() bool            { return false }
func (noHandle) Release()                   {}

// readKeyed reads the value of key in a file of "key value" lines (0 if
// absent or unreadable).
func readKeyed(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return keyedValue(b, key)
}

func keyedValue(b []byte, key string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
