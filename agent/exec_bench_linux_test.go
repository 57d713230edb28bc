package agent

import (
	"context"
	"strconv"
	"testing"

	"herd/api"
	"herd/internal/cputime"
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
			cpu0, child0 := cputime.Self(), cputime.Children()
			for b.Loop() {
				i++
				as.Attempt.ID = "01kbattempt" + strconv.Itoa(i)
				if out := a.runProcess(context.Background(), as); out.state != "SUCCEEDED" {
					b.Fatalf("attempt %d: %+v", i, out)
				}
			}
			// The agent's own CPU (user and system), without the task's.
			b.ReportMetric(float64((cputime.Self()-cpu0).Nanoseconds())/float64(b.N), "agent-cpu-ns/op")
			// The task's own, which the limits method changes too (what
			// the kernel does for its cgroups is charged to it).
			b.ReportMetric(float64((cputime.Children()-child0).Nanoseconds())/float64(b.N), "task-cpu-ns/op")
		})
	}
}
