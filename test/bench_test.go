package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// BenchmarkPlacementThroughput measures placements committed per second by
// the leader's loop on a real 3-replica cluster (fsync on), with a deep
// backlog, for a few batch sizes: batch=1 is one placement per Raft entry.
//
//	go test ./test -run XXX -bench PlacementThroughput -benchtime 1x
func BenchmarkPlacementThroughput(b *testing.B) {
	const nodes, tasks = 200, 5000
	for _, batch := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c := NewCluster(b, 3, func(cfg *config.Server) {
					cfg.Scheduler.BatchSize = batch
					cfg.Scheduler.MaxPassPlacements = max(batch, 4096)
				})
				leader := c.Replicas[c.WaitForLeader()].Server
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				now := time.Now().UTC()
				var cmds [][]byte
				for i := 0; i < nodes; i++ {
					cmd, _ := fsm.Encode(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: now, Node: fsm.Node{
						ID: fmt.Sprintf("node-%03d", i), Capabilities: map[string][]string{"exec": {"1"}},
						Resources: scheduler.Resources{CPUMillis: 64000, MemoryMB: 65536}, Slots: 100,
					}})
					cmds = append(cmds, cmd)
				}
				if _, _, err := leader.ApplyCommand(ctx, fsm.EncodeBatch(cmds)); err != nil {
					b.Fatal(err)
				}
				// Pause placement while the backlog is loaded: drain every node.
				for i := 0; i < nodes; i++ {
					if _, err := leader.DrainNode(ctx, fmt.Sprintf("node-%03d", i), true); err != nil {
						b.Fatal(err)
					}
				}
				for start := 0; start < tasks; start += 500 {
					cmds = cmds[:0]
					for i := start; i < start+500; i++ {
						cmd, _ := fsm.Encode(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: fmt.Sprintf("task-%06d", i), SubmittedAt: now, Spec: fsm.TaskSpec{Name: "t", TaskShape: &fsm.TaskShape{
							Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
							Resources: scheduler.Resources{CPUMillis: 100, MemoryMB: 64}, TimeoutSeconds: 60, MaxAttempts: 1,
							Submitter: "bench",
						}}})
						cmds = append(cmds, cmd)
					}
					if _, _, err := leader.ApplyCommand(ctx, fsm.EncodeBatch(cmds)); err != nil {
						b.Fatal(err)
					}
				}
				before := leader.SchedulerStats().Placements.Load()
				b.StartTimer()
				start := time.Now()
				for i := 0; i < nodes; i++ {
					if _, err := leader.DrainNode(ctx, fmt.Sprintf("node-%03d", i), false); err != nil {
						b.Fatal(err)
					}
				}
				for leader.SchedulerStats().Placements.Load()-before < tasks {
					time.Sleep(5 * time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(tasks)/elapsed.Seconds(), "placements/s")
				b.ReportMetric(float64(leader.SchedulerStats().Entries.Load()), "entries")
				cancel()
				c.StopAll()
				b.StartTimer()
			}
		})
	}
}
