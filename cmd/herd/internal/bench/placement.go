package bench

import (
	"context"
	"fmt"
	"herd/internal/cputime"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"herd/cluster"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
	"herd/test/localcluster"
)

// benchPlacement measures the raft ceiling, then placements per second on
// the same cluster, with the default scoring (profiles on, a weighted
// random choice among near-equals); then the same on a fresh cluster
// scoring by the reference formula alone, for the profiles' cost.
func benchPlacement(dir string, sz benchSizes, profile string, r *Result) error {
	if err := placeOnce(dir, sz, profile, r, nil); err != nil {
		return err
	}
	var off Result
	if err := placeOnce(dir+"-noprofile", sz, "", &off, func(c *config.Server) { c.Scheduler.ProfileScale, c.Scheduler.RandomTopK = 0, 1 }); err != nil {
		return fmt.Errorf("profiles off: %w", err)
	}
	r.PlacementsNoProfile = off.Placements
	if off.Placements > 0 {
		r.PlacementProfileRatio = r.Placements / off.Placements
	}
	return nil
}

func placeOnce(dir string, sz benchSizes, profile string, r *Result, configure func(*config.Server)) error {
	var c *localcluster.Cluster
	var err error
	if configure != nil {
		c, err = startCluster(dir, "", configure)
	} else {
		c, err = startCluster(dir, "")
	}
	if err != nil {
		return err
	}
	defer c.Shutdown()
	leader, err := leader(c)
	if err != nil {
		return err
	}
	ctx := context.Background()
	r.RaftCeiling = measureRaftCeiling(ctx, leader, sz.ceiling)

	// Placement: nodes drained while the backlog loads, then released.
	now := time.Now().UTC()
	if err := loadBacklog(ctx, leader, sz, now); err != nil {
		return err
	}
	var cmds [][]byte
	for i := 0; i < sz.nodes; i++ {
		b, _ := fsm.Encode(fsm.MsgNodeDrain, fsm.NodeDrainRequest{NodeID: fmt.Sprintf("node-%04d", i), Enable: false, Now: now})
		cmds = append(cmds, b)
	}
	// The nodes heartbeat every 5 s, as agents would: without it their
	// heartbeat TTL expires in the middle of a deep backlog.
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go heartbeatNodes(hbCtx, leader, sz.nodes)
	before, entries := leader.SchedulerStats().Placements.Load(), leader.SchedulerStats().Entries.Load()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpuBefore := cputime.Self()
	start := time.Now()
	if err := applyChunks(ctx, leader, cmds); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	progress := time.Now()
	for leader.SchedulerStats().Placements.Load()-before < uint64(sz.backlog) {
		if time.Since(progress) >= 10*time.Second {
			progress = time.Now()
			st := leader.SchedulerStats()
			fmt.Fprintf(os.Stderr, "bench: placed %d of %d after %s (%d passes)\n", st.Placements.Load()-before, sz.backlog, time.Since(start).Round(time.Second), st.Passes.Load())
		}
		if time.Now().After(deadline) {
			st := leader.SchedulerStats()
			return fmt.Errorf("only %d of %d placed in 10 minutes (%d passes, rejected at apply: %v)", st.Placements.Load()-before, sz.backlog, st.Passes.Load(), st.Rejections())
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.Placements = float64(sz.backlog) / time.Since(start).Seconds()
	r.PlacementCPUCores = (cputime.Self() - cpuBefore).Seconds() / time.Since(start).Seconds()
	if profile != "" {
		pprof.StopCPUProfile()
	}
	r.PlacementEntries = leader.SchedulerStats().Entries.Load() - entries
	r.PlacementToCeiling = r.Placements / r.RaftCeiling
	return nil
}

// measureRaftCeiling is how many entries a second the cluster commits
// and applies with nothing to decide: 256 appliers for d, each proposing
// an entry the size of one encoded reservation.
func measureRaftCeiling(ctx context.Context, leader *cluster.Server, d time.Duration) float64 {
	// An entry the size of one encoded reservation.
	sample := fsm.EncodeReserve(fsm.ReserveRequest{TaskID: strings.Repeat("t", 26), AttemptID: strings.Repeat("a", 26), Number: 1,
		NodeID: "node-0001", SessionGeneration: 1, Score: 1_080_000, Now: time.Now().UTC(), HeartbeatTTL: 30 * time.Second})
	noop, _ := fsm.Encode(fsm.MsgNoop, fsm.NoopRequest{Pad: make([]byte, max(len(sample)-40, 1))})
	var count atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < 256; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, _, err := leader.ApplyCommand(ctx, noop); err == nil {
					count.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	return float64(count.Load()) / time.Since(start).Seconds()

}

// loadBacklog registers the nodes, drained, then submits the backlog, so
// that nothing is placed before the timed phase releases the nodes.
func loadBacklog(ctx context.Context, leader *cluster.Server, sz benchSizes, now time.Time) error {
	var cmds [][]byte
	for i := 0; i < sz.nodes; i++ {
		b, _ := fsm.Encode(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: now, Node: fsm.Node{
			ID: fmt.Sprintf("node-%04d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: scheduler.Resources{CPUMillis: 64000, MemoryMB: 65536}, Slots: sz.backlog/sz.nodes + 10,
		}})
		cmds = append(cmds, b)
		b, _ = fsm.Encode(fsm.MsgNodeDrain, fsm.NodeDrainRequest{NodeID: fmt.Sprintf("node-%04d", i), Enable: true, Now: now})
		cmds = append(cmds, b)
	}
	if err := applyChunks(ctx, leader, cmds); err != nil {
		return err
	}
	cmds = cmds[:0]
	for i := 0; i < sz.backlog; i++ {
		b, _ := fsm.Encode(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: fmt.Sprintf("task-%07d", i), SubmittedAt: now, Spec: fsm.TaskSpec{Name: "b", TaskShape: &fsm.TaskShape{
			Priority: rand.IntN(101), Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
			Resources: scheduler.Resources{CPUMillis: 10, MemoryMB: 1}, TimeoutSeconds: 60, MaxAttempts: 1,
			Submitter: fmt.Sprint("team-", i%8),
		}}})
		cmds = append(cmds, b)
	}
	loadStart := time.Now()
	if err := applyChunks(ctx, leader, cmds); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: %d pending tasks loaded in %s\n", sz.backlog, time.Since(loadStart).Round(time.Millisecond))
	return nil
}

// heartbeatNodes heartbeats every node every 5 s until ctx ends.
func heartbeatNodes(ctx context.Context, leader *cluster.Server, nodes int) {
	for ctx.Err() == nil {
		st := leader.FSM().State()
		var hbs [][]byte
		for i := 0; i < nodes; i++ {
			n, err := st.Node(fmt.Sprintf("node-%04d", i))
			if err != nil || n == nil {
				continue
			}
			b, _ := fsm.Encode(fsm.MsgHeartbeat, fsm.HeartbeatRequest{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Now: time.Now().UTC()})
			hbs = append(hbs, b)
		}
		_ = applyChunks(ctx, leader, hbs)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}
