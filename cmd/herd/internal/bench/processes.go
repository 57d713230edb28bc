package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"herd/api"
	"herd/test/localcluster"
)

// site is the deployment users run: three `herd server` processes and
// `herd agent` processes, each its own process, on loopback.
type site struct {
	exe string
	dir string
	// profiles, when set, is a directory each process writes a CPU
	// profile of its run to, up to endProfiles.
	profiles string
	// debug starts the servers with their debug endpoints, for profiles
	// of chosen windows (see saveProfile).
	debug bool
	// prefix runs every process under a command (taskset -c 0).
	prefix  []string
	servers []*exec.Cmd
	http    []string
	gossip  []string
	agents  []*exec.Cmd
	cl      *api.Client
}

// startSite starts three servers (with gossip) and waits for a leader.
func startSite(exe, dir, profiles string) (*site, error) {
	return (&site{exe: exe, dir: dir, profiles: profiles}).start()
}

func (s *site) start() (*site, error) {
	var raft []string
	for range 3 {
		h, err1 := localcluster.FreeAddr()
		r, err2 := localcluster.FreeAddr()
		g, err3 := localcluster.FreeAddr()
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		s.http, raft, s.gossip = append(s.http, h), append(raft, r), append(s.gossip, g)
	}
	for i := range 3 {
		args := []string{"server", "-id", fmt.Sprintf("s%d", i+1), "-data-dir", filepath.Join(s.dir, fmt.Sprintf("s%d", i+1)),
			"-http-addr", s.http[i], "-raft-addr", raft[i], "-gossip-addr", s.gossip[i],
			"-bootstrap-expect", "3", "-join", strings.Join(s.http, ","), "-log-level", "error", fmt.Sprintf("-enable-debug=%t", s.debug)}
		cmd, err := s.spawn(fmt.Sprintf("s%d", i+1), args)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.servers = append(s.servers, cmd)
	}
	cl, err := api.NewClient(s.http...)
	if err != nil {
		s.stop()
		return nil, err
	}
	cl.Retries, cl.RetryWait = 100, 100*time.Millisecond
	s.cl = cl
	if err := waitReady(context.Background(), cl, time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *site) spawn(name string, args []string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.exe, args...)
	if len(s.prefix) > 0 {
		cmd = exec.Command(s.prefix[0], append(append(s.prefix[1:len(s.prefix):len(s.prefix)], s.exe), args...)...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if s.profiles != "" {
		cmd.Env = append(os.Environ(), "HERD_CPU_PROFILE="+filepath.Join(s.profiles, name+".pprof"))
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); log.Close() }()
	return cmd, nil
}

// startAgent starts one `herd agent` process with slots, and waits until
// the cluster lists it.
func (s *site) startAgent(id string, slots int) error {
	args := []string{"agent", "-id", id, "-servers", strings.Join(s.http, ","), "-data-dir", filepath.Join(s.dir, id),
		"-slots", strconv.Itoa(slots), "-cpu-millis", strconv.Itoa(slots * processTaskCPUMillis), "-memory-mb", strconv.Itoa(slots * 1024),
		"-no-bench", "-oci-runtime", "none", "-log-level", "error"}
	cmd, err := s.spawn(id, args)
	if err != nil {
		return err
	}
	s.agents = append(s.agents, cmd)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, _, err := s.cl.GetNode(ctx, id, api.ReadOptions{Consistent: true})
		cancel()
		if err == nil && n.Liveness == api.LivenessReady {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("agent %s did not become READY", id)
}

// stop ends every process (SIGTERM, then SIGKILL after 10 s).
func (s *site) stop() {
	for _, c := range append(append([]*exec.Cmd(nil), s.agents...), s.servers...) {
		if c.Process != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range append(append([]*exec.Cmd(nil), s.agents...), s.servers...) {
		for c.Process != nil && time.Now().Before(deadline) && processAlive(c.Process.Pid) {
			time.Sleep(20 * time.Millisecond)
		}
		if c.Process != nil {
			_ = c.Process.Kill()
		}
	}
}

func processAlive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// leaderIndex is which server leads (-1 when none answers).
func (s *site) leaderIndex() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.cl.Leader(ctx)
	if err != nil {
		return -1
	}
	for i, h := range s.http {
		if strings.TrimPrefix(l.HTTPAddress, "http://") == h {
			return i
		}
	}
	return -1
}

// endProfiles has every process of the site stop its CPU profile (herd
// stops it on SIGUSR1), so that the profiles end with the measured
// window instead of taking in the reads of the tasks that follow it.
func (s *site) endProfiles() {
	if s.profiles == "" {
		return
	}
	for _, c := range append(slices.Clone(s.servers), s.agents...) {
		_ = stopProfile(c.Process)
	}
}

// highestTerm is the highest Raft term a server answers with (0 when none
// answers): its growth over a step is the elections held meanwhile.
func (s *site) highestTerm() int { return highestTerm(http.DefaultClient, s.http) }

// highestTerm is the highest Raft term any of the servers at httpAddrs
// answers with through hc (0 when none answers).
func highestTerm(hc *http.Client, httpAddrs []string) int {
	best := 0
	for _, h := range httpAddrs {
		if v, err := metricSampleWith(hc, h, "herd_raft_term"); err == nil {
			best = max(best, int(v))
		}
	}
	return best
}

// procChildCPUSeconds is the CPU of process pid's reaped children
// (cutime and cstime): an agent's tasks.
func procChildCPUSeconds(pid int) float64 { return procTicks(pid, 13, 14) / 100 }

// metricSample reads one sample of a replica's /metrics.
func metricSample(httpAddr, sample string) (float64, error) {
	return metricSampleWith(http.DefaultClient, httpAddr, sample)
}

// metricSampleWith is metricSample through the given client.
func metricSampleWith(hc *http.Client, httpAddr, sample string) (float64, error) {
	// Uncompressed, and only the sample's family: the bench polls while
	// it measures, and compressing every scrape, or gathering the
	// process's and the runtime's families with it, would be the bench's
	// cost counted as the leader's.
	family, _, _ := strings.Cut(sample, "{")
	req, err := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/metrics?"+url.Values{"name[]": {family}}.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, sample+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, sample)), 64)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return 0, nil
}

// metricFamily reads every sample of a family of a replica's /metrics,
// by the value of its label.
func metricFamily(httpAddr, family, label string) (map[string]uint64, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/metrics?"+url.Values{"name[]": {family}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]uint64{}
	prefix := family + "{" + label + `="`
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		value, sample, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(sample), 64); err == nil {
			out[value] = uint64(v)
		}
	}
	return out, sc.Err()
}

// guardPids are the lease guards of the agents with the given pids: their
// children running `herd agent-guard`.
func guardPids(agents []int) []int {
	parent := map[string]bool{}
	for _, p := range agents {
		parent[strconv.Itoa(p)] = true
	}
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) < 2 || !parent[f[1]] {
			continue
		}
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasSuffix(string(cmd), "\x00agent-guard\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// processRun is what one multi-process run measured.
type processRun struct {
	tasksPerSec          float64
	startP50, startP99   float64
	serverCPU, agentCPU  float64 // seconds, all servers, all agents
	leaderCPU, taskCPU   float64
	tasks                int
	limits               string  // how the agents enforced limits (their herd.limits label)
	serverRSS, agentRSS  float64 // MiB, the largest
	guardRSS, guardAnon  float64 // MiB, the largest lease guard's RSS and its anonymous part
	guardCPUPerTaskMs    float64 // the agents' lease guards together
	herdCPUPerTaskMs     float64
	agentCPUPerTaskMs    float64
	serverCPUPerTaskMs   float64
	taskCPUPerTaskMs     float64
	leaderCPUPerTaskMs   float64
	submitAllMs          float64
	entriesPerTaskApprox float64
	// commandsPerTask and commandsByType are the Raft commands the
	// leader applied per task, logBytesPerTask the bytes of their entries.
	commandsPerTask float64
	commandsByType  map[string]float64
	logBytesPerTask float64
}

// benchProcesses runs the real deployment end to end: three server
// processes and agent processes, `true` submitted in batches of 1,000.
// One agent with 64 slots first, then two: the deployment's rate against
// the process ceiling measured in the same run.
func benchProcesses(exe, dir, profiles string, sz benchSizes, r *Result) error {
	if r.ProcessCeiling == 0 {
		if err := benchProcessCeiling(sz.ceiling, 2*processSlots, r); err != nil {
			return err
		}
	}
	prof := func(run string) string {
		if profiles == "" {
			return ""
		}
		return filepath.Join(profiles, run)
	}
	one, err := runProcessSite(exe, filepath.Join(dir, "one"), prof("one"), 1, sz.processTasks, nil)
	if err != nil {
		return fmt.Errorf("one agent: %w", err)
	}
	two, err := runProcessSite(exe, filepath.Join(dir, "two"), prof("two"), 2, sz.processTasks, nil)
	if err != nil {
		return fmt.Errorf("two agents: %w", err)
	}
	r.ProcessesOneAgentTasksPerSec = one.tasksPerSec
	r.ProcessesTasksPerSec = two.tasksPerSec
	r.ProcessesToCeiling = two.tasksPerSec / r.ProcessCeiling
	r.ProcessesStartP50, r.ProcessesStartP99 = two.startP50, two.startP99
	r.HerdCPUPerTaskMs = two.herdCPUPerTaskMs
	r.ProcessesServerCPUPerTaskMs, r.ProcessesLeaderCPUPerTaskMs = two.serverCPUPerTaskMs, two.leaderCPUPerTaskMs
	r.ProcessesAgentCPUPerTaskMs, r.ProcessesTaskCPUPerTaskMs = two.agentCPUPerTaskMs, two.taskCPUPerTaskMs
	r.ProcessesOneAgentHerdCPUPerTaskMs = one.herdCPUPerTaskMs
	r.ProcessesServerRSSMiB, r.ProcessesAgentRSSMiB = two.serverRSS, two.agentRSS
	r.ProcessesGuardRSSMiB, r.ProcessesGuardAnonMiB, r.ProcessesGuardCPUPerTaskMs = two.guardRSS, two.guardAnon, two.guardCPUPerTaskMs
	r.ProcessesTasks = sz.processTasks
	r.ProcessesCommandsPerTask, r.ProcessesCommandsByType, r.ProcessesLogBytesPerTask = two.commandsPerTask, two.commandsByType, two.logBytesPerTask
	if two.limits != "" {
		r.Machine.AgentLimits = two.limits
	}
	return nil
}

// processSlots is each agent's slots in the multi-process step.
const processSlots = 64

// processTaskCPUMillis is what each task of the step asks for: a core.
// The agent enforces it as a CFS quota per 100 ms period, so a task that
// asked for 10 millicores would be throttled to 1 ms of CPU per period,
// and starting `true` (exec, the dynamic loader) takes about that much:
// the step would measure the kernel's throttling of the task rather than
// herd.
const processTaskCPUMillis = 1000

func runProcessSite(exe, dir, profiles string, agents, tasks int, prefix []string) (processRun, error) {
	var out processRun
	if err := mkdirs(dir, profiles); err != nil {
		return out, err
	}
	s, err := (&site{exe: exe, dir: dir, profiles: profiles, prefix: prefix}).start()
	if err != nil {
		return out, err
	}
	defer s.stop()
	for i := range agents {
		if err := s.startAgent(fmt.Sprintf("pa-%d", i+1), processSlots); err != nil {
			return out, err
		}
	}
	if n, _, err := s.cl.GetNode(context.Background(), "pa-1", api.ReadOptions{}); err == nil {
		out.limits = n.Labels["herd.limits"]
	}
	li := s.leaderIndex()
	if li < 0 {
		return out, errors.New("no leader")
	}
	pids := func(cs []*exec.Cmd) []int {
		var p []int
		for _, c := range cs {
			p = append(p, c.Process.Pid)
		}
		return p
	}
	sum := func(ps []int, f func(int) float64) float64 {
		t := 0.0
		for _, p := range ps {
			t += f(p)
		}
		return t
	}
	sp, ap := pids(s.servers), pids(s.agents)
	// Each agent's lease guard is herd's too: its CPU counts as the
	// agents'.
	gp := guardPids(ap)
	ctx := context.Background()
	// Warm up: a batch the size of the slots, so connections, pools and
	// the leader's caches are in their running state.
	if err := submitTrue(ctx, s.cl, "warm", 0, 2*processSlots*agents); err != nil {
		return out, err
	}
	if err := waitSucceeded(s.http[li], 2*processSlots*agents, 2*time.Minute); err != nil {
		return out, err
	}
	base, _ := metricSample(s.http[li], `herd_tasks{state="SUCCEEDED"}`)
	commands0, _ := metricFamily(s.http[li], "herd_raft_commands_applied_total", "command")
	bytes0, _ := metricSample(s.http[li], "herd_raft_applied_bytes_total")
	srv0, ag0, ch0, ld0, gd0 := sum(sp, procCPUSeconds), sum(ap, procCPUSeconds), sum(ap, procChildCPUSeconds), procCPUSeconds(sp[li]), sum(gp, procCPUSeconds)
	t0 := time.Now()
	if err := submitTrue(ctx, s.cl, "run", 0, tasks); err != nil {
		return out, err
	}
	out.submitAllMs = float64(time.Since(t0).Microseconds()) / 1000
	if err := waitSucceeded(s.http[li], int(base)+tasks, 10*time.Minute); err != nil {
		return out, err
	}
	elapsed := time.Since(t0)
	commands1, _ := metricFamily(s.http[li], "herd_raft_commands_applied_total", "command")
	bytes1, _ := metricSample(s.http[li], "herd_raft_applied_bytes_total")
	out.commandsPerTask, out.commandsByType = commandsPerTask(commands0, commands1, tasks)
	out.logBytesPerTask = (bytes1 - bytes0) / float64(tasks)
	out.tasks = tasks
	out.tasksPerSec = float64(tasks) / elapsed.Seconds()
	guardCPU := sum(gp, procCPUSeconds) - gd0
	out.serverCPU, out.agentCPU = sum(sp, procCPUSeconds)-srv0, sum(ap, procCPUSeconds)-ag0+guardCPU
	s.endProfiles()
	out.taskCPU, out.leaderCPU = sum(ap, procChildCPUSeconds)-ch0, procCPUSeconds(sp[li])-ld0
	per := func(sec float64) float64 { return sec * 1000 / float64(tasks) }
	out.serverCPUPerTaskMs, out.agentCPUPerTaskMs = per(out.serverCPU), per(out.agentCPU)
	out.taskCPUPerTaskMs, out.leaderCPUPerTaskMs = per(out.taskCPU), per(out.leaderCPU)
	out.herdCPUPerTaskMs = per(out.serverCPU + out.agentCPU)
	out.guardCPUPerTaskMs = per(guardCPU)
	for _, p := range gp {
		out.guardRSS = max(out.guardRSS, procRSSMiB(p, "VmRSS"))
		out.guardAnon = max(out.guardAnon, procRSSMiB(p, "RssAnon"))
	}
	for _, p := range sp {
		out.serverRSS = max(out.serverRSS, procRSSMiB(p, "VmRSS"))
	}
	for _, p := range ap {
		out.agentRSS = max(out.agentRSS, procRSSMiB(p, "VmRSS"))
	}
	out.startP50, out.startP99, err = startLatencies(ctx, s.cl, "run-")
	return out, err
}

// submitTrue submits n `true` tasks named prefix-i in batches of 1,000.
func submitTrue(ctx context.Context, cl *api.Client, prefix string, from, n int) error {
	one := 1
	for start := from; start < from+n; start += api.MaxBatchTasks {
		end := min(start+api.MaxBatchTasks, from+n)
		specs := make([]api.TaskSpec, 0, end-start)
		for i := start; i < end; i++ {
			specs = append(specs, api.TaskSpec{Name: fmt.Sprintf("%s-%d", prefix, i), IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i),
				Command: []string{"true"}, MaxAttempts: &one, Resources: api.Resources{CPUMillis: processTaskCPUMillis, MemoryMB: 64}})
		}
		if _, err := cl.SubmitTasks(ctx, specs); err != nil {
			return err
		}
	}
	return nil
}

// waitSucceeded waits until the replica counts n succeeded tasks.
func waitSucceeded(httpAddr string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if v, err := metricSample(httpAddr, `herd_tasks{state="SUCCEEDED"}`); err == nil && int(v) >= n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%d tasks did not succeed within %s", n, limit)
}

// startLatencies reads every task whose name starts with prefix (16 at
// a time) and returns the submit→start p50 and p99 in ms.
func startLatencies(ctx context.Context, cl *api.Client, prefix string) (p50, p99 float64, err error) {
	var ids []string
	after := ""
	for {
		list, _, err := cl.ListTasks(ctx, api.TaskQuery{After: after, Limit: api.MaxListLimit}, api.ReadOptions{Consistent: true})
		if err != nil {
			return 0, 0, err
		}
		for _, t := range list.Tasks {
			if strings.HasPrefix(t.Name, prefix) {
				ids = append(ids, t.ID)
			}
		}
		if list.Next == "" {
			break
		}
		after = list.Next
	}
	lat := make([]float64, len(ids))
	toStart, toFinish := make([]float64, len(ids)), make([]float64, len(ids))
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		go func() {
			for i := range next {
				t, _, err := cl.GetTask(ctx, ids[i], api.ReadOptions{})
				if err != nil {
					errs <- err
					continue
				}
				if len(t.Attempts) > 0 && !t.Attempts[0].StartedAt.IsZero() {
					a := t.Attempts[0]
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					lat[i], toStart[i], toFinish[i] = ms(a.StartedAt.Sub(t.SubmittedAt)), ms(a.StartedAt.Sub(a.ReservedAt)), ms(a.FinishedAt.Sub(a.StartedAt))
				}
			}
			errs <- nil
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	for range 16 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	fmt.Fprintf(os.Stderr, "bench: e2e-processes: medians: reserved→started %.1f ms, started→finished %.1f ms\n",
		percentile(toStart, 0.5), percentile(toFinish, 0.5))
	return percentile(lat, 0.5), percentile(lat, 0.99), err
}
