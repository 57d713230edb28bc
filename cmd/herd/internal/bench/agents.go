package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"herd/agent"
	"herd/api"
)

// benchAgents runs many agents in this process against three server
// processes: each is the real agent (a memberlist member with its own
// UDP socket, heartbeats, the assignment long poll), without benchmarks
// or containers, one slot each. It measures the servers while the fleet
// is idle and while it places `true` at a low rate, and counts the
// SUSPECT and DOWN verdicts the leader reached meanwhile: every agent is
// alive, so each one is false.
func benchAgents(exe, dir, profiles string, sz benchSizes, r *Result) error {
	if err := mkdirs(dir, profiles); err != nil {
		return err
	}
	// Profiles here are the leader's, of the idle and the placing
	// windows: the whole run's would be mostly registrations.
	s, err := (&site{exe: exe, dir: dir, debug: profiles != ""}).start()
	if err != nil {
		return err
	}
	defer s.stop()
	defer fleetHeap()()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	f := &fleetRun{s: s, ctx: ctx, sz: sz, profiles: profiles, r: r}
	r.Agents = sz.agentsN
	term0 := s.highestTerm()
	defer func() { r.AgentsElections = s.highestTerm() - term0 }()
	if err := f.startAgents(dir, &wg); err != nil {
		return err
	}
	// A fleet the servers cannot carry may cost them their leader for a
	// while (the step counts the elections): wait a minute for one.
	li := s.leaderIndex()
	for deadline := time.Now().Add(time.Minute); li < 0 && time.Now().Before(deadline); li = s.leaderIndex() {
		time.Sleep(time.Second)
	}
	if li < 0 {
		return errors.New("no leader for a minute after the fleet registered")
	}
	from, err := eventsEnd(ctx, s.cl)
	if err != nil {
		return err
	}
	f.li, f.leaderPid = li, s.servers[li].Process.Pid
	if err := f.measureIdle(); err != nil {
		return err
	}
	if err := f.measurePlacing(); err != nil {
		return err
	}
	return f.measureAfter(from)
}

// fleetRun is one run of the agents step: the site, the leader it
// measures, and the fleet's own logger, which counts refutations.
type fleetRun struct {
	s         *site
	ctx       context.Context
	sz        benchSizes
	profiles  string
	r         *Result
	refuted   refutations
	refuted0  int64 // refutations before the idle window
	li        int   // the leader's index in s
	leaderPid int
}

// startAgents starts the fleet in this process, each agent knowing the
// three servers in its own order, and waits until it is READY: a
// machine that cannot carry it is measured as it stands, with how many
// agents it got READY and why the others are not.
func (f *fleetRun) startAgents(dir string, wg *sync.WaitGroup) error {
	n, s := f.sz.agentsN, f.s
	t0 := time.Now()
	var failed sync.Map // agent id → why its Run ended early
	// Memberlist logs at the info level through the agent's logger.
	logger := hclog.New(&hclog.LoggerOptions{Output: &f.refuted, Level: hclog.Info})
	for i := range n {
		id := fmt.Sprintf("many-%04d", i)
		servers := []string{s.http[i%3], s.http[(i+1)%3], s.http[(i+2)%3]}
		a, err := agent.New(agent.Config{
			ID: id, Servers: servers, DataDir: filepath.Join(dir, "agents", id), Slots: 1,
			Resources: api.Resources{CPUMillis: 1000, MemoryMB: 1024, DiskMB: 1024},
			NoBench:   true, OCIRuntime: "none", Limits: "none", Logger: logger,
			GossipTune: manyMembersTune,
		})
		if err != nil {
			return fmt.Errorf("agent %s: %w", id, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(f.ctx); err != nil && f.ctx.Err() == nil {
				failed.Store(id, err)
			}
		}()
	}
	f.r.AgentsReady = waitFleetReady(f.ctx, s.cl, n, 5*time.Minute)
	f.r.AgentsRegisterSeconds = time.Since(t0).Seconds()
	if f.r.AgentsReady < n {
		fmt.Fprintf(os.Stderr, "bench: agents: %d of %d READY after %.0f s; %s\n", f.r.AgentsReady, n, f.r.AgentsRegisterSeconds, notReady(f.ctx, s.cl, n, &failed))
	}
	// Settle: the registrations' tail (profiles, first heartbeats).
	time.Sleep(f.sz.agentsWindow / 2)
	return nil
}

// profile saves the leader's CPU profile of one window under name, when
// profiles are asked for.
func (f *fleetRun) profile(name string) <-chan error { return f.profileOf(f.li, name) }

// profileOf saves server i's CPU profile of one window under name, when
// profiles are asked for.
func (f *fleetRun) profileOf(i int, name string) <-chan error {
	done := make(chan error, 1)
	if f.profiles == "" {
		done <- nil
		return done
	}
	go func() {
		which := fmt.Sprintf("profile?seconds=%d", int(f.sz.agentsWindow.Seconds()))
		done <- saveProfile(f.ctx, f.s.http[i], which, filepath.Join(f.profiles, name))
	}()
	return done
}

// measureIdle measures the leader's and the fleet's CPU and the entries
// committed while the fleet has nothing to do.
func (f *fleetRun) measureIdle() error {
	s, r, self := f.s, f.r, os.Getpid()
	i0, _ := metricSample(s.http[f.li], "herd_raft_commit_index")
	f.refuted0 = f.refuted.n.Load()
	followers := f.followerPids()
	f0 := make([]float64, len(followers))
	for i, pid := range followers {
		f0[i] = procCPUSeconds(pid)
	}
	l0, a0, w0 := procCPUSeconds(f.leaderPid), procCPUSeconds(self), time.Now()
	idleProfile := f.profile("leader-idle.pprof")
	followerProfile := f.profileOf((f.li+1)%len(f.s.servers), "follower-idle.pprof")
	stopSelf, err := profileSelf(f.profiles, "agents-idle.pprof")
	if err != nil {
		return err
	}
	time.Sleep(f.sz.agentsWindow)
	// The window's CPU is read as it ends: waiting for the profiles
	// below may take a while and must not count.
	l1, a1, window := procCPUSeconds(f.leaderPid), procCPUSeconds(self), time.Since(w0).Seconds()
	for i, pid := range followers {
		r.AgentsFollowerCPUPct = max(r.AgentsFollowerCPUPct, 100*(procCPUSeconds(pid)-f0[i])/window)
	}
	if err := stopSelf(); err != nil {
		return err
	}
	if i1, err := metricSample(s.http[f.li], "herd_raft_commit_index"); err == nil {
		r.AgentsIdleEntriesPerSec = (i1 - i0) / window
	}
	if err := <-idleProfile; err != nil {
		// A leader too busy to serve its profile is measured all the same.
		fmt.Fprintf(os.Stderr, "bench: agents: no profile of the leader's idle window: %v\n", err)
	}
	if err := <-followerProfile; err != nil {
		fmt.Fprintf(os.Stderr, "bench: agents: no profile of a follower's idle window: %v\n", err)
	}
	r.AgentsLeaderCPUPct = 100 * (l1 - l0) / window
	r.AgentsProcessCPUPct = 100 * (a1 - a0) / window
	return nil
}

// followerPids are the server processes other than the leader's.
func (f *fleetRun) followerPids() []int {
	var out []int
	for i, p := range f.s.servers {
		if i != f.li && p != nil && p.Process != nil {
			out = append(out, p.Process.Pid)
		}
	}
	return out
}

// measurePlacing submits `true` at a steady low rate through a window
// and measures the leader's CPU meanwhile.
func (f *fleetRun) measurePlacing() error {
	s, r := f.s, f.r
	rate := max(f.sz.agentsN/10, 10)
	l0, w0 := procCPUSeconds(f.leaderPid), time.Now()
	placingProfile := f.profile("leader-placing.pprof")
	tick := time.NewTicker(100 * time.Millisecond)
	submitted := 0
	for time.Since(w0) < f.sz.agentsWindow {
		<-tick.C
		batch := rate / 10
		if err := submitTrue(f.ctx, s.cl, "many", submitted, batch); err != nil {
			tick.Stop()
			return err
		}
		submitted += batch
	}
	tick.Stop()
	window := time.Since(w0).Seconds()
	r.AgentsLeaderPlacingCPU = 100 * (procCPUSeconds(f.leaderPid) - l0) / window
	r.AgentsPlacedTasksPerSec = float64(submitted) / window
	// Refutations are counted over both windows.
	r.AgentsFleetRefutations = int(f.refuted.n.Load() - f.refuted0)
	if err := <-placingProfile; err != nil {
		fmt.Fprintf(os.Stderr, "bench: agents: no profile of the leader's placing window: %v\n", err)
	}
	// A fleet the machine cannot carry may not finish them: how many did
	// is part of the measurement, not a failure of the run.
	if err := waitSucceeded(s.http[f.li], submitted, 2*time.Minute); err != nil {
		done, _ := metricSample(s.http[f.li], `herd_tasks{state="SUCCEEDED"}`)
		r.AgentsPlacedUnfinished = submitted - int(done)
	}
	return nil
}

// measureAfter reads what the run left: the servers' RSS, the nodes'
// heartbeat loss, the false verdicts since from, and the fleet's live
// heap.
func (f *fleetRun) measureAfter(from api.EventPosition) error {
	s, r := f.s, f.r
	for _, p := range s.servers {
		r.AgentsServerRSSMiB = max(r.AgentsServerRSSMiB, procRSSMiB(p.Process.Pid, "VmRSS"))
	}
	nodes, _, err := s.cl.ListNodes(f.ctx, api.ReadOptions{Consistent: true})
	if err != nil {
		return err
	}
	loss := 0.0
	for _, nd := range nodes {
		loss += nd.Observation.Loss
	}
	r.AgentsHeartbeatLoss = loss / float64(max(len(nodes), 1))
	if r.AgentsFalseVerdicts, err = countVerdicts(f.ctx, s.cl, from); err != nil {
		return err
	}
	// The fleet's live heap, collected once: what hosting n members that
	// each know every other one holds, the measure for a larger fleet.
	// Read last: a collection of a heap this size holds the fleet's
	// members back, and the verdicts are counted before it.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.AgentsFleetLiveHeapMiB = float64(ms.HeapAlloc) / (1 << 20)
	return nil
}

// waitFleetReady waits until n nodes are READY, or limit passes, and
// returns how many are.
func waitFleetReady(ctx context.Context, cl *api.Client, n int, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	ready := 0
	for time.Now().Before(deadline) {
		nodes, _, err := cl.ListNodes(ctx, api.ReadOptions{})
		if err == nil {
			ready = 0
			for _, nd := range nodes {
				if nd.Liveness == api.LivenessReady {
					ready++
				}
			}
			if ready >= n {
				return ready
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ready
}

// notReady says which of the fleet's n agents are not READY: those the
// cluster holds in another state, how many it does not know, and the
// first of the agents that stopped with an error.
func notReady(ctx context.Context, cl *api.Client, n int, failed *sync.Map) string {
	nodes, _, err := cl.ListNodes(ctx, api.ReadOptions{})
	if err != nil {
		return fmt.Sprintf("nodes not listed: %v", err)
	}
	var others []string
	for _, nd := range nodes {
		if nd.Liveness != api.LivenessReady {
			others = append(others, nd.ID+" "+nd.Liveness)
		}
	}
	msg := fmt.Sprintf("not registered: %d; registered, not READY: %v", n-len(nodes), others)
	failed.Range(func(id, err any) bool {
		msg += fmt.Sprintf("; %v stopped: %v", id, err)
		return false
	})
	return msg
}

// eventsEnd is the position just past the last event a server holds.
func eventsEnd(ctx context.Context, cl *api.Client) (api.EventPosition, error) {
	var pos api.EventPosition
	err := cl.Events(ctx, api.EventQuery{Topics: []api.EventTopicFilter{{Topic: "node"}}}, false, func(l api.EventLine) error {
		if l.Lost == nil {
			pos = l.Position().After()
		}
		return nil
	})
	return pos, err
}

// countVerdicts counts the SUSPECT and DOWN verdicts since from.
func countVerdicts(ctx context.Context, cl *api.Client, from api.EventPosition) (int, error) {
	n := 0
	err := cl.Events(ctx, api.EventQuery{From: from, Topics: []api.EventTopicFilter{{Topic: "node"}}}, false, func(l api.EventLine) error {
		if l.Lost != nil {
			return fmt.Errorf("the node events to count verdicts in were let go: %s", l.Message)
		}
		if l.Kind == "suspect" || l.Kind == "down" {
			n++
		}
		return nil
	})
	return n, err
}

// profileSelf profiles this process's CPU (the in-process agents) into
// dir/name until the returned stop is called; nothing when dir is empty
// or the process is profiled already.
func profileSelf(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		// Already profiled as a whole (HERD_CPU_PROFILE): that profile
		// has the agents in it.
		f.Close()
		_ = os.Remove(f.Name())
		fmt.Fprintf(os.Stderr, "bench: agents: not profiling the agents' idle window: %v\n", err)
		return func() error { return nil }, nil
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// manyMembersTune is memberlist's timing for the step's agents, which all
// live in this one process. A real fleet's members each probe one member
// a second on their own CPU and answer within milliseconds; here every
// probe of the fleet shares two cores, and a probe answered late is a
// suspicion that every member receives, retransmits and, once the
// suspected member hears of it, a refutation that travels the same way:
// each false suspicion costs the process work in proportion to the
// fleet's size, which delays more answers. Past a point that loop feeds
// itself, and the process stays saturated with its own gossip while its
// agents' heartbeats to the servers go late. So the agents probe each
// other rarely (every 15 s, with 5 s to answer), which keeps the fleet's
// own suspicions near none, as a real fleet's are; the servers probe the
// agents at their usual timings, and the heartbeats the servers judge
// liveness by are the agent's own, at their usual interval. Gossip
// rounds every second instead of every 200 ms: each round walks the
// member's broadcast queue, which a thousand joining members fill, and
// that walk was a fifth of the process.
func manyMembersTune(c *memberlist.Config) {
	c.ProbeInterval, c.ProbeTimeout = 15*time.Second, 5*time.Second
	c.GossipInterval = time.Second
}

// refutations counts the fleet's members refuting a suspicion or a death
// of themselves, from their gossip logs: each one is a false suspicion
// the fleet raised or received, the measure of its own gossip noise.
type refutations struct{ n atomic.Int64 }

// Write implements io.Writer for the agents' loggers; memberlist logs
// each refutation as one line.
func (r *refutations) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("memberlist: Refuting a ")) {
		r.n.Add(1)
	}
	return len(b), nil
}

// fleetHeap sets this process's collector for hosting the fleet and
// returns what puts the earlier setting back. Each of the fleet's
// memberlist members knows every other one, so one process hosting n of
// them holds n² member records that a real fleet spreads over n
// machines; with Go's default of a collection each time the heap
// doubles, scanning that heap was half of the process's CPU at a
// thousand agents, which starved the agents of their own heartbeats. The
// collector here runs only as the heap nears half the machine's memory.
func fleetHeap() (restore func()) {
	limit := int64(1) << 30
	if kb := memTotalKiB(); kb > 0 {
		limit = max(limit, kb<<10/2)
	}
	oldLimit := debug.SetMemoryLimit(limit)
	oldPercent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}
}

// memTotalKiB is the machine's memory from /proc/meminfo (0 if unknown).
func memTotalKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb
		}
	}
	return 0
}
