package bench

import (
	"context"
	"fmt"
	"herd/internal/cputime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/fsm"
	"herd/internal/pki"
	"herd/test/localcluster"
)

// benchE2E submits trivial tasks through the HTTP API and waits for them
// to succeed on four in-process agents running real subprocesses.
func benchE2E(dir, agentDir string, sz benchSizes, r *Result, secure bool) error {
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
	if !secure {
		if err := benchProcessCeiling(sz.ceiling, e2eAgents*e2eSlotsPerAgent, r); err != nil {
			return err
		}
	}
	pkiDir := ""
	if secure {
		pkiDir = filepath.Join(dir, "pki")
	}
	c, err := startCluster(dir, pkiDir)
	if err != nil {
		return err
	}
	defer c.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := startE2EAgents(c, agentDir, pkiDir); err != nil {
		return err
	}
	leader, err := leader(c)
	if err != nil {
		return err
	}
	for {
		nodes, _ := leader.FSM().State().Nodes()
		if len(nodes) == e2eAgents {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cl, err := api.NewClient(c.HTTPAddrs()...)
	if err != nil {
		return err
	}
	cl.Retries = 20
	if secure {
		if err := secureClient(cl, pkiDir); err != nil {
			return err
		}
	}
	if err := e2eSaturated(ctx, leader, cl, sz, r); err != nil {
		return err
	}
	e2eBreakdown(leader, r)
	return e2eLight(ctx, leader, cl, sz, r)
}

// startE2EAgents starts the end-to-end agents, each talking to the
// replicas in its own order.
func startE2EAgents(c *localcluster.Cluster, agentDir, pkiDir string) error {
	addrs := c.HTTPAddrs()
	for i := range e2eAgents {
		cfg := agent.Config{
			ID: fmt.Sprintf("bench-agent-%d", i), Servers: []string{addrs[i%3], addrs[(i+1)%3], addrs[(i+2)%3]},
			DataDir: filepath.Join(agentDir, fmt.Sprintf("agent-%d", i)), Slots: e2eSlotsPerAgent,
			Resources: api.Resources{CPUMillis: 32000, MemoryMB: 32768}, Limits: os.Getenv(agentLimitsEnv),
		}
		if pkiDir != "" {
			files, err := localcluster.IssueTo(pkiDir, pki.Identity{Role: pki.RoleAgent, ID: cfg.ID})
			if err != nil {
				return err
			}
			cfg.TLS = files
		}
		if _, err := c.StartAgent(cfg); err != nil {
			return err
		}
	}
	return nil
}

// e2eSaturated submits the whole workload at once and times it until
// every task succeeded, with the CPU and Raft entries it took.
func e2eSaturated(ctx context.Context, leader *cluster.Server, cl *api.Client, sz benchSizes, r *Result) error {
	return e2eSaturatedWith(ctx, leader, cl, sz, r, e2eSubmitBatch, func(i int) api.TaskSpec {
		return api.TaskSpec{Name: "e2e", IdempotencyKey: fmt.Sprint("e2e-", i), Command: []string{"true"}}
	})
}

// e2eSaturatedWith is e2eSaturated with task i's spec given by spec,
// submitted in batches of batch.
func e2eSaturatedWith(ctx context.Context, leader *cluster.Server, cl *api.Client, sz benchSizes, r *Result, batch int, spec func(i int) api.TaskSpec) error {
	start := time.Now()
	cpuBefore, childBefore := cputime.Self(), cputime.Children()
	indexBefore := leader.FSM().Index()
	commandsBefore, bytesBefore := leader.FSM().AppliedCommands(), leader.FSM().AppliedBytes()
	// Submitted as a client with 20,000 tasks would: in batches (one Raft
	// entry each), a few in flight at once.
	if err := submitBatches(ctx, cl, sz.e2eTasks, batch, spec); err != nil {
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
	r.E2ECPUPerTaskMs, r.E2EChildCPUPerTaskMs = perTask(cputime.Self()-cpuBefore), perTask(cputime.Children()-childBefore)
	r.E2EEntriesPerTask = float64(leader.FSM().Index()-indexBefore) / float64(sz.e2eTasks)
	r.E2ECommandsPerTask, r.E2ECommandsByType = commandsPerTask(commandsBefore, leader.FSM().AppliedCommands(), sz.e2eTasks)
	r.E2ELogBytesPerTask = float64(leader.FSM().AppliedBytes()-bytesBefore) / float64(sz.e2eTasks)
	return nil
}

// commandsPerTask is the Raft commands applied between two counts per
// task, in all and by command.
func commandsPerTask(before, after map[string]uint64, tasks int) (float64, map[string]float64) {
	var total uint64
	by := map[string]float64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			total += d
			by[name] = float64(d) / float64(tasks)
		}
	}
	return float64(total) / float64(tasks), by
}

// commandsText is a run's commands per task, the most frequent first.
func commandsText(total float64, by map[string]float64) string {
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if by[names[i]] != by[names[j]] {
			return by[names[i]] > by[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, by[n])
	}
	return fmt.Sprintf("%.2f (%s)", total, strings.Join(parts, ", "))
}

// e2eBreakdown reads where a saturated task's time went from the attempt
// records: submit to start, reserved to started, the run, slot idle time.
func e2eBreakdown(leader *cluster.Server, r *Result) {
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
}

// e2eLight measures submit→start at a light steady rate: one task every
// 20 ms on the now idle cluster.
func e2eLight(ctx context.Context, leader *cluster.Server, cl *api.Client, sz benchSizes, r *Result) error {
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
	var lat []float64
	deadline := time.Now().Add(time.Minute)
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
func benchProcessCeiling(d time.Duration, workers int, r *Result) error {
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
	childBefore, begin := cputime.Children(), time.Now()
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
	return float64(n) / time.Since(begin).Seconds(), float64((cputime.Children() - childBefore).Microseconds()) / 1000 / float64(n), nil
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

// e2eSubmitBatch is how many tasks the end-to-end run submits per request.
const e2eSubmitBatch = 500

// benchE2ESecure runs the end-to-end workloads again on a cluster with
// TLS and ACLs, and compares them with the open cluster's when that step
// ran too.
func benchE2ESecure(dir, agentDir string, sz benchSizes, r *Result) error {
	var sr Result
	if err := benchE2E(dir, agentDir, sz, &sr, true); err != nil {
		return err
	}
	r.E2ESecureTasksPerSec, r.E2ESecureCPUPerTaskMs = sr.E2ETasksPerSec, sr.E2ECPUPerTaskMs
	r.E2ESecureSubmitToStartP50, r.E2ESecureSubmitToStartP99 = sr.E2ESubmitToStartP50, sr.E2ESubmitToStartP99
	if r.E2ETasksPerSec > 0 {
		r.E2ESecureThroughputRatio = r.E2ESecureTasksPerSec / r.E2ETasksPerSec
	}
	return nil
}

// secureClient makes cl trust the bench cluster's CA and bootstraps the
// management token it then carries.
func secureClient(cl *api.Client, pkiDir string) error {
	tc, err := localcluster.ClientTLS(pkiDir)
	if err != nil {
		return err
	}
	tr := api.NewTransport()
	tr.TLSClientConfig = tc
	cl.SetHTTPClient(&http.Client{Transport: tr, Timeout: 60 * time.Second})
	cl.WithHTTPS()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := cl.BootstrapACL(ctx)
	if err != nil {
		return fmt.Errorf("ACL bootstrap: %w", err)
	}
	cl.SetToken(tok.SecretID)
	return nil
}
