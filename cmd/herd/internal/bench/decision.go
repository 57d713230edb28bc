package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"herd/scheduler"
)

// benchDecisions times the pure scheduler: Select over synthetic nodes
// and queue ordering over synthetic backlogs.
func benchDecisions(r *Result) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	mkNodes := func(n int) []*scheduler.Node {
		out := make([]*scheduler.Node, n)
		for i := range out {
			out[i] = &scheduler.Node{
				ID: fmt.Sprintf("node-%05d", i), Management: scheduler.ManagementActive, Liveness: scheduler.LivenessReady,
				Scheduling: scheduler.SchedulingEligible, LastHeartbeat: now, Capabilities: map[string][]string{"exec": {"1"}},
				Labels:    map[string]string{"zone": fmt.Sprint("z", rng.IntN(4))},
				Resources: scheduler.Resources{CPUMillis: int64(1+rng.IntN(16)) * 1000, MemoryMB: 8192}, Slots: 8, RunningAttempts: rng.IntN(4),
				Weight: 50 + rng.IntN(100),
			}
		}
		return out
	}
	req := &scheduler.Request{Capability: "exec", CapabilityVersion: "1", RequiredLabels: map[string]string{"zone": "z1"},
		PreferredLabels: map[string]string{"disk": "ssd"}, Resources: scheduler.Resources{CPUMillis: 2000}, Now: now, HeartbeatTTL: time.Minute}
	// timeIt is the median of five rounds of about 100 ms each: one slow
	// round on a shared machine does not set the number.
	timeIt := func(fn func()) float64 {
		// As go test -bench does: collect first, so the garbage the
		// cluster steps before left is not collected on this clock.
		runtime.GC()
		fn() // warm up
		var rounds []float64
		for range 5 {
			n, start := 0, time.Now()
			for time.Since(start) < 100*time.Millisecond || n < 3 {
				fn()
				n++
			}
			rounds = append(rounds, float64(time.Since(start).Microseconds())/1000/float64(n))
		}
		return percentile(rounds, 0.5)
	}
	for _, c := range []struct {
		n   int
		out *float64
	}{{100, &r.Decision100Nodes}, {1000, &r.Decision1kNodes}, {10000, &r.Decision10kNodes}} {
		nodes := mkNodes(c.n)
		*c.out = timeIt(func() { _, _ = scheduler.Select(nodes, req, nil) })
	}
	nodes := mkNodes(10_000)
	for i, n := range nodes {
		n.Tier = scheduler.Tier(1 + i%3)
		n.Profile = scheduler.Profile{Power: rng.Float64(), Health: rng.Float64(),
			Classes:  []scheduler.ClassTime{{Class: "infer", EWMAMillis: int64(500 + rng.IntN(2000))}},
			Datasets: []scheduler.Dataset{{Name: fmt.Sprint("cam-", rng.IntN(100)), Bytes: 1 << 30}}}
	}
	preq := *req
	preq.Class, preq.ClassMedianMillis, preq.Size, preq.Tiers = "infer", 1000, "medium", []scheduler.Tier{scheduler.TierL1, scheduler.TierL2}
	preq.Inputs = []scheduler.Input{{Name: "cam-7", Bytes: 1 << 30}}
	cfg := scheduler.Config{ProfileScale: 200_000, ProfileWeights: scheduler.DefaultProfileWeights(), RandomTopK: 3, SpreadWindow: 20_000}
	r.Decision10kNodesProfile = timeIt(func() { preq.Seed++; _, _ = scheduler.Select(nodes, &preq, &cfg) })
	for _, c := range []struct {
		n   int
		out *float64
	}{{10_000, &r.QueueSelect10k}, {100_000, &r.QueueSelect100k}} {
		tasks := make([]scheduler.QueuedTask, c.n)
		for i := range tasks {
			tasks[i] = scheduler.QueuedTask{ID: fmt.Sprint(i), Priority: rng.IntN(101), Submitter: fmt.Sprint("s", rng.IntN(20)),
				QueuedAt: now.Add(-time.Duration(rng.IntN(600)) * time.Second), Seq: uint64(i)}
		}
		q := scheduler.NewQueue(scheduler.DefaultQueueConfig())
		for _, t := range tasks {
			q.Put(t)
		}
		*c.out = timeIt(func() { q.Head(now, 512) })
		if c.n == 100_000 {
			r.QueueScan100k = timeIt(func() { scheduler.Head(tasks, now, scheduler.DefaultQueueConfig(), 512) })
			r.QueueOrder100k = timeIt(func() { scheduler.Order(tasks, now, scheduler.DefaultQueueConfig()) })
		}
	}
}
