// Package bench is the benchmark behind `herd bench`: each step (one file
// each) starts what it measures (in-process clusters, real processes,
// simulated fleets) and reports throughput, latency, CPU and memory beside
// the ceilings that bound them, as text and JSON.
package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"herd/agent"
	"herd/cmd/herd/internal/sim"
	"herd/config"
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
	processTasks   int
	agentsN        int
	agentsWindow   time.Duration
	// electionsWindow is how long each timing set loses packets.
	electionsWindow time.Duration
	// judgement is the simulator's scenario (see internal/sim).
	judgement string
	// curves are the curves step's sizes.
	curves curveSizes
}

func fullSizes() benchSizes {
	return benchSizes{ceiling: 10 * time.Second, nodes: 1000, backlog: 100_000, e2eTasks: 20_000, footNodes: 1000, footIdle: 20 * time.Second, footTasks: 100_000, failoverTrials: 20, finishedTasks: 1_000_000, processTasks: 3000, agentsN: 1000, agentsWindow: 30 * time.Second, electionsWindow: 2 * time.Minute, judgement: "mixed", curves: fullCurves()}
}

func quickSizes() benchSizes {
	return benchSizes{ceiling: 2 * time.Second, nodes: 100, backlog: 3000, e2eTasks: 200, footNodes: 100, footIdle: time.Second, footTasks: 2000, failoverTrials: 2, finishedTasks: 20_000, processTasks: 300, agentsN: 50, agentsWindow: 3 * time.Second, electionsWindow: 5 * time.Second, judgement: "small", curves: quickCurves()}
}

// Machine is the machine and build a run measured.
type Machine struct {
	CPUs   int    `json:"cpus"`
	Go     string `json:"go"`
	OS     string `json:"os"`
	Commit string `json:"commit"`
	Quick  bool   `json:"quick"`
	Date   string `json:"date"`
	// AgentDir is where the end-to-end agents kept their data, if not
	// in the run's temporary directory.
	AgentDir string `json:"agent_dir,omitempty"`
	// LogStore is the replicas' raft.log_store.
	LogStore string `json:"log_store"`
	// AgentLimits is how the end-to-end agents enforced limits: what
	// the multi-process step's agent reported (its herd.limits label),
	// else what the run asked for.
	AgentLimits string `json:"agent_limits"`
}

// Result is what one run measured; the JSON keys are stable.
type Result struct {
	Machine            Machine `json:"machine"`
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
	E2ECPUPerTaskMs float64 `json:"e2e_cpu_per_task_ms"`
	// The same end-to-end workload on a cluster with TLS on every link
	// and ACLs on every request (agents with certificates, the client
	// with a token), measured in the same run, and its ratios to the open
	// cluster's.
	E2ESecureTasksPerSec      float64 `json:"e2e_secure_tasks_per_sec"`
	E2ESecureCPUPerTaskMs     float64 `json:"e2e_secure_cpu_per_task_ms"`
	E2ESecureSubmitToStartP50 float64 `json:"e2e_secure_submit_to_start_p50_ms"`
	E2ESecureSubmitToStartP99 float64 `json:"e2e_secure_submit_to_start_p99_ms"`
	E2ESecureThroughputRatio  float64 `json:"e2e_secure_to_open_throughput_ratio"`
	E2EChildCPUPerTaskMs      float64 `json:"e2e_task_process_cpu_per_task_ms"`
	// Raft entries the cluster committed per task (submissions, placements,
	// reports, heartbeats and explanations together).
	E2EEntriesPerTask float64 `json:"e2e_raft_entries_per_task"`
	// E2ECommandsPerTask is the Raft commands the end-to-end run applied
	// per task (E2ECommandsByType by command: submissions, reservations,
	// explanations, starts, ends), and E2ELogBytesPerTask the bytes of
	// the entries they came in.
	E2ECommandsPerTask float64            `json:"e2e_raft_commands_per_task"`
	E2ECommandsByType  map[string]float64 `json:"e2e_raft_commands_by_type,omitempty"`
	E2ELogBytesPerTask float64            `json:"e2e_raft_log_bytes_per_task"`
	// The deployment's two-agent run again with every process on one
	// CPU, beside the process ceiling of that CPU alone (step one-core).
	OneCPUProcessCeiling              float64 `json:"process_ceiling_1cpu_tasks_per_sec"`
	OneCPUProcessesTasksPerSec        float64 `json:"e2e_processes_1cpu_tasks_per_sec"`
	OneCPUProcessesToCeiling          float64 `json:"e2e_processes_1cpu_to_ceiling_ratio"`
	OneCPUHerdCPUPerTaskMs            float64 `json:"herd_cpu_per_task_ms_1cpu"`
	OneCPUProcessesServerCPUPerTaskMs float64 `json:"e2e_processes_1cpu_servers_cpu_per_task_ms"`
	OneCPUProcessesAgentCPUPerTaskMs  float64 `json:"e2e_processes_1cpu_agents_cpu_per_task_ms"`
	OneCPUProcessesTaskCPUPerTaskMs   float64 `json:"e2e_processes_1cpu_task_process_cpu_per_task_ms"`
	OneCPUProcessesStartP50           float64 `json:"e2e_processes_1cpu_submit_to_start_p50_ms"`
	OneCPUProcessesStartP99           float64 `json:"e2e_processes_1cpu_submit_to_start_p99_ms"`
	// The same for the deployment's two-agent run, read from the
	// leader's /metrics.
	ProcessesCommandsPerTask float64            `json:"e2e_processes_raft_commands_per_task"`
	ProcessesCommandsByType  map[string]float64 `json:"e2e_processes_raft_commands_by_type,omitempty"`
	ProcessesLogBytesPerTask float64            `json:"e2e_processes_raft_log_bytes_per_task"`
	E2ESlotIdleMs            float64            `json:"e2e_slot_idle_p50_ms"`
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
	// The 10k-node decision with the profile score on (every node with
	// measured power, health, a class history and a dataset; the request
	// with a class and an input), and the placements of the placement
	// step scored by the reference formula alone, with the ratio.
	Decision10kNodesProfile float64 `json:"decision_10k_nodes_profile_ms"`
	PlacementsNoProfile     float64 `json:"placements_no_profile_per_sec"`
	PlacementProfileRatio   float64 `json:"placements_profile_to_no_profile_ratio"`
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
	// The judgement simulator's report on its scenario (with the oracle's
	// makespan), and how long it took to run both.
	Judgement        *sim.Report `json:"judgement,omitempty"`
	JudgementSeconds float64     `json:"judgement_seconds,omitempty"`
	// Curves are the curves step's: how the measures grow with queue
	// depth, spec size, fleet size and finished tasks kept.
	Curves         []Curve `json:"curves,omitempty"`
	ReplicaHeapMiB float64 `json:"replica_heap_mib"`
	ReplicaAnonMiB float64 `json:"replica_rss_anon_mib"`
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
	// FailoverHandOver* are the same for a leader that stops and hands
	// its leadership over first.
	FailoverHandOverP50 float64 `json:"failover_handover_p50_ms"`
	FailoverHandOverP99 float64 `json:"failover_handover_p99_ms"`
	// FailoverExtraElections counts the elections held beyond the first,
	// over every lost-leader trial: split votes and lost elections.
	FailoverExtraElections int `json:"failover_extra_elections"`
	// Elections* count the elections three server processes held while
	// ElectionsLossPct of their packets were lost for ElectionsWindowSec,
	// with the timings before the current defaults and with the defaults,
	// and the writes acknowledged per second meanwhile; ElectionsSkipped
	// says why the step could not run here.
	ElectionsLossPct           int     `json:"elections_loss_pct,omitempty"`
	ElectionsWindowSec         float64 `json:"elections_window_sec,omitempty"`
	ElectionsBefore            float64 `json:"elections_at_loss_before"`
	ElectionsNow               float64 `json:"elections_at_loss"`
	ElectionsBeforeAckedPerSec float64 `json:"elections_at_loss_before_acked_per_sec"`
	ElectionsNowAckedPerSec    float64 `json:"elections_at_loss_acked_per_sec"`
	ElectionsSkipped           string  `json:"elections_skipped,omitempty"`
	// The failover step's load: the writes a second acknowledged just
	// before each leader was killed (median over the trials).
	FailoverLoadPerSec float64 `json:"failover_load_writes_per_sec"`
	FootprintNodes     int     `json:"footprint_nodes"`
	FootprintTasks     int     `json:"footprint_tasks"`
	FootprintIdle      string  `json:"footprint_idle_window"`
	// The real deployment: three server processes and two agent
	// processes of 64 slots, and one agent alone; herd's CPU per task is
	// every server's and agent's together.
	ProcessesTasksPerSec              float64 `json:"e2e_processes_tasks_per_sec"`
	ProcessesToCeiling                float64 `json:"e2e_processes_to_ceiling_ratio"`
	ProcessesOneAgentTasksPerSec      float64 `json:"e2e_processes_one_agent_tasks_per_sec"`
	ProcessesStartP50                 float64 `json:"e2e_processes_submit_to_start_p50_ms"`
	ProcessesStartP99                 float64 `json:"e2e_processes_submit_to_start_p99_ms"`
	HerdCPUPerTaskMs                  float64 `json:"herd_cpu_per_task_ms"`
	ProcessesOneAgentHerdCPUPerTaskMs float64 `json:"e2e_processes_one_agent_herd_cpu_per_task_ms"`
	ProcessesServerCPUPerTaskMs       float64 `json:"e2e_processes_servers_cpu_per_task_ms"`
	ProcessesLeaderCPUPerTaskMs       float64 `json:"e2e_processes_leader_cpu_per_task_ms"`
	ProcessesAgentCPUPerTaskMs        float64 `json:"e2e_processes_agents_cpu_per_task_ms"`
	ProcessesTaskCPUPerTaskMs         float64 `json:"e2e_processes_task_process_cpu_per_task_ms"`
	ProcessesServerRSSMiB             float64 `json:"e2e_processes_server_rss_mib"`
	ProcessesAgentRSSMiB              float64 `json:"e2e_processes_agent_rss_mib"`
	// The agents' lease guards (counted in the agents' CPU above too):
	// RSS, and of it the anonymous memory (the rest is the herd binary's
	// pages, shared with its agent through the page cache).
	ProcessesGuardRSSMiB       float64 `json:"e2e_processes_guard_rss_mib"`
	ProcessesGuardAnonMiB      float64 `json:"e2e_processes_guard_anon_mib"`
	ProcessesGuardCPUPerTaskMs float64 `json:"e2e_processes_guard_cpu_per_task_ms"`
	ProcessesTasks             int     `json:"e2e_processes_tasks"`
	// Many agents in one process, each a real memberlist member and the
	// agent's heartbeat and assignment protocol, against three server
	// processes: the leader's CPU idle and while placing, the servers'
	// memory, heartbeat loss and false SUSPECT/DOWN verdicts.
	Agents             int     `json:"agents"`
	AgentsReady        int     `json:"agents_ready"`
	AgentsLeaderCPUPct float64 `json:"agents_1000_leader_cpu_pct"`
	// AgentsFollowerCPUPct is the busier follower's CPU in the idle
	// window, in percent of a core.
	AgentsFollowerCPUPct   float64 `json:"agents_1000_follower_cpu_pct"`
	AgentsLeaderPlacingCPU float64 `json:"agents_1000_leader_placing_cpu_pct"`
	AgentsFalseVerdicts    int     `json:"agents_1000_false_verdicts"`
	// AgentsElections is how many elections the servers held during the
	// step; AgentsPlacedUnfinished how many of the tasks placed had not
	// succeeded two minutes after the last was submitted.
	AgentsElections        int     `json:"agents_elections"`
	AgentsPlacedUnfinished int     `json:"agents_placed_unfinished"`
	AgentsHeartbeatLoss    float64 `json:"agents_1000_heartbeat_loss"`
	AgentsServerRSSMiB     float64 `json:"agents_1000_server_rss_mib"`
	AgentsProcessCPUPct    float64 `json:"agents_1000_agents_process_cpu_pct"`
	// AgentsFleetLiveHeapMiB is the bench process's heap after a
	// collection at the end of the step: the fleet's own members.
	AgentsFleetLiveHeapMiB  float64 `json:"agents_fleet_live_heap_mib"`
	AgentsRegisterSeconds   float64 `json:"agents_1000_register_seconds"`
	AgentsPlacedTasksPerSec float64 `json:"agents_1000_placing_tasks_per_sec"`
	// AgentsIdleEntriesPerSec is how fast the leader's Raft log grew while
	// the fleet idled: each entry is a log write and an fsync on every
	// replica, which weak disks feel first.
	AgentsIdleEntriesPerSec float64 `json:"agents_idle_raft_entries_per_sec"`
	// AgentsFleetRefutations is how many times the fleet's members
	// refuted a suspicion or a death of themselves during the idle and
	// placing windows: the fleet's own gossip noise, which a real fleet,
	// each member on its own machine, keeps near none.
	AgentsFleetRefutations int `json:"agents_fleet_refutations"`
	E2ETasks               int `json:"e2e_tasks"`
	PlacementBacklog       int `json:"placement_backlog"`
	PlacementNodes         int `json:"placement_nodes"`
}

// Options choose what one run measures and where it writes.
type Options struct {
	// Quick shrinks every workload so the run takes about a minute.
	Quick bool
	// JSON, when set, is a file the results are also written to.
	JSON string
	// CPUProfile and PlacementProfile are files for a CPU profile of the
	// whole run, or of the timed placement phase only (not both).
	CPUProfile, PlacementProfile string
	// AllocProfile is a file for the whole run's allocations (this process).
	AllocProfile string
	// HeapProfile is a file for the footprint replica's heap, once loaded.
	HeapProfile string
	// Only, when not empty, names the steps to run (see Steps).
	Only []string
	// Backlog overrides the placement backlog size when positive.
	Backlog int
	// Agents overrides the agents step's fleet size when positive.
	Agents int
	// FootprintIdle overrides the footprint replica's settling time and
	// idle window (each) when positive.
	FootprintIdle time.Duration
	// AgentDir puts the end-to-end agents' data under this directory
	// instead of the run's temporary one.
	AgentDir string
	// ProcessProfiles, when set, is a directory the multi-process steps'
	// servers and agents each write a CPU profile of their whole run to
	// (HERD_CPU_PROFILE), named by run and process: one/s1.pprof, …; the
	// many-agents step's leader writes one of its idle and one of its
	// placing window (agents/leader-idle.pprof, agents/leader-placing.pprof),
	// and the bench's process, running that step's agents, one of the idle
	// window (agents/agents-idle.pprof).
	ProcessProfiles string
	// Executable is the herd binary the footprint step runs its replica
	// with; the running executable when empty.
	Executable string
	// LogStore, when set, is the raft.log_store of every replica the run
	// starts (see logStoreEnv); empty: the default, or what the
	// environment already says.
	LogStore string
	// AgentLimits, when set, is how every end-to-end agent the run starts
	// enforces limits (see agentLimitsEnv): auto, cgroup-v2, cgroup-v1,
	// rlimit or none.
	AgentLimits string
	// Curves, when not empty, names the curves the curves step measures
	// (see CurveNames); all of them otherwise.
	Curves []string
	// Plots, when set, is a directory the curves step writes one SVG
	// plot of each curve into (queue_depth.svg, …).
	Plots string
	// Progress receives a line as each step starts and ends; nil discards.
	Progress io.Writer
}

// logStoreEnv is the environment variable of raft.log_store. The run's
// replicas take it wherever they run: processes of their own inherit the
// run's environment, and startCluster applies it to the ones in the
// run's process.
const logStoreEnv = "HERD_RAFT_LOG_STORE"

// agentLimitsEnv is the environment variable of an agent's limits
// method: agent processes inherit it from the run, and the agents in the
// run's process are configured from it.
const agentLimitsEnv = "HERD_LIMITS"

// Steps are the steps of a run, in the order they run.
var Steps = []string{"decision", "placement", "e2e", "e2e-secure", "e2e-processes", "one-core", "agents", "footprint", "failover", "elections", "retention", "judgement", "curves"}

// Validate checks options that would fail only later in a run.
func (o Options) Validate() error {
	if o.Agents < 0 {
		return fmt.Errorf("agents %d must not be negative", o.Agents)
	}
	if o.FootprintIdle < 0 {
		return fmt.Errorf("footprint idle window %v must not be negative", o.FootprintIdle)
	}
	if o.CPUProfile != "" && o.PlacementProfile != "" {
		return errors.New("a whole-run CPU profile and a placement CPU profile cannot be taken together (one CPU profile at a time)")
	}
	if o.LogStore != "" && o.LogStore != config.LogStoreWAL && o.LogStore != config.LogStoreBoltDB {
		return fmt.Errorf("log store %q is neither %s nor %s", o.LogStore, config.LogStoreBoltDB, config.LogStoreWAL)
	}
	if o.AgentLimits != "" && !slices.Contains(agent.LimitMethods, o.AgentLimits) {
		return fmt.Errorf("agent limits %q is none of %s", o.AgentLimits, strings.Join(agent.LimitMethods, ", "))
	}
	for _, c := range o.Curves {
		if !slices.Contains(CurveNames, c) {
			return fmt.Errorf("no curve %q (curves: %s)", c, strings.Join(CurveNames, ", "))
		}
	}
	for _, s := range o.Only {
		if !slices.Contains(Steps, s) {
			return fmt.Errorf("no bench step %q (steps: %s)", s, strings.Join(Steps, ", "))
		}
	}
	return nil
}

// Run measures herd on this machine and writes the table to out (and the
// JSON, if asked). It runs the steps one after another in this process
// (the footprint step starts a replica process of its own).
func Run(o Options, out io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	sz, stopProfile, err := o.prepare()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer stopProfile()
	dir, err := os.MkdirTemp("", "herd-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	r := Result{Machine: machineOf(o)}
	r.FootprintNodes, r.FootprintTasks, r.E2ETasks, r.PlacementBacklog, r.PlacementNodes = sz.footNodes, sz.footTasks, sz.e2eTasks, sz.backlog, sz.nodes
	// The decision and queue timings come first, as go test -bench would
	// take them, in a fresh heap: the cluster steps leave a heap behind
	// that slows the 10k-node decision severalfold.
	steps := map[string]func() error{
		"decision":  func() error { benchDecisions(&r); return nil },
		"placement": func() error { return benchPlacement(filepath.Join(dir, "placement"), sz, o.PlacementProfile, &r) },
		"e2e":       func() error { return benchE2E(filepath.Join(dir, "e2e"), o.AgentDir, sz, &r, false) },
		"e2e-secure": func() error {
			return benchE2ESecure(filepath.Join(dir, "e2e-secure"), o.AgentDir, sz, &r)
		},
		"e2e-processes": func() error {
			return benchProcesses(o.Executable, filepath.Join(dir, "processes"), o.ProcessProfiles, sz, &r)
		},
		"one-core": func() error {
			return benchOneCore(o.Executable, filepath.Join(dir, "one-core"), sz, &r)
		},
		"agents": func() error {
			profiles := ""
			if o.ProcessProfiles != "" {
				profiles = filepath.Join(o.ProcessProfiles, "agents")
			}
			return benchAgents(o.Executable, filepath.Join(dir, "agents"), profiles, sz, &r)
		},
		"footprint": func() error {
			return benchFootprint(o.Executable, filepath.Join(dir, "footprint"), sz, o.HeapProfile, &r)
		},
		"failover":  func() error { return benchFailover(filepath.Join(dir, "failover"), sz, &r) },
		"elections": func() error { return benchElections(o.Executable, filepath.Join(dir, "elections"), sz, &r) },
		"retention": func() error { return benchRetention(sz, &r) },
		"judgement": func() error { return benchJudgement(sz, &r) },
		"curves": func() error {
			if err := benchCurves(o.Executable, filepath.Join(dir, "curves"), sz.curves, o.Curves, progress, &r); err != nil {
				return err
			}
			if o.Plots == "" {
				return nil
			}
			return writePlots(o.Plots, r.Curves)
		},
	}
	for _, name := range Steps {
		if len(o.Only) > 0 && !slices.Contains(o.Only, name) {
			continue
		}
		fmt.Fprintf(progress, "bench: %s…\n", name)
		start := time.Now()
		if err := steps[name](); err != nil {
			return fmt.Errorf("bench %s: %w", name, err)
		}
		fmt.Fprintf(progress, "bench: %s done in %s\n", name, time.Since(start).Round(time.Millisecond))
	}
	if o.AllocProfile != "" {
		if err := writeAllocProfile(o.AllocProfile); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	Print(out, &r)
	if o.JSON != "" {
		b, _ := json.MarshalIndent(&r, "", "  ")
		if err := os.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: write %s: %w", o.JSON, err)
		}
	}
	return nil
}

// prepare completes the options (the binary to run, the environment the
// steps read) and returns the sizes of the run's workloads, with the
// profile of the whole run started when one is asked for (stop ends it).
func (o *Options) prepare() (sz benchSizes, stop func(), err error) {
	stop = func() {}
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return sz, stop, fmt.Errorf("find the herd binary: %w", err)
		}
		o.Executable = exe
	}
	if o.LogStore != "" {
		if err := os.Setenv(logStoreEnv, o.LogStore); err != nil {
			return sz, stop, err
		}
	}
	if o.AgentLimits != "" {
		if err := os.Setenv(agentLimitsEnv, o.AgentLimits); err != nil {
			return sz, stop, err
		}
	}
	sz = fullSizes()
	if o.Quick {
		sz = quickSizes()
	}
	if o.Backlog > 0 {
		sz.backlog = o.Backlog
	}
	if o.Agents > 0 {
		sz.agentsN = o.Agents
		// The fleet curve goes no further than the fleet asked for.
		sz.curves.fleets = slices.DeleteFunc(slices.Clone(sz.curves.fleets), func(n int) bool { return n > o.Agents })
	}
	if o.FootprintIdle > 0 {
		sz.footIdle = o.FootprintIdle
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return sz, stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return sz, stop, err
		}
		stop = func() { pprof.StopCPUProfile(); f.Close() }
	}
	return sz, stop, nil
}

// machineOf describes the machine and build a run measures.
func machineOf(o Options) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Commit: gitCommit(), Quick: o.Quick, Date: time.Now().UTC().Format(time.RFC3339)}
	m.LogStore = config.DefaultRaft().LogStore
	if v := os.Getenv(logStoreEnv); v != "" {
		m.LogStore = v
	}
	m.AgentLimits = "auto"
	if v := os.Getenv(agentLimitsEnv); v != "" {
		m.AgentLimits = v
	}
	return m
}

// Print writes a run's results as a table, one measure a line.
func Print(w io.Writer, r *Result) {
	tb := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tb.Flush()
	row(tb, "MEASURE", "VALUE", "WORKLOAD")
	row(tb, "raft ceiling", fmt.Sprintf("%.0f entries/s", r.RaftCeiling), "3 replicas, fsync, 256 appliers, one reservation-sized entry each")
	row(tb, "placements", fmt.Sprintf("%.0f /s (%.2f× ceiling, %d entries, %.2f cores busy)", r.Placements, r.PlacementToCeiling, r.PlacementEntries, r.PlacementCPUCores), fmt.Sprintf("%d nodes, %d pending", r.PlacementNodes, r.PlacementBacklog))
	row(tb, "placements, profiles off", fmt.Sprintf("%.0f /s; profiles on reach %.2f× of it", r.PlacementsNoProfile, r.PlacementProfileRatio), "the same, scored by the reference formula alone")
	row(tb, "end to end", fmt.Sprintf("%.0f tasks/s, submit→start p50 %.1f ms, p99 %.1f ms", r.E2ETasksPerSec, r.E2ESaturatedStartP50, r.E2ESaturatedStartP99), fmt.Sprintf("%d × true at once (batches of %d), 3 replicas + 4 agents", r.E2ETasks, e2eSubmitBatch))
	row(tb, "process ceiling", fmt.Sprintf("%.0f tasks/s (one at a time %.0f, %d at once %.0f), %.2f ms of CPU in each; end to end reached %.2f× of it", r.ProcessCeiling, r.ProcessSequential, e2eAgents*e2eSlotsPerAgent, r.ProcessConcurrent, r.ProcessCPUPerTaskMs, r.E2EToProcessCeiling), "true started and reaped, no scheduler; the better rate is the ceiling")
	row(tb, "end to end, CPU per task", fmt.Sprintf("%.2f ms in herd, %.2f ms in the task's process; %.2f Raft entries", r.E2ECPUPerTaskMs, r.E2EChildCPUPerTaskMs, r.E2EEntriesPerTask), "same run; herd is 3 replicas, 4 agents and the client in one process")
	row(tb, "end to end, log per task", fmt.Sprintf("%s Raft commands, %.0f bytes of log", commandsText(r.E2ECommandsPerTask, r.E2ECommandsByType), r.E2ELogBytesPerTask), "same run, as the leader applied them")
	row(tb, "end to end, processes", fmt.Sprintf("%.0f tasks/s (%.2f× the process ceiling; one agent alone %.0f /s), submit→start p50 %.1f ms, p99 %.1f ms", r.ProcessesTasksPerSec, r.ProcessesToCeiling, r.ProcessesOneAgentTasksPerSec, r.ProcessesStartP50, r.ProcessesStartP99), fmt.Sprintf("%d × true in batches of 1,000; 3 herd server processes, 2 herd agent processes of %d slots, limits by %s", r.ProcessesTasks, processSlots, r.Machine.AgentLimits))
	row(tb, "processes, CPU per task", fmt.Sprintf("herd %.2f ms (servers %.2f, of it the leader %.2f; agents %.2f, of it their lease guards %.3f; one agent alone: herd %.2f), the task's process %.2f ms; RSS server %.0f MiB, agent %.0f MiB, lease guard %.1f MiB (%.1f MiB anonymous)", r.HerdCPUPerTaskMs, r.ProcessesServerCPUPerTaskMs, r.ProcessesLeaderCPUPerTaskMs, r.ProcessesAgentCPUPerTaskMs, r.ProcessesGuardCPUPerTaskMs, r.ProcessesOneAgentHerdCPUPerTaskMs, r.ProcessesTaskCPUPerTaskMs, r.ProcessesServerRSSMiB, r.ProcessesAgentRSSMiB, r.ProcessesGuardRSSMiB, r.ProcessesGuardAnonMiB), "same run, from /proc of each process")
	row(tb, "processes, log per task", fmt.Sprintf("%s Raft commands, %.0f bytes of log", commandsText(r.ProcessesCommandsPerTask, r.ProcessesCommandsByType), r.ProcessesLogBytesPerTask), "same run, as the leader applied them")
	row(tb, "processes, one CPU", fmt.Sprintf("%.0f tasks/s (%.2f× the one-CPU process ceiling of %.0f /s), submit→start p50 %.1f ms, p99 %.1f ms; herd %.2f ms per task (servers %.2f, agents %.2f), the task's process %.2f ms", r.OneCPUProcessesTasksPerSec, r.OneCPUProcessesToCeiling, r.OneCPUProcessCeiling, r.OneCPUProcessesStartP50, r.OneCPUProcessesStartP99, r.OneCPUHerdCPUPerTaskMs, r.OneCPUProcessesServerCPUPerTaskMs, r.OneCPUProcessesAgentCPUPerTaskMs, r.OneCPUProcessesTaskCPUPerTaskMs), "the same deployment, every process pinned to the first CPU (taskset -c 0)")
	row(tb, "many agents", fmt.Sprintf("%d READY; leader %.1f%% of a core idle (%.1f Raft entries/s), the busier follower %.1f%%, %.1f%% placing %.0f tasks/s; %d false verdicts, heartbeat loss %.3f; server RSS %.0f MiB; agents' process %.0f%% of a core, %.0f MiB live heap, %d refutations among them; registered in %.1f s; %d elections; %d placed tasks unfinished", r.AgentsReady, r.AgentsLeaderCPUPct, r.AgentsIdleEntriesPerSec, r.AgentsFollowerCPUPct, r.AgentsLeaderPlacingCPU, r.AgentsPlacedTasksPerSec, r.AgentsFalseVerdicts, r.AgentsHeartbeatLoss, r.AgentsServerRSSMiB, r.AgentsProcessCPUPct, r.AgentsFleetLiveHeapMiB, r.AgentsFleetRefutations, r.AgentsRegisterSeconds, r.AgentsElections, r.AgentsPlacedUnfinished), fmt.Sprintf("%d agents in one process (memberlist members with their own UDP sockets, heartbeats, assignment long polls) against 3 server processes", r.Agents))
	row(tb, "submit→start, light load", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.E2ESubmitToStartP50, r.E2ESubmitToStartP99), fmt.Sprintf("%.0f tasks/s steady, same cluster", r.E2ELightRate))
	row(tb, "end to end, TLS and ACLs", fmt.Sprintf("%.0f tasks/s (%.2f× open), %.2f ms of herd CPU per task; light load p50 %.1f ms, p99 %.1f ms", r.E2ESecureTasksPerSec, r.E2ESecureThroughputRatio, r.E2ESecureCPUPerTaskMs, r.E2ESecureSubmitToStartP50, r.E2ESecureSubmitToStartP99), "the same two workloads on a cluster with mutual TLS on every link and ACLs on every request")
	row(tb, "decision", fmt.Sprintf("%.3f / %.3f / %.3f ms", r.Decision100Nodes, r.Decision1kNodes, r.Decision10kNodes), "filter+score+select over 100 / 1k / 10k nodes")
	row(tb, "decision, profiles on", fmt.Sprintf("%.3f ms", r.Decision10kNodesProfile), "the same over 10k nodes with the profile score and a weighted random choice")
	row(tb, "queue selection", fmt.Sprintf("%.2f / %.2f ms (unindexed scan of 100k: %.2f ms; full order: %.0f ms)", r.QueueSelect10k, r.QueueSelect100k, r.QueueScan100k, r.QueueOrder100k), "head of one 512-task batch from the leader's indexed queue of 10k / 100k pending")
	row(tb, "replica memory", fmt.Sprintf("RSS %.0f MiB (anon %.0f, mapped files %.0f), heap in use %.0f MiB; peak %.0f, settled %.0f", r.ReplicaRSSMiB, r.ReplicaAnonMiB, r.ReplicaFileMiB, r.ReplicaHeapMiB, r.ReplicaPeakRSSMiB, r.ReplicaSettledRSSMiB), fmt.Sprintf("one replica process, %d nodes, %d tasks; peak: the most resident at once, load included; settled: after the idle window", r.FootprintNodes, r.FootprintTasks))
	row(tb, "replica memory, limited", fmt.Sprintf("RSS %.0f MiB (anon %.0f); loaded at %.0f submits/s against %.0f", r.LimitedRSSMiB, r.LimitedAnonMiB, r.LimitedLoadPerSec, r.FootprintLoadPerSec), fmt.Sprintf("the same load into a fresh replica with memory_limit_mib = %d", benchMemoryLimitMiB))
	row(tb, "replica CPU, idle backlog", fmt.Sprintf("%.1f%% of a core", r.ReplicaIdleCPUPercent), fmt.Sprintf("same replica, over %[1]s starting %[1]s after the load: every node drained, the leader explains why tasks wait", r.FootprintIdle))
	row(tb, "snapshot", fmt.Sprintf("%d bytes, saved in %.0f ms, restored in %.0f ms", r.SnapshotBytes, r.SnapshotSaveMs, r.SnapshotRestoreMs), "same replica; the archive restored into it through the API")
	row(tb, "finished tasks", fmt.Sprintf("heap %.0f MiB (%.0f bytes each); %.1f MiB after retention", r.FinishedHeapMiB, r.FinishedBytesPerTask, r.AfterRetentionHeapMiB), fmt.Sprintf("%d succeeded tasks in one replica's state, then forgotten", r.FinishedTasks))
	if j := r.Judgement; j != nil {
		wrong, missed, after := 0, 0, 0
		for _, k := range j.Kinds {
			wrong += k.Nodes - k.Right
			missed += k.Missed
			after = max(after, k.MaxAfterFailure)
		}
		row(tb, "judgements", fmt.Sprintf("%d nodes judged wrongly, %d black holes missed, each caught by its failure %d at most; hung attempts flagged at %.1f× the fleet median; %d of %d bad tasks blamed, %d good; makespan %.2f× the oracle's; simulated in %.1f s",
			wrong, missed, after+1, j.MaxFlagRatio, j.BadTasksBlamed, j.BadTasks, j.GoodTasksBlamed, j.MakespanRatio, r.JudgementSeconds),
			fmt.Sprintf("herd sim -scenario %s: %d tasks over %s simulated, the real scheduler and FSM", j.Scenario, j.Tasks, j.Simulated.Round(time.Minute)))
	}
	for _, c := range r.Curves {
		for _, p := range c.Points {
			row(tb, "curve "+c.Name, curvePointText(p), fmt.Sprintf("%s: %s", c.X, humanCount(p.X)))
		}
	}
	row(tb, "restart to ready", fmt.Sprintf("%.0f ms", r.RestartToReadyMs), "same replica, from its data dir")
	row(tb, "failover", fmt.Sprintf("p50 %.0f ms, p99 %.0f ms; the load ran at %.0f writes/s when the leader died; %d elections beyond the first", r.FailoverP50, r.FailoverP99, r.FailoverLoadPerSec, r.FailoverExtraElections), fmt.Sprintf("leader lost under load (halted, no handover; %d writers, one submit each per %s, through every replica) → first acknowledged write, default timings", failoverLoadWriters, failoverLoadEvery))
	row(tb, "failover, handed over", fmt.Sprintf("p50 %.0f ms, p99 %.0f ms", r.FailoverHandOverP50, r.FailoverHandOverP99), "the same, the leader stopped as on SIGTERM: it hands its leadership over before it goes")
	if r.ElectionsSkipped != "" {
		row(tb, "elections under loss", "not run: "+r.ElectionsSkipped, "three server processes losing a share of their packets")
	} else {
		row(tb, "elections under loss", fmt.Sprintf("%.0f with the earlier timings (1.5 s, 1.5 s, 750 ms), %.0f with the defaults; writes acknowledged %.1f /s and %.1f /s",
			r.ElectionsBefore, r.ElectionsNow, r.ElectionsBeforeAckedPerSec, r.ElectionsNowAckedPerSec),
			fmt.Sprintf("3 server processes in a network namespace losing %d%% of their packets for %.0f s per timing set, a write offered every 50 ms", r.ElectionsLossPct, r.ElectionsWindowSec))
	}
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

// row writes one line of the table: columns separated by tabs.
func row(tw *tabwriter.Writer, cols ...string) {
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
}
