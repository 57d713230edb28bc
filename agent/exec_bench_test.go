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
	methods := []struct {
		name string
		make func() (limiter, error)
	}{
		{"none", func() (limiter, error) { return noLimits{}, nil }},
		{"rlimit", func() (limiter, error) { return rlimits{}, nil }},
		{"cgroup-v1", newCgroupV1},
	}
	for _, m := range methods {
		b.Run(m.name, func(b *testing.B) {
			lim, err := m.make()
			if err != nil {
				b.Skipf("%s unavailable: %v", m.name, err)
			}
			if c, ok := lim.(*cgroupV1); ok {
				b.Cleanup(c.drain)
			}
			cfg := Config{ID: "bench", DataDir: b.TempDir()}.WithDefaults()
			a := &Agent{cfg: cfg, logger: hclog.NewNullLogger(), limiter: lim, paths: pathCache{now: time.Now}, workDirs: newWorkDirs(filepath.Join(cfg.DataDir, "work"))}
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
