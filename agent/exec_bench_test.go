package agent

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
)

// BenchmarkRunProcess measures an agent's own work per attempt of a
// trivial command under each limit method available here (cgroup v1
// needs root and the v1 hierarchies): working directory, log, limits,
// fork and exec, and the cleanup after it, as a busy agent pays them for
// every attempt. The command's own run time (a few hundred microseconds
// for "true") is included.
func BenchmarkRunProcess(b *testing.B) {
	for _, m := range limitMethodsForTest {
		b.Run(m.name, func(b *testing.B) {
			a := agentForTest(b, m.name, m.make)
			as := api.Assignment{
				Attempt: api.Attempt{TaskID: "01kbtask", Number: 1},
				Spec:    api.TaskSpec{Command: []string{"true"}, Resources: api.Resources{CPUMillis: 500, MemoryMB: 64}},
			}
			i := 0
			cpu0 := selfCPU()
			for b.Loop() {
				i++
				as.Attempt.ID = "01kbattempt" + strconv.Itoa(i)
				if out := a.runProcess(context.Background(), as); out.state != "SUCCEEDED" {
					b.Fatalf("attempt %d: %+v", i, out)
				}
			}
			// The agent's own CPU (user and system), without the task's.
			b.ReportMetric(float64((selfCPU()-cpu0).Nanoseconds())/float64(b.N), "agent-cpu-ns/op")
		})
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// limitMethodsForTest are the limit methods runProcess is measured and
// tested under; those this machine lacks are skipped.
var limitMethodsForTest = []struct {
	name string
	make func() (limiter, error)
}{
	{"none", func() (limiter, error) { return noLimits{}, nil }},
	{"rlimit", func() (limiter, error) { return rlimits{}, nil }},
	{"cgroup-v1", newCgroupV1},
}

// agentForTest is an agent that can run attempts (runProcess) under the
// limiter mk makes, with its data in a temporary directory; it skips
// where the limiter is unavailable.
func agentForTest(tb testing.TB, name string, mk func() (limiter, error)) *Agent {
	tb.Helper()
	lim, err := mk()
	if err != nil {
		tb.Skipf("%s unavailable: %v", name, err)
	}
	if c, ok := lim.(*cgroupV1); ok {
		tb.Cleanup(c.drain)
	}
	cfg := Config{ID: "test", DataDir: tb.TempDir()}.WithDefaults()
	return &Agent{cfg: cfg, logger: hclog.NewNullLogger(), limiter: lim, paths: pathCache{now: time.Now}, workDirs: newWorkDirs(filepath.Join(cfg.DataDir, "work"))}
}
