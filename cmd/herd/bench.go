package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// benchSizes are the workload sizes of one run.
type benchSizes struct {
	ceiling        time.Duration
	nodes, backlog int
	e2eTasks       int
	footNodes      int
	footIdle       time.Duration
	footTasks      int
	failoverTrials int
	finishedTasks  int
}

func fullSizes() benchSizes {
	return benchSizes{ceiling: 10 * time.Second, nodes: 1000, backlog: 100_000, e2eTasks: 20_000, footNodes: 1000, footIdle: 20 * time.Second, footTasks: 100_000, failoverTrials: 20, finishedTasks: 1_000_000}
}

func quickSizes() benchSizes {
	return benchSizes{ceiling: 2 * time.Second, nodes: 100, backlog: 3000, e2eTasks: 200, footNodes: 100, footIdle: time.Second, footTasks: 2000, failoverTrials: 2, finishedTasks: 20_000}
}

// benchResult is what one run measured; the JSON keys are stable.
type benchResult struct {
	Machine struct {
		CPUs   int    `json:"cpus"`
		Go     string `json:"go"`
		OS     string `json:"os"`
		Commit string `json:"commit"`
		Quick  bool   `json:"quick"`
		Date   string `json:"date"`
		// AgentDir is where the end-to-end agents kept their data, if not
		// in the run's temporary directory.
		AgentDir string `json:"agent_dir,omitempty"`
	} `json:"machine"`
	RaftCeiling        float64 `json:"raft_ceiling_entries_per_sec"`
	Placements         float64 `json:"placements_per_sec"`
	PlacementToCeiling float64 `json:"placement_to_ceiling_ratio"`
	PlacementEntries   uint64  `json:"placement_entries"`
	PlacementCPUCores  float64 `json:"placement_cpu_cores"`
	E2ETasksPerSec     float64 `json:"e2e_tasks_per_sec"`
	// Submit→start latency at a light, steady rate (not saturated), and
	// over the saturating burst.
	E2ESubmitToStartP50  float64 `json:"e2e_submit_to_start_p50_ms"`
	E2ESubmitToStartP99  float64 `json:"e2e_submit_to_start_p99_ms"`
	E2ELightRate         float64 `json:"e2e_light_rate_per_sec"`
	E2ESaturatedStartP50 float64 `json:"e2e_saturated_submit_to_start_p50_ms"`
	E2ESaturatedStartP99 float64 `json:"e2e_saturated_submit_to_start_p99_ms"`
	// Where a saturated task's time goes (medians): submitting all tasks,
	// a reservation reaching its agent and being reported started, the
	// run and its result's commit, and a slot freed to reserved again.
	E2ESubmitAllMs       float64 `json:"e2e_submit_all_ms"`
	E2EReservedToStartMs float64 `json:"e2e_reserved_to_started_p50_ms"`
	E2EStartToFinishMs   float64 `json:"e2e_started_to_finished_p50_ms"`
	// CPU per task of the saturated run: the cluster's process (3
	// replicas, 4 agents, the client) and the tasks' own processes. Less
	// noisy than the rate on a shared machine.
	E2ECPUPerTaskMs      float64 `json:"e2e_cpu_per_task_ms"`
	E2EChildCPUPerTaskMs float64 `json:"e2e_task_process_cpu_per_task_ms"`
	// Raft entries the cluster committed per task (submissions, placements,
	// reports, heartbeats and explanations together).
	E2EEntriesPerTask float64 `json:"e2e_raft_entries_per_task"`
	E2ESlotIdleMs     float64 `json:"e2e_slot_idle_p50_ms"`
	// The process ceiling: `true` started and reaped as fast as this
	// machine allows with no scheduler around it, one at a time and from
	// as many goroutines as the end-to-end agents have slots; the better
	// of the two (its rate, spawners, and the CPU in each process), and
	// the end-to-end rate's share of it. No scheduler that runs a real
	// process per task can beat it.
	ProcessCeiling         float64 `json:"process_ceiling_tasks_per_sec"`
	ProcessCeilingSpawners int     `json:"process_ceiling_spawners"`
	ProcessCPUPerTaskMs    float64 `json:"process_ceiling_cpu_per_task_ms"`
	ProcessSequential      float64 `json:"process_sequential_tasks_per_sec"`
	ProcessConcurrent      float64 `json:"process_concurrent_tasks_per_sec"`
	E2EToProcessCeiling    float64 `json:"e2e_to_process_ceiling_ratio"`
	Decision100Nodes       float64 `json:"decision_100_nodes_ms"`
	Decision1kNodes        float64 `json:"decision_1k_nodes_ms"`
	Decision10kNodes       float64 `json:"decision_10k_nodes_ms"`
	// Queue selection is the head of one placement batch (512 tasks);
	// full order is ordering the whole backlog.
	QueueSelect10k  float64 `json:"queue_select_10k_ms"`
	QueueSelect100k float64 `json:"queue_select_100k_ms"`
	QueueOrder100k  float64 `json:"queue_full_order_100k_ms"`
	QueueScan100k   float64 `json:"queue_scan_100k_ms"` // the same head by a pass over an unindexed backlog
	ReplicaRSSMiB   float64 `json:"replica_rss_mib"`
	// The same replica's resident peak (the load included) and its RSS
	// once settled (after the idle window): one sample right after the
	// load depends on where the collector's cycle stands.
	ReplicaPeakRSSMiB    float64 `json:"replica_peak_rss_mib"`
	ReplicaSettledRSSMiB float64 `json:"replica_settled_rss_mib"`
	// Finished tasks held in one replica's state (heap above the empty
	// state), and what is left once retention forgot them.
	FinishedTasks         int     `json:"finished_tasks"`
	FinishedHeapMiB       float64 `json:"finished_tasks_heap_mib"`
	FinishedBytesPerTask  float64 `json:"finished_task_heap_bytes"`
	AfterRetentionHeapMiB float64 `json:"after_retention_heap_mib"`
	ReplicaHeapMiB        float64 `json:"replica_heap_mib"`
	ReplicaAnonMiB        float64 `json:"replica_rss_anon_mib"`
	// The loaded replica's CPU, in percent of one core, while it holds a
	// backlog no node may take (every node drained): the leader's passes
	// only explain why the tasks wait.
	ReplicaIdleCPUPercent float64 `json:"replica_idle_backlog_cpu_percent"`
	// The same load into a fresh replica with memory_limit_mib = 100, and
	// the submit rates of both loads (the limit's cost).
	LimitedRSSMiB       float64 `json:"replica_rss_mib_memory_limit_100"`
	LimitedAnonMiB      float64 `json:"replica_rss_anon_mib_memory_limit_100"`
	FootprintLoadPerSec float64 `json:"footprint_submits_per_sec"`
	LimitedLoadPerSec   float64 `json:"footprint_submits_per_sec_memory_limit_100"`
	ReplicaFileMiB      float64 `json:"replica_rss_file_mib"`
	SnapshotBytes       int64   `json:"snapshot_bytes"`
	SnapshotSaveMs      float64 `json:"snapshot_save_ms"`
	// Restoring that archive into the same replica through the API, as an
	// operator would (herd operator snapshot restore).
	SnapshotRestoreMs float64 `json:"snapshot_restore_ms"`
	RestartToReadyMs  float64 `json:"restart_to_ready_ms"`
	FailoverP50       float64 `json:"failover_p50_ms"`
	FailoverP99       float64 `json:"failover_p99_ms"`
	// The failover step's load: the writes a second acknowledged just
	// before each leader was killed (median over the trials).
	FailoverLoadPerSec float64 `json:"failover_load_writes_per_sec"`
	FootprintNodes     int     `json:"footprint_nodes"`
	FootprintTasks     int     `json:"footprint_tasks"`
	FootprintIdle      string  `json:"footprint_idle_window"`
	E2ETasks           int     `json:"e2e_tasks"`
	PlacementBacklog   int     `json:"placement_backlog"`
	PlacementNodes     int     `json:"placement_nodes"`
}

func runBench(e *env, args []string) error {
	fs := newFlags(e, "bench", "", "Measure herd on this machine: the raft ceiling, placements per second,\nend-to-end throughput and latency, decision latency, footprint and failover.\nPrints a table and, with -json, writes the results with machine facts.")
	quick := fs.Bool("quick", false, "shrink every workload so the run takes about a minute")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	placementProfile := fs.String("placementprofile", "", "write a CPU profile of the timed placement phase only to this file (not with -cpuprofile)")
	allocProfile := fs.String("allocprofile", "", "write a profile of the whole run's allocations (this process's) to this file")
	heapProfile := fs.String("heapprofile", "", "write the footprint replica's heap profile, taken once loaded, to this file")
	only := fs.String("only", "", "run only these steps (comma-separated: decision,placement,e2e,footprint,failover,retention)")
	backlog := fs.Int("backlog", 0, "override the placement backlog size")
	footIdle := fs.Duration("footprint-idle", 0, "override the footprint replica's settling time and idle window (each; 20s by default):\n30m lets a loaded leader explain every waiting task once before the settled RSS is read")
	agentDir := fs.String("agent-dir", "", "put the end-to-end agents' data (attempt logs and working directories) under this directory\ninstead of the run's temporary one: a tmpfs leaves out the disk's cost of creating them")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("bench takes no arguments")
	}
	sz := fullSizes()
	if *quick {
		sz = quickSizes()
	}
	if *backlog > 0 {
		sz.backlog = *backlog
	}
	if *footIdle < 0 {
		return usagef("-footprint-idle %v must not be negative", *footIdle)
	}
	if *footIdle > 0 {
		sz.footIdle = *footIdle
	}
	if *cpuProfile != "" && *placementProfile != "" {
		return usagef("-cpuprofile and -placementprofile cannot be used together (one CPU profile at a time)")
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "herd-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	var r benchResult
	r.Machine.CPUs, r.Machine.Go, r.Machine.OS = runtime.NumCPU(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
	r.Machine.Commit, r.Machine.Quick, r.Machine.Date = gitCommit(), *quick, time.Now().UTC().Format(time.RFC3339)
	r.FootprintNodes, r.FootprintTasks, r.E2ETasks, r.PlacementBacklog, r.PlacementNodes = sz.footNodes, sz.footTasks, sz.e2eTasks, sz.backlog, sz.nodes
	step := func(name string, fn func() error) error {
		fmt.Fprintf(e.stderr, "bench: %s…\n", name)
		start := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("bench %s: %w", name, err)
		}
		fmt.Fprintf(e.stderr, "bench: %s done in %s\n", name, time.Since(start).Round(time.Millisecond))
		return nil
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		// The decision and queue timings come first, as go test -bench
		// would take them, in a fresh process: after the cluster steps
		// the 10k-node decision read up to 2.3 ms against 0.6-0.9 ms
		// alone, its nodes allocated into the heap those steps left.
		{"decision", func() error { benchDecisions(&r); return nil }},
		{"placement", func() error { return benchPlacement(filepath.Join(dir, "placement"), sz, *placementProfile, &r) }},
		{"e2e", func() error { return benchE2E(filepath.Join(dir, "e2e"), *agentDir, sz, &r) }},
		{"footprint", func() error { return benchFootprint(filepath.Join(dir, "footprint"), sz, *heapProfile, &r) }},
		{"failover", func() error { return benchFailover(filepath.Join(dir, "failover"), sz, &r) }},
		{"retention", func() error { return benchRetention(sz, &r) }},
	}
	for _, s := range steps {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), s.name) {
			continue
		}
		if err := step(s.name, s.fn); err != nil {
			return err
		}
	}
	if *allocProfile != "" {
		if err := writeAllocProfile(*allocProfile); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	printBench(e.stdout, &r)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(&r, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: write %s: %w", *jsonOut, err)
		}
	}
	return nil
}

func printBench(w io.Writer, r *benchResult) {
	tb := &table{}
	tb.add("MEASURE", "VALUE", "WORKLOAD")
	tb.add("raft ceiling", fmt.Sprintf("%.0f entries/s", r.RaftCeiling), "3 replicas, fsync, 256 appliers, one reservation-sized entry each")
	tb.add("placements", fmt.Sprintf("%.0f /s (%.2f× ceiling, %d entries, %.2f cores busy)", r.Placements, r.PlacementToCeiling, r.PlacementEntries, r.PlacementCPUCores), fmt.Sprintf("%d nodes, %d pending", r.PlacementNodes, r.PlacementBacklog))
	tb.add("end to end", fmt.Sprintf("%.0f tasks/s, submit→start p50 %.1f ms, p99 %.1f ms", r.E2ETasksPerSec, r.E2ESaturatedStartP50, r.E2ESaturatedStartP99), fmt.Sprintf("%d × true at once (batches of %d), 3 replicas + 4 agents", r.E2ETasks, e2eSubmitBatch))
	tb.add("process ceiling", fmt.Sprintf("%.0f tasks/s (one at a time %.0f, %d at once %.0f), %.2f ms of CPU in each; end to end reached %.2f× of it", r.ProcessCeiling, r.ProcessSequential, e2eAgents*e2eSlotsPerAgent, r.ProcessConcurrent, r.ProcessCPUPerTaskMs, r.E2EToProcessCeiling), "true started and reaped, no scheduler; the better rate is the ceiling")
	tb.add("end to end, CPU per task", fmt.Sprintf("%.2f ms in herd, %.2f ms in the task's process; %.2f Raft entries", r.E2ECPUPerTaskMs, r.E2EChildCPUPerTaskMs, r.E2EEntriesPerTask), "same run; herd is 3 replicas, 4 agents and the client in one process")
	tb.add("submit→start, light load", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.E2ESubmitToStartP50, r.E2ESubmitToStartP99), fmt.Sprintf("%.0f tasks/s steady, same cluster", r.E2ELightRate))
	tb.add("decision", fmt.Sprintf("%.3f / %.3f / %.3f ms", r.Decision100Nodes, r.Decision1kNodes, r.Decision10kNodes), "filter+score+select over 100 / 1k / 10k nodes")
	tb.add("queue selection", fmt.Sprintf("%.2f / %.2f ms (unindexed scan of 100k: %.2f ms; full order: %.0f ms)", r.QueueSelect10k, r.QueueSelect100k, r.QueueScan100k, r.QueueOrder100k), "head of one 512-task batch from the leader's indexed queue of 10k / 100k pending")
	tb.add("replica memory", fmt.Sprintf("RSS %.0f MiB (anon %.0f, mapped files %.0f), heap in use %.0f MiB; peak %.0f, settled %.0f", r.ReplicaRSSMiB, r.ReplicaAnonMiB, r.ReplicaFileMiB, r.ReplicaHeapMiB, r.ReplicaPeakRSSMiB, r.ReplicaSettledRSSMiB), fmt.Sprintf("one replica process, %d nodes, %d tasks; peak: the most resident at once, load included; settled: after the idle window", r.FootprintNodes, r.FootprintTasks))
	tb.add("replica memory, limited", fmt.Sprintf("RSS %.0f MiB (anon %.0f); loaded at %.0f submits/s against %.0f", r.LimitedRSSMiB, r.LimitedAnonMiB, r.LimitedLoadPerSec, r.FootprintLoadPerSec), fmt.Sprintf("the same load into a fresh replica with memory_limit_mib = %d", benchMemoryLimitMiB))
	tb.add("replica CPU, idle backlog", fmt.Sprintf("%.1f%% of a core", r.ReplicaIdleCPUPercent), fmt.Sprintf("same replica, over %[1]s starting %[1]s after the load: every node drained, the leader explains why tasks wait", r.FootprintIdle))
	tb.add("snapshot", fmt.Sprintf("%d bytes, saved in %.0f ms, restored in %.0f ms", r.SnapshotBytes, r.SnapshotSaveMs, r.SnapshotRestoreMs), "same replica; the archive restored into it through the API")
	tb.add("finished tasks", fmt.Sprintf("heap %.0f MiB (%.0f bytes each); %.1f MiB after retention", r.FinishedHeapMiB, r.FinishedBytesPerTask, r.AfterRetentionHeapMiB), fmt.Sprintf("%d succeeded tasks in one replica's state, then forgotten", r.FinishedTasks))
	tb.add("restart to ready", fmt.Sprintf("%.0f ms", r.RestartToReadyMs), "same replica, from its data dir")
	tb.add("failover", fmt.Sprintf("p50 %.0f ms, p99 %.0f ms; the load ran at %.0f writes/s when the leader died", r.FailoverP50, r.FailoverP99, r.FailoverLoadPerSec), fmt.Sprintf("leader stopped under load (%d writers, one submit each per %s, through every replica) → first acknowledged write, default timings", failoverLoadWriters, failoverLoadEvery))
	tb.write(w)
}

// gitCommit is the commit the binary was built from (stamped by go build
// in a checkout), else the checkout the bench runs in, else "unknown".
func gitCommit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			rev = rev[:min(len(rev), 12)]
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func quietLogger() hclog.Logger { return hclog.NewNullLogger() }

// leader waits for the dev cluster's leader.
func (d *devCluster) leader() *cluster.Server {
	for {
		for _, s := range d.servers {
			if s.IsLeader() {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchPlacement measures the raft ceiling, then placements per second on
// the same cluster.
func benchPlacement(dir string, sz benchSizes, profile string, r *benchResult) error {
	d, err := startBenchCluster(dir)
	if err != nil {
		return err
	}
	defer d.shutdown()
	leader := d.leader()
	ctx := context.Background()
	// An entry the size of one encoded reservation.
	sample := fsm.EncodeReserve(fsm.ReserveRequest{TaskID: strings.Repeat("t", 26), AttemptID: strings.Repeat("a", 26), Number: 1,
		NodeID: "node-0001", SessionGeneration: 1, Score: 1_080_000, Now: time.Now().UTC(), HeartbeatTTL: 30 * time.Second})
	noop, _ := fsm.Encode(fsm.MsgNoop, fsm.NoopRequest{Pad: make([]byte, max(len(sample)-40, 1))})
	var count atomic.Int64
	stop := time.Now().Add(sz.ceiling)
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
	r.RaftCeiling = float64(count.Load()) / time.Since(start).Seconds()

	// Placement: nodes drained while the backlog loads, then released.
	now := time.Now().UTC()
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
	cmds = cmds[:0]
	for i := 0; i < sz.nodes; i++ {
		b, _ := fsm.Encode(fsm.MsgNodeDrain, fsm.NodeDrainRequest{NodeID: fmt.Sprintf("node-%04d", i), Enable: false, Now: now})
		cmds = append(cmds, b)
	}
	// The nodes heartbeat every 5 s, as agents would: without it their
	// heartbeat TTL expires in the middle of a deep backlog.
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go func() {
		for hbCtx.Err() == nil {
			st := leader.FSM().State()
			var hbs [][]byte
			for i := 0; i < sz.nodes; i++ {
				n, err := st.Node(fmt.Sprintf("node-%04d", i))
				if err != nil || n == nil {
					continue
				}
				b, _ := fsm.Encode(fsm.MsgHeartbeat, fsm.HeartbeatRequest{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Now: time.Now().UTC()})
				hbs = append(hbs, b)
			}
			_ = applyChunks(hbCtx, leader, hbs)
			select {
			case <-hbCtx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}()
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
	cpuBefore := processCPU()
	start = time.Now()
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
	r.PlacementCPUCores = (processCPU() - cpuBefore).Seconds() / time.Since(start).Seconds()
	if profile != "" {
		pprof.StopCPUProfile()
	}
	r.PlacementEntries = leader.SchedulerStats().Entries.Load() - entries
	r.PlacementToCeiling = r.Placements / r.RaftCeiling
	return nil
}

func applyChunks(ctx context.Context, s *cluster.Server, cmds [][]byte) error {
	for start := 0; start < len(cmds); start += 1000 {
		end := min(start+1000, len(cmds))
		if _, _, err := s.ApplyCommand(ctx, fsm.EncodeBatch(cmds[start:end])); err != nil {
			return err
		}
	}
	return nil
}

// benchE2E submits trivial tasks through the HTTP API and waits for them
// to succeed on four in-process agents running real subprocesses.
func benchE2E(dir, agentDir string, sz benchSizes, r *benchResult) error {
	if agentDir == "" {
		agentDir = dir
	} else {
		var err error
		if agentDir, err = os.MkdirTemp(agentDir, "herd-bench-agents-"); err != nil {
			return err
		}
		defer os.RemoveAll(agentDir)
		r.Machine.AgentDir = filepath.Dir(agentDir)
	}
	if err := benchProcessCeiling(sz.ceiling, e2eAgents*e2eSlotsPerAgent, r); err != nil {
		return err
	}
	d, err := startBenchCluster(dir)
	if err != nil {
		return err
	}
	defer d.shutdown()
	var addrs []string
	for _, s := range d.servers {
		addrs = append(addrs, s.HTTPAddr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var agents sync.WaitGroup
	defer agents.Wait()
	defer cancel()
	for i := range e2eAgents {
		ag, err := agent.New(agent.Config{
			ID: fmt.Sprintf("bench-agent-%d", i), Servers: []string{addrs[i%3], addrs[(i+1)%3], addrs[(i+2)%3]},
			DataDir: filepath.Join(agentDir, fmt.Sprintf("agent-%d", i)), Slots: e2eSlotsPerAgent,
			Resources: api.Resources{CPUMillis: 32000, MemoryMB: 32768}, Logger: quietLogger(),
		})
		if err != nil {
			return err
		}
		agents.Add(1)
		go func() { defer agents.Done(); _ = ag.Run(ctx) }()
	}
	leader := d.leader()
	for {
		nodes, _ := leader.FSM().State().Nodes()
		if len(nodes) == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cl, err := api.NewClient(addrs...)
	if err != nil {
		return err
	}
	cl.Retries = 20
	start := time.Now()
	cpuBefore, childBefore := processCPU(), childrenCPU()
	indexBefore := leader.FSM().Index()
	// Submitted as a client with 20,000 tasks would: in batches (one Raft
	// entry each), a few in flight at once.
	if err := submitBatches(ctx, cl, sz.e2eTasks, e2eSubmitBatch, func(i int) api.TaskSpec {
		return api.TaskSpec{Name: "e2e", IdempotencyKey: fmt.Sprint("e2e-", i), Command: []string{"true"}}
	}); err != nil {
		return err
	}
	r.E2ESubmitAllMs = float64(time.Since(start).Microseconds()) / 1000
	deadline := time.Now().Add(15 * time.Minute)
	for {
		counts, _ := leader.FSM().State().CountTasks()
		if counts[fsm.TaskSucceeded] >= sz.e2eTasks {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tasks succeeded in time", counts[fsm.TaskSucceeded], sz.e2eTasks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.E2ETasksPerSec = float64(sz.e2eTasks) / time.Since(start).Seconds()
	if r.ProcessCeiling > 0 {
		r.E2EToProcessCeiling = r.E2ETasksPerSec / r.ProcessCeiling
	}
	perTask := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(sz.e2eTasks) }
	r.E2ECPUPerTaskMs, r.E2EChildCPUPerTaskMs = perTask(processCPU()-cpuBefore), perTask(childrenCPU()-childBefore)
	r.E2EEntriesPerTask = float64(leader.FSM().Index()-indexBefore) / float64(sz.e2eTasks)
	st := leader.FSM().State()
	tasks, _ := st.Tasks(fsm.TaskFilter{})
	var lat, toStart, toFinish []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	byNode := map[string][]*fsm.Attempt{}
	for _, t := range tasks {
		as, _ := st.AttemptsOfTask(t.ID)
		for _, a := range as {
			if a.Number == 1 && !a.StartedAt.IsZero() {
				lat = append(lat, ms(a.StartedAt.Time().Sub(t.SubmittedAt())))
				toStart = append(toStart, ms(a.StartedAt.Sub(a.ReservedAt)))
				toFinish = append(toFinish, ms(a.FinishedAt.Sub(a.StartedAt)))
				byNode[a.NodeID] = append(byNode[a.NodeID], a)
			}
		}
	}
	r.E2ESaturatedStartP50, r.E2ESaturatedStartP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	r.E2EReservedToStartMs, r.E2EStartToFinishMs = percentile(toStart, 0.5), percentile(toFinish, 0.5)
	r.E2ESlotIdleMs = percentile(slotIdle(byNode), 0.5)
	fmt.Fprintf(os.Stderr, "bench: e2e: submitted all in %.0f ms; medians: reserved→started %.1f ms, started→finished %.1f ms, slot idle %.1f ms\n",
		r.E2ESubmitAllMs, r.E2EReservedToStartMs, r.E2EStartToFinishMs, r.E2ESlotIdleMs)

	// Light load: one task every 20 ms on the now idle cluster.
	light := max(sz.e2eTasks/100, 50)
	r.E2ELightRate = 50
	ids := make([]string, 0, light)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < light; i++ {
		<-tick.C
		resp, _, err := cl.SubmitTask(ctx, api.TaskSpec{Name: "light", IdempotencyKey: fmt.Sprint("light-", i), Command: []string{"true"}})
		if err != nil {
			return fmt.Errorf("light-load submit: %w", err)
		}
		ids = append(ids, resp.ID)
	}
	lat = lat[:0]
	deadline = time.Now().Add(time.Minute)
	for _, id := range ids {
		for {
			st := leader.FSM().State()
			as, _ := st.AttemptsOfTask(id)
			task, _ := st.Task(id)
			i := slices.IndexFunc(as, func(a *fsm.Attempt) bool { return a.Number == 1 && !a.StartedAt.IsZero() })
			if i >= 0 && task != nil {
				lat = append(lat, float64(as[i].StartedAt.Time().Sub(task.SubmittedAt()).Microseconds())/1000)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("light-load task %s did not start in time", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.E2ESubmitToStartP50, r.E2ESubmitToStartP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return nil
}

// The end-to-end cluster's agents and the slots each offers.
const e2eAgents, e2eSlotsPerAgent = 4, 32

// benchProcessCeiling measures what this machine's process creation
// allows at best, with no scheduler around it: `true` started and reaped
// one at a time, then from as many goroutines as the end-to-end agents
// have slots, for half of d each. The better rate is the ceiling an
// end-to-end rate of trivial tasks is compared with (as placements are
// with the raft ceiling). On some virtual machines processes started in
// parallel cost each twice the CPU of one at a time.
func benchProcessCeiling(d time.Duration, workers int, r *benchResult) error {
	path, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("process ceiling: %w", err)
	}
	for _, n := range []int{1, workers} {
		rate, cpu, err := spawnRate(path, n, d/2)
		if err != nil {
			return fmt.Errorf("process ceiling: %w", err)
		}
		fmt.Fprintf(os.Stderr, "bench: process ceiling: %.0f × %s a second from %d goroutines, %.2f ms of CPU each\n", rate, path, n, cpu)
		if n == 1 {
			r.ProcessSequential = rate
		} else {
			r.ProcessConcurrent = rate
		}
		if rate > r.ProcessCeiling {
			r.ProcessCeiling, r.ProcessCPUPerTaskMs, r.ProcessCeilingSpawners = rate, cpu, n
		}
	}
	return nil
}

// spawnRate runs path from the given number of goroutines for d: processes
// per second, and the CPU each took in milliseconds.
func spawnRate(path string, goroutines int, d time.Duration) (rate, cpuMs float64, err error) {
	var (
		ended   atomic.Int64
		failure atomic.Pointer[error]
		wg      sync.WaitGroup
	)
	childBefore, begin := childrenCPU(), time.Now()
	deadline := begin.Add(d)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && failure.Load() == nil {
				if err := exec.Command(path).Run(); err != nil {
					failure.CompareAndSwap(nil, &err)
					return
				}
				ended.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := failure.Load(); err != nil {
		return 0, 0, fmt.Errorf("run %s: %w", path, *err)
	}
	n := ended.Load()
	if n == 0 {
		return 0, 0, fmt.Errorf("no %s ended within %s", path, d)
	}
	return float64(n) / time.Since(begin).Seconds(), float64((childrenCPU() - childBefore).Microseconds()) / 1000 / float64(n), nil
}

// slotIdle estimates, per node, how long a slot stayed free: the k-th
// reservation on a node reuses the slot of the (k-slots)-th finish, so
// the gap between them is the time the cluster took to fill it again.
// With every slot busy (the saturated run), finishes and reservations
// are matched in time order.
func slotIdle(byNode map[string][]*fsm.Attempt) []float64 {
	var out []float64
	for _, as := range byNode {
		reserved := make([]time.Time, 0, len(as))
		finished := make([]time.Time, 0, len(as))
		for _, a := range as {
			reserved = append(reserved, a.ReservedAt.Time())
			finished = append(finished, a.FinishedAt.Time())
		}
		slices.SortFunc(reserved, func(a, b time.Time) int { return a.Compare(b) })
		slices.SortFunc(finished, func(a, b time.Time) int { return a.Compare(b) })
		for k := e2eSlotsPerAgent; k < len(reserved); k++ {
			if gap := reserved[k].Sub(finished[k-e2eSlotsPerAgent]); gap > 0 {
				out = append(out, float64(gap.Microseconds())/1000)
			}
		}
	}
	return out
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(float64(len(s)-1)*p+0.5), len(s)-1)]
}

// benchDecisions times the pure scheduler: Select over synthetic nodes
// and queue ordering over synthetic backlogs.
func benchDecisions(r *benchResult) {
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

// benchFootprint runs one replica as its own process, loads it through
// the API, and reads its resident memory, snapshot and restart time; then
// loads a fresh replica the same way under memory_limit_mib, to show what
// the soft limit saves and what it costs in load rate.
func benchFootprint(dir string, sz benchSizes, heapProfile string, r *benchResult) error {
	ctx := context.Background()
	rep, err := startFootprintReplica(dir, heapProfile != "")
	if err != nil {
		return err
	}
	defer rep.stop()
	if r.FootprintLoadPerSec, err = loadFootprint(ctx, rep.cl, sz); err != nil {
		return err
	}
	pid := rep.cmd.Process.Pid
	r.ReplicaRSSMiB, r.ReplicaAnonMiB, r.ReplicaFileMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "RssAnon"), procRSSMiB(pid, "RssFile")
	r.ReplicaHeapMiB = heapFromStats(ctx, rep.cl)
	// After a settling time as long as the window: the load's tail (a
	// snapshot, log compaction, collection) is not the backlog's cost.
	time.Sleep(sz.footIdle)
	cpu0, t0 := procCPUSeconds(pid), time.Now()
	time.Sleep(sz.footIdle)
	r.ReplicaIdleCPUPercent = 100 * (procCPUSeconds(pid) - cpu0) / time.Since(t0).Seconds()
	r.ReplicaSettledRSSMiB, r.ReplicaPeakRSSMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "VmHWM")
	r.FootprintIdle = sz.footIdle.String()
	if heapProfile != "" {
		if err := saveHeapProfile(ctx, rep.httpAddr, heapProfile); err != nil {
			return err
		}
	}
	t0 = time.Now()
	var archive bytes.Buffer
	if err := rep.cl.SnapshotSave(ctx, &archive); err != nil {
		return err
	}
	r.SnapshotSaveMs = float64(time.Since(t0).Microseconds()) / 1000
	r.SnapshotBytes = int64(archive.Len())
	t0 = time.Now()
	if err := rep.cl.SnapshotRestore(ctx, &archive); err != nil {
		return fmt.Errorf("restore the footprint snapshot: %w", err)
	}
	r.SnapshotRestoreMs = float64(time.Since(t0).Microseconds()) / 1000
	rep.stop()
	t0 = time.Now()
	if err := rep.start(); err != nil {
		return err
	}
	if err := waitReady(ctx, rep.cl, 5*time.Minute); err != nil {
		return err
	}
	for {
		list, _, err := rep.cl.ListTasks(ctx, api.TaskQuery{Limit: 1}, api.ReadOptions{Consistent: true})
		if err == nil && len(list.Tasks) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.RestartToReadyMs = float64(time.Since(t0).Microseconds()) / 1000
	rep.stop()

	// The same load into a fresh replica under a soft memory limit: the
	// collector trades CPU for footprint.
	limited, err := startFootprintReplica(dir+"-limited", false, "-memory-limit-mib", strconv.Itoa(benchMemoryLimitMiB))
	if err != nil {
		return err
	}
	defer limited.stop()
	if r.LimitedLoadPerSec, err = loadFootprint(ctx, limited.cl, sz); err != nil {
		return err
	}
	pid = limited.cmd.Process.Pid
	r.LimitedRSSMiB, r.LimitedAnonMiB = procRSSMiB(pid, "VmRSS"), procRSSMiB(pid, "RssAnon")
	return nil
}

// footprintReplica is a single-replica cluster run as its own process.
type footprintReplica struct {
	args     []string
	httpAddr string
	cl       *api.Client
	cmd      *exec.Cmd
}

// startFootprintReplica starts a replica on dir (bootstrapping it the
// first time) and waits until it serves.
func startFootprintReplica(dir string, debugEndpoints bool, extra ...string) (*footprintReplica, error) {
	httpAddr, raftAddr := freeLoopback(), freeLoopback()
	rep := &footprintReplica{
		httpAddr: httpAddr,
		args: append([]string{"server", "-id", "bench", "-data-dir", dir, "-http-addr", httpAddr, "-raft-addr", raftAddr, "-bootstrap", "-log-level", "error",
			fmt.Sprintf("-enable-debug=%t", debugEndpoints)}, extra...),
	}
	rep.cl, _ = api.NewClient(httpAddr)
	rep.cl.Retries, rep.cl.RetryWait = 100, 100*time.Millisecond
	if err := rep.start(); err != nil {
		return nil, err
	}
	if err := waitReady(context.Background(), rep.cl, 30*time.Second); err != nil {
		rep.stop()
		return nil, err
	}
	return rep, nil
}

func (rep *footprintReplica) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	rep.cmd = exec.Command(exe, rep.args...)
	rep.cmd.Stdout, rep.cmd.Stderr = io.Discard, io.Discard
	return rep.cmd.Start()
}

// stop ends the replica as an operator would (SIGTERM) and waits, killing
// it if it has not stopped within 30 s; a stopped replica's stop does
// nothing.
func (rep *footprintReplica) stop() {
	if rep.cmd == nil {
		return
	}
	p := rep.cmd.Process
	rep.cmd = nil
	_ = p.Signal(syscall.SIGTERM)
	kill := time.AfterFunc(30*time.Second, func() { _ = p.Kill() })
	defer kill.Stop()
	_, _ = p.Wait()
}

// loadFootprint registers the nodes and submits the tasks one request
// each from 32 clients, and returns the submit rate.
func loadFootprint(ctx context.Context, cl *api.Client, sz benchSizes) (float64, error) {
	for i := 0; i < sz.footNodes; i++ {
		// Nodes are drained so the tasks stay PENDING: the backlog case.
		if _, err := cl.RegisterNode(ctx, api.NodeRegistration{ID: fmt.Sprintf("node-%04d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: api.Resources{CPUMillis: 4000, MemoryMB: 4096}, Slots: 4, Labels: map[string]string{"zone": fmt.Sprint("z", i%4)}}); err != nil {
			return 0, err
		}
		if _, err := cl.DrainNode(ctx, fmt.Sprintf("node-%04d", i), true); err != nil {
			return 0, err
		}
	}
	t0 := time.Now()
	if err := submitConcurrently(ctx, cl, sz.footTasks, func(i int) api.TaskSpec {
		return api.TaskSpec{Name: fmt.Sprint("t", i), IdempotencyKey: fmt.Sprint("k", i), Command: []string{"sh", "-c", "echo hello"},
			Env: map[string]string{"K": "V"}, Resources: api.Resources{CPUMillis: 100, MemoryMB: 64}}
	}); err != nil {
		return 0, err
	}
	return float64(sz.footTasks) / time.Since(t0).Seconds(), nil
}

// writeAllocProfile writes what this process allocated, by call site.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchMemoryLimitMiB is the soft limit the footprint step also measures.
const benchMemoryLimitMiB = 100

// processCPU is the CPU time (user and system) this process has used: the
// whole cluster runs in it, so its rate is how many cores a run kept busy.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the CPU time (user and system) of this process's
// children that were waited for: in the end-to-end run, the tasks.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// saveHeapProfile fetches a replica's heap profile (it runs with
// -enable-debug) into path.
func saveHeapProfile(ctx context.Context, httpAddr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/debug/pprof/heap", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch heap profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write heap profile: %w", err)
	}
	return f.Close()
}

func waitReady(ctx context.Context, cl *api.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, _, err := cl.ListTasks(ctx, api.TaskQuery{Limit: 1}, api.ReadOptions{Consistent: true}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica not ready after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procRSSMiB reads a field of /proc/PID/status in MiB: VmRSS (all
// resident memory), RssAnon (heap and stacks) or RssFile (mapped files:
// bbolt's memory-mapped raft log).
func procRSSMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// procCPUSeconds is the user and system CPU time process pid has used,
// from /proc/PID/stat (in the kernel's fixed 100 ticks per second).
func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (in parentheses, and it may hold
	// any): state is the first, utime the 12th, stime the 13th.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// heapFromStats reads the replica's Go heap from its raft stats endpoint.
func heapFromStats(ctx context.Context, cl *api.Client) float64 {
	st, err := cl.RaftStats(ctx)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(st["go_heap_inuse_bytes"], 64)
	return v / (1 << 20)
}

func freeLoopback() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer ln.Close()
	return ln.Addr().String()
}

// benchFailover stops the leader under a steady write load and measures
// the time to the first write acknowledged after the stop.
func benchFailover(dir string, sz benchSizes, r *benchResult) error {
	d, err := startBenchCluster(dir)
	if err != nil {
		return err
	}
	defer d.shutdown()
	var addrs []string
	for _, s := range d.servers {
		addrs = append(addrs, s.HTTPAddr())
	}
	// The load: writers submitting through every replica at a steady
	// pace for the whole step, so the leader dies with entries in flight.
	load, stopLoad := context.WithCancel(context.Background())
	var (
		writers sync.WaitGroup
		acked   atomic.Int64
	)
	defer func() { stopLoad(); writers.Wait() }()
	for w := range failoverLoadWriters {
		cl, err := api.NewClient(addrs[w%3], addrs[(w+1)%3], addrs[(w+2)%3])
		if err != nil {
			return err
		}
		cl.Retries, cl.RetryWait = 0, 0 // a write lost to the failover is the load's loss, not retried
		writers.Add(1)
		go func() {
			defer writers.Done()
			tick := time.NewTicker(failoverLoadEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-load.Done():
					return
				case <-tick.C:
				}
				if _, _, err := cl.SubmitTask(load, api.TaskSpec{Name: "load", IdempotencyKey: fmt.Sprintf("failover-load-%d-%d", w, i), Command: []string{"true"}}); err == nil {
					acked.Add(1)
				}
			}
		}()
	}

	var times, rates []float64
	for trial := 0; trial < sz.failoverTrials; trial++ {
		// The leader dies with the load flowing: first the load gets
		// failoverLoadSettle more writes acknowledged.
		from, t0 := acked.Load(), time.Now()
		for acked.Load() < from+failoverLoadSettle {
			if time.Since(t0) > 30*time.Second {
				return fmt.Errorf("trial %d: the load got %d of %d writes acknowledged in 30 s", trial, acked.Load()-from, failoverLoadSettle)
			}
			time.Sleep(5 * time.Millisecond)
		}
		rates = append(rates, float64(acked.Load()-from)/time.Since(t0).Seconds())
		leader := d.leader()
		var live []string
		for _, s := range d.servers {
			if s != leader {
				live = append(live, s.HTTPAddr())
			}
		}
		cl, _ := api.NewClient(live...)
		cl.Retries, cl.RetryWait = 1000, 20*time.Millisecond
		cl.SetHTTPClient(&http.Client{Timeout: 5 * time.Second})
		stopped := time.Now()
		idx := slices.Index(d.servers, leader)
		cfg := leader.Config()
		_ = leader.Shutdown()
		if _, _, err := cl.SubmitTask(context.Background(), api.TaskSpec{Name: "f", IdempotencyKey: fmt.Sprint("failover-", trial), Command: []string{"true"}}); err != nil {
			return fmt.Errorf("trial %d: %w", trial, err)
		}
		times = append(times, float64(time.Since(stopped).Microseconds())/1000)
		// Bring the old leader back from its data dir before the next trial.
		srv, err := restartReplica(cfg)
		if err != nil {
			return err
		}
		d.servers[idx] = srv
		if err := d.waitForLeader(30 * time.Second); err != nil {
			return err
		}
	}
	r.FailoverP50, r.FailoverP99 = percentile(times, 0.5), percentile(times, 0.99)
	r.FailoverLoadPerSec = percentile(rates, 0.5)
	return nil
}

// The failover step's load: this many writers, each submitting one task
// per interval through the replicas (about 500 writes a second offered),
// and how many of its writes each leader acknowledges before it is killed.
const (
	failoverLoadWriters = 8
	failoverLoadEvery   = 16 * time.Millisecond
	failoverLoadSettle  = 100
)

func restartReplica(cfg config.Server) (*cluster.Server, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv, err := cluster.Start(cfg, cluster.Options{Logger: quietLogger()})
		if err == nil || time.Now().After(deadline) {
			return srv, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startBenchCluster starts a quiet three-replica cluster and waits until
// its leader writes the binary command forms (each server records that it
// reads them within a second or so of starting; JSON is written before).
func startBenchCluster(dir string) (*devCluster, error) {
	d, err := startDevCluster(dir, quietLogger())
	if err != nil {
		return nil, err
	}
	if err := d.waitForLeader(30 * time.Second); err != nil {
		d.shutdown()
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if d.leader().RaftStats()["command_forms_written"] == "binary" {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.shutdown()
			return nil, errors.New("the bench cluster's leader did not start writing the binary command forms in 30 s")
		}
	}
}

// e2eSubmitBatch is how many tasks the end-to-end run submits per request.
const e2eSubmitBatch = 500

// submitBatches submits tasks 0..n-1 in batches of size, four batches in
// flight.
func submitBatches(ctx context.Context, cl *api.Client, n, size int, spec func(i int) api.TaskSpec) error {
	return inChunks(n, size, 4, func(start, end int) error {
		specs := make([]api.TaskSpec, 0, end-start)
		for i := start; i < end; i++ {
			specs = append(specs, spec(i))
		}
		_, err := cl.SubmitTasks(ctx, specs)
		return err
	})
}

// submitConcurrently submits tasks 0..n-1 one request each, 32 in flight.
func submitConcurrently(ctx context.Context, cl *api.Client, n int, spec func(i int) api.TaskSpec) error {
	return inChunks(n, 1, 32, func(i, _ int) error {
		_, _, err := cl.SubmitTask(ctx, spec(i))
		return err
	})
}

// inChunks calls fn on [start, end) chunks of 0..n-1 from that many
// workers, and returns the first error (a worker stops at its error).
func inChunks(n, size, workers int, fn func(start, end int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(int64(size))) - size
				if start >= n {
					return
				}
				if err := fn(start, min(start+size, n)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	return nil
}
