package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
	"herd/cluster"
	"herd/fsm"
	"herd/scheduler"
)

// Curve is how one workload's measures grow with one of its sizes: a
// point per size, smallest first. A site reads where its own load sits;
// a measure that grows faster than its size is a defect to fix or
// explain.
type Curve struct {
	// Name is the size that varies: queue_depth, spec_bytes, fleet_size
	// or retained_tasks.
	Name string `json:"name"`
	// X says what the size counts.
	X      string       `json:"x"`
	Points []CurvePoint `json:"points"`
}

// CurvePoint is what one size measured. A curve fills the measures its
// workload has; the others stay zero and are left out of the JSON.
type CurvePoint struct {
	X float64 `json:"x"`
	// TasksPerSec is the saturated rate of trivial tasks through the
	// in-process cluster (queue depth, spec size) or placed at a low rate
	// through the fleet (fleet size).
	TasksPerSec float64 `json:"tasks_per_sec,omitempty"`
	// SubmitToStartP99Ms is submit→start at 50 tasks/s beside the load.
	SubmitToStartP99Ms float64 `json:"submit_to_start_p99_ms,omitempty"`
	// CPUCores is the in-process cluster's CPU (three replicas and four
	// agents, not the tasks' processes) while saturated.
	CPUCores float64 `json:"cpu_cores,omitempty"`
	// LeaderCPUPct and LeaderPlacingCPUPct are the leader process's share
	// of a core with the fleet idle and placing (fleet size).
	LeaderCPUPct        float64 `json:"leader_cpu_pct,omitempty"`
	LeaderPlacingCPUPct float64 `json:"leader_placing_cpu_pct,omitempty"`
	// RSSMiB is the in-process cluster's resident memory (three replicas
	// and four agents) after the load, or the largest server's (fleet
	// size).
	RSSMiB float64 `json:"rss_mib,omitempty"`
	// HeapMiB is the live heap after a collection: the in-process
	// cluster's (three replicas and four agents) after the load, or one
	// replica's state's (retained tasks).
	HeapMiB float64 `json:"heap_mib,omitempty"`
	// LogBytesPerTask is the Raft log's bytes per task (spec size).
	LogBytesPerTask float64 `json:"log_bytes_per_task,omitempty"`
	// SnapshotMiB, SnapshotSeconds and RestoreSeconds are the state's
	// snapshot on disk, the time to write it and to restore a replica
	// from it (retained tasks).
	SnapshotMiB     float64 `json:"snapshot_mib,omitempty"`
	SnapshotSeconds float64 `json:"snapshot_seconds,omitempty"`
	RestoreSeconds  float64 `json:"restore_seconds,omitempty"`
	// FalseVerdicts counts SUSPECT and DOWN verdicts of live agents, and
	// Ready the agents that got READY (fleet size).
	FalseVerdicts int `json:"false_verdicts,omitempty"`
	Ready         int `json:"ready,omitempty"`
}

// curveSizes are the sizes each curve measures.
type curveSizes struct {
	depths, specBytes, fleets, retained []int
	// flow is how many trivial tasks each in-process point runs.
	flow int
	// fleetWindow is each fleet point's idle and placing window.
	fleetWindow time.Duration
}

func fullCurves() curveSizes {
	return curveSizes{
		depths: []int{1_000, 10_000, 100_000, 1_000_000}, specBytes: []int{100, 1_000, 10_000, 60_000},
		fleets: []int{10, 100, 1_000, 5_000}, retained: []int{100_000, 1_000_000, 10_000_000},
		flow: 5_000, fleetWindow: 10 * time.Second,
	}
}

func quickCurves() curveSizes {
	return curveSizes{
		depths: []int{100, 1_000}, specBytes: []int{100, 10_000}, fleets: []int{5, 20}, retained: []int{5_000, 20_000},
		flow: 200, fleetWindow: 2 * time.Second,
	}
}

// CurveNames are the curves the curves step measures, in its order.
var CurveNames = []string{"queue_depth", "spec_bytes", "fleet_size", "retained_tasks"}

// benchCurves measures each curve (those named in only, or all), one
// point after another, each point on a fresh cluster (or state) of its
// own under dir.
func benchCurves(exe, dir string, cs curveSizes, only []string, progress io.Writer, r *Result) error {
	steps := []struct {
		name, x string
		sizes   []int
		// bytesPer is about the resident memory each unit of the size
		// takes at the point's peak (0: small whatever the size).
		bytesPer int64
		point    func(dir string, size int) (CurvePoint, error)
	}{
		{"queue_depth", "tasks pending that no node can take", cs.depths, 2500, func(d string, n int) (CurvePoint, error) {
			return curveInProcess(d, n, 0, cs.flow)
		}},
		{"spec_bytes", "bytes of environment in each task's spec", cs.specBytes, 0, func(d string, n int) (CurvePoint, error) {
			return curveInProcess(d, 0, n, cs.flow)
		}},
		{"fleet_size", "lightweight agents", cs.fleets, 2 << 20, func(d string, n int) (CurvePoint, error) {
			return curveFleet(exe, d, n, cs.fleetWindow)
		}},
		{"retained_tasks", "finished tasks kept", cs.retained, 1800, func(d string, n int) (CurvePoint, error) {
			return curveRetained(d, n)
		}},
	}
	for _, s := range steps {
		if len(only) > 0 && !slices.Contains(only, s.name) {
			continue
		}
		c := Curve{Name: s.name, X: s.x}
		for _, n := range s.sizes {
			// A point the machine cannot hold is left out, saying so,
			// rather than taking the machine down with it.
			if need, have := s.bytesPer*int64(n), memTotalKiB()<<10; have > 0 && need > have*3/4 {
				fmt.Fprintf(progress, "bench: curves: %s %d left out: it needs about %.1f GiB, this machine has %.1f\n",
					s.name, n, float64(need)/(1<<30), float64(have)/(1<<30))
				continue
			}
			fmt.Fprintf(progress, "bench: curves: %s %d…\n", s.name, n)
			p, err := s.point(filepath.Join(dir, fmt.Sprintf("%s-%d", s.name, n)), n)
			if err != nil {
				return fmt.Errorf("%s %d: %w", s.name, n, err)
			}
			p.X = float64(n)
			c.Points = append(c.Points, p)
		}
		r.Curves = append(r.Curves, c)
	}
	return nil
}

// curveInProcess is one point of the in-process cluster (three replicas,
// four agents running real `true`): depth tasks that no node can take
// (they require a label no node has) are loaded first, then flow trivial
// tasks, each with an environment of padBytes, are run at once, and then
// a light load times submit→start.
func curveInProcess(dir string, depth, padBytes, flow int) (CurvePoint, error) {
	// What earlier points left behind goes back to the system first, so
	// that the resident memory read at the end is this point's.
	debug.FreeOSMemory()
	c, err := startCluster(dir, "")
	if err != nil {
		return CurvePoint{}, err
	}
	defer c.Shutdown()
	if err := startE2EAgents(c, dir, ""); err != nil {
		return CurvePoint{}, err
	}
	leader, err := leader(c)
	if err != nil {
		return CurvePoint{}, err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if nodes, _ := leader.FSM().State().Nodes(); len(nodes) == e2eAgents {
			break
		}
		if time.Now().After(deadline) {
			return CurvePoint{}, fmt.Errorf("the %d agents did not register in a minute", e2eAgents)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := loadUnplaceable(ctx, leader, depth); err != nil {
		return CurvePoint{}, err
	}
	cl, err := api.NewClient(c.HTTPAddrs()...)
	if err != nil {
		return CurvePoint{}, err
	}
	cl.Retries = 20
	var env map[string]string
	if padBytes > 0 {
		env = map[string]string{"PAD": strings.Repeat("x", padBytes)}
	}
	var res Result
	sz := benchSizes{e2eTasks: flow}
	// Batches stay within the API's body limit (1 MiB) whatever the spec's size.
	batch := max(1, min(e2eSubmitBatch, (512<<10)/max(padBytes, 1)))
	if err := e2eSaturatedWith(ctx, leader, cl, sz, &res, batch, func(i int) api.TaskSpec {
		return api.TaskSpec{Name: "curve", IdempotencyKey: fmt.Sprint("curve-", i), Command: []string{"true"}, Env: env}
	}); err != nil {
		return CurvePoint{}, err
	}
	p := CurvePoint{
		TasksPerSec: res.E2ETasksPerSec, CPUCores: res.E2ECPUPerTaskMs * res.E2ETasksPerSec / 1000,
		LogBytesPerTask: res.E2ELogBytesPerTask,
	}
	if err := e2eLight(ctx, leader, cl, benchSizes{}, &res); err != nil {
		return CurvePoint{}, err
	}
	p.SubmitToStartP99Ms = res.E2ESubmitToStartP99
	p.RSSMiB = procRSSMiB(os.Getpid(), "VmRSS")
	p.HeapMiB = float64(heapAfterGC()) / (1 << 20)
	return p, nil
}

// loadUnplaceable commits n tasks that no node can take, in chunks
// through the leader, as submissions would.
func loadUnplaceable(ctx context.Context, leader *cluster.Server, n int) error {
	const chunk = 50_000
	now := time.Now().UTC()
	start := time.Now()
	for from := 0; from < n; from += chunk {
		cmds := make([][]byte, 0, min(chunk, n-from))
		for i := from; i < min(from+chunk, n); i++ {
			b, _ := fsm.Encode(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: fmt.Sprintf("backlog-%08d", i), SubmittedAt: now, Spec: fsm.TaskSpec{Name: "backlog", TaskShape: &fsm.TaskShape{
				Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
				RequiredLabels: map[string]string{"zone": "nowhere"}, Resources: scheduler.Resources{CPUMillis: 10, MemoryMB: 1},
				TimeoutSeconds: 60, MaxAttempts: 1, Submitter: "backlog",
			}}})
			cmds = append(cmds, b)
		}
		if err := applyChunks(ctx, leader, cmds); err != nil {
			return err
		}
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "bench: curves: %d unplaceable tasks loaded in %s\n", n, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// curveFleet is one point of the agents step at a fleet of n.
func curveFleet(exe, dir string, n int, window time.Duration) (CurvePoint, error) {
	var res Result
	if err := benchAgents(exe, dir, "", benchSizes{agentsN: n, agentsWindow: window}, &res); err != nil {
		return CurvePoint{}, err
	}
	return CurvePoint{
		TasksPerSec: res.AgentsPlacedTasksPerSec, LeaderCPUPct: res.AgentsLeaderCPUPct, LeaderPlacingCPUPct: res.AgentsLeaderPlacingCPU,
		RSSMiB: res.AgentsServerRSSMiB, FalseVerdicts: res.AgentsFalseVerdicts, Ready: res.AgentsReady,
	}, nil
}

// curveRetained is one point of the retention step at n finished tasks:
// one replica's state's heap with them all kept, its snapshot written to
// disk, and a fresh replica's state restored from that snapshot.
func curveRetained(dir string, n int) (CurvePoint, error) {
	f, _, baseline, err := loadFinished(n)
	if err != nil {
		return CurvePoint{}, err
	}
	p := CurvePoint{HeapMiB: float64(heapAfterGC()-baseline) / (1 << 20)}
	store, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	if err != nil {
		return p, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	snap, err := f.Snapshot()
	if err != nil {
		return p, err
	}
	sink, err := store.Create(raft.SnapshotVersionMax, f.Index(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		return p, err
	}
	if err := snap.Persist(sink); err != nil {
		return p, fmt.Errorf("persist the snapshot: %w", err)
	}
	snap.Release()
	p.SnapshotSeconds = time.Since(start).Seconds()
	// Only the restored state is held from here on, as on a replica that
	// restarts from its snapshot.
	f, snap = nil, nil
	runtime.GC()
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		return p, err
	}
	defer rc.Close()
	p.SnapshotMiB = float64(meta.Size) / (1 << 20)
	start = time.Now()
	restored := fsm.New(nil)
	if err := restored.Restore(rc); err != nil {
		return p, fmt.Errorf("restore the snapshot: %w", err)
	}
	p.RestoreSeconds = time.Since(start).Seconds()
	if counts, _ := restored.State().CountTasks(); counts[fsm.TaskSucceeded] != n {
		return p, fmt.Errorf("the restored state holds %d finished tasks, not %d", counts[fsm.TaskSucceeded], n)
	}
	return p, nil
}
