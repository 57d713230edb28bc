//go:build linux

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// benchOneCore runs the deployment again with every process on the
// machine's first CPU (taskset), and the process ceiling with the
// bench's own threads, and so the `true` they start, on that CPU alone:
// how herd sizes on a one-core box, beside the figures of all cores.
func benchOneCore(exe, dir string, sz benchSizes, r *Result) error {
	if runtime.NumCPU() < 2 {
		fmt.Fprintln(os.Stderr, "bench: one-core: skipped: this machine has one CPU, so the deployment step's figures are one core's already")
		return nil
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: one-core: skipped: taskset (util-linux) pins the processes, and there is none: %v\n", err)
		return nil
	}
	restore, err := pinThreads(0)
	if err != nil {
		return err
	}
	var ceiling Result
	err = benchProcessCeiling(sz.ceiling, 2*processSlots, &ceiling)
	restore()
	if err != nil {
		return err
	}
	two, err := runProcessSite(exe, filepath.Join(dir, "two"), "", 2, sz.processTasks, []string{taskset, "-c", "0"})
	if err != nil {
		return fmt.Errorf("two agents on one CPU: %w", err)
	}
	r.OneCPUProcessCeiling = ceiling.ProcessCeiling
	r.OneCPUProcessesTasksPerSec = two.tasksPerSec
	r.OneCPUProcessesToCeiling = two.tasksPerSec / ceiling.ProcessCeiling
	r.OneCPUHerdCPUPerTaskMs = two.herdCPUPerTaskMs
	r.OneCPUProcessesServerCPUPerTaskMs, r.OneCPUProcessesAgentCPUPerTaskMs = two.serverCPUPerTaskMs, two.agentCPUPerTaskMs
	r.OneCPUProcessesTaskCPUPerTaskMs = two.taskCPUPerTaskMs
	r.OneCPUProcessesStartP50, r.OneCPUProcessesStartP99 = two.startP50, two.startP99
	return nil
}

// pinThreads sets every thread of this process onto cpu (threads made
// later inherit it from the thread that makes them) and returns what
// puts them back on every CPU they had.
func pinThreads(cpu int) (func(), error) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		return nil, fmt.Errorf("read the CPU affinity: %w", err)
	}
	var one unix.CPUSet
	one.Set(cpu)
	set := func(s *unix.CPUSet) error {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, s); err != nil && err != unix.ESRCH {
				return fmt.Errorf("set thread %d's CPU affinity: %w", tid, err)
			}
		}
		return nil
	}
	if err := set(&one); err != nil {
		_ = set(&before)
		return nil, err
	}
	return func() { _ = set(&before) }, nil
}
