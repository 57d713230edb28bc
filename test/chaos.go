package test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/fsm"
)

// ChaosConfig shapes one chaos schedule: a fresh 3-replica cluster with
// agents, a workload of clients, operators and zombies, and a seeded
// sequence of faults for Duration, then healing, quiescence and checks.
type ChaosConfig struct {
	Seed     uint64
	Duration time.Duration
	Agents   int
	Clients  int
	// OutDir receives the history and porcupine's visualisation when the
	// linearizability check fails.
	OutDir string
	// Secure runs the schedule with TLS on every link and ACLs on every
	// request: the agents present certificates, the clients a token.
	Secure bool
}

// Fault kinds a schedule draws from.
const (
	FaultLeaderCrash   = "leader-crash"
	FaultFollowerCrash = "follower-crash"
	FaultIsolateLeader = "isolate-leader"
	FaultPauseLeader   = "pause-leader"
	FaultSplit         = "minority-split"
	FaultOneWay        = "one-way-cut"
	FaultAgentPause    = "agent-pause"
	FaultAgentKill     = "agent-kill"
	FaultLoss          = "message-loss"
	FaultDelay         = "delay"
	FaultRestartAll    = "restart-all"
	// The process agent's own faults: the agent process stopped (SIGSTOP)
	// past its lease, and killed outright (SIGKILL) and started again.
	FaultAgentSIGSTOP = "agent-sigstop"
	FaultAgentSIGKILL = "agent-sigkill"
)

var allFaults = []string{
	FaultLeaderCrash, FaultFollowerCrash, FaultIsolateLeader, FaultPauseLeader, FaultSplit,
	FaultOneWay, FaultAgentPause, FaultAgentKill, FaultLoss, FaultDelay, FaultRestartAll,
	FaultAgentSIGSTOP, FaultAgentSIGKILL,
}

// Checkers, by the name anomalies are counted under.
const (
	CheckInvariants   = "invariants"     // after every Apply on every replica
	CheckAcked        = "acked-present"  // acknowledged submits on every replica
	CheckTerminal     = "terminal"       // every task ends
	CheckStale        = "stale-result"   // no stale completion applied
	CheckHashes       = "state-hashes"   // equal FSM hashes at equal indexes
	CheckLinearizable = "linearizable"   // porcupine over submit/get/cancel
	CheckIdempotency  = "idempotent-key" // one task per idempotency key
	CheckOverlap      = "no-overlap"     // no task ran on two nodes at once (the agents' own records)
)

// ChaosReport is what one schedule (or a campaign, merged) found.
type ChaosReport struct {
	Schedules int
	// Secured counts the schedules run with TLS and ACLs.
	Secured int
	Faults  map[string]int
	// Runs counts the attempts' processes the agents started.
	Runs      int
	Ops       int
	Unknown   int
	Anomalies map[string][]string
	Failovers []time.Duration
}

func newReport() *ChaosReport {
	return &ChaosReport{Faults: map[string]int{}, Anomalies: map[string][]string{}}
}

// Merge adds o into r.
func (r *ChaosReport) Merge(o *ChaosReport) {
	r.Schedules += o.Schedules
	r.Secured += o.Secured
	r.Runs += o.Runs
	for k, v := range o.Faults {
		r.Faults[k] += v
	}
	r.Ops += o.Ops
	r.Unknown += o.Unknown
	for k, v := range o.Anomalies {
		r.Anomalies[k] = append(r.Anomalies[k], v...)
	}
	r.Failovers = append(r.Failovers, o.Failovers...)
}

// AnomalyCount is the number of anomalies over all checkers.
func (r *ChaosReport) AnomalyCount() int {
	n := 0
	for _, v := range r.Anomalies {
		n += len(v)
	}
	return n
}

// Table renders the report for people.
func (r *ChaosReport) Table(w io.Writer) {
	fmt.Fprintf(w, "%-28s %d\n", "schedules", r.Schedules)
	fmt.Fprintf(w, "%-28s %d\n", "  with TLS and ACLs", r.Secured)
	for _, k := range allFaults {
		fmt.Fprintf(w, "%-28s %d\n", "faults "+k, r.Faults[k])
	}
	fmt.Fprintf(w, "%-28s %d\n", "operations", r.Ops)
	fmt.Fprintf(w, "%-28s %d\n", "attempts run", r.Runs)
	fmt.Fprintf(w, "%-28s %d\n", "unknown outcomes", r.Unknown)
	for _, k := range []string{CheckInvariants, CheckAcked, CheckTerminal, CheckStale, CheckHashes, CheckLinearizable, CheckIdempotency, CheckOverlap} {
		fmt.Fprintf(w, "%-28s %d\n", "anomalies "+k, len(r.Anomalies[k]))
	}
	p50, p99 := percentile(r.Failovers, 0.50), percentile(r.Failovers, 0.99)
	fmt.Fprintf(w, "%-28s %d (p50 %v, p99 %v)\n", "failovers measured", len(r.Failovers), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// chaos is one running schedule.
type chaos struct {
	t      *testing.T
	cfg    ChaosConfig
	rng    *rand.Rand // the schedule's choices; used by the fault goroutine only
	net    *Network
	c      *Cluster
	start  time.Time
	report *ChaosReport

	mu         sync.Mutex
	history    []porcupine.Operation
	acked      map[string]string // idempotency key → task id
	unknownKey map[string]bool   // submits whose outcome is unknown
	injections []time.Duration   // times leader-removing faults were injected
	replays    []replay
	anomalies  map[string][]string

	agents    []*AgentHandle
	agentCfgs []agent.Config
	agentMu   sync.Mutex

	hashing atomic.Bool
	hashMu  sync.Mutex
	hashes  map[string]map[uint64]string // replica → index → hash

	runMu sync.Mutex
	runs  []agent.RunRecord // every attempt's process, as its agent ran it

	// procs are the schedule's real agent processes (none under -short),
	// and tickFile where the ticker tasks write their ticks.
	procs    []*procAgent
	tickFile string
}

// replay is a zombie's completion for an attempt that had already ended.
type replay struct {
	attemptID string
	lease     uint64
	claimed   fsm.AttemptState
	before    fsm.AttemptState
	accepted  bool
	duplicate bool
}

func (ch *chaos) anomaly(checker, format string, args ...any) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.anomalies[checker] = append(ch.anomalies[checker], fmt.Sprintf(format, args...))
}

func (ch *chaos) now() int64 { return int64(time.Since(ch.start)) }

// RunChaos runs one schedule and returns its report; anomalies are in the
// report, not test failures (the caller decides).
func RunChaos(t *testing.T, cfg ChaosConfig) *ChaosReport {
	if cfg.Agents == 0 {
		cfg.Agents = 3
	}
	if cfg.Clients == 0 {
		cfg.Clients = 4
	}
	ch := &chaos{
		t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 1)), net: NewNetwork(cfg.Seed),
		report: newReport(), acked: map[string]string{}, unknownKey: map[string]bool{},
		anomalies: map[string][]string{}, hashes: map[string]map[uint64]string{},
	}
	ch.report.Schedules = 1
	if cfg.Secure {
		ch.report.Secured = 1
	}
	ch.c = NewClusterWith(t, 3, Setup{
		Secure:          cfg.Secure,
		CheckInvariants: true,
		Gossip:          true,
		Network:         ch.net,
		OnViolation: func(replica string, index uint64, err error) {
			ch.anomaly(CheckInvariants, "%s at index %d: %v", replica, index, err)
		},
		AfterApply: ch.recordHash,
		Config: []ClusterOption{func(c *config.Server) {
			c.Scheduler.RetryBase = 100 * time.Millisecond
			c.Scheduler.RetryCap = time.Second
			c.Scheduler.ScheduleToStartTimeout = 3 * time.Second
		}},
	})
	for i := 0; i < cfg.Agents; i++ {
		ac := agent.Config{
			ID: fmt.Sprintf("a%d", i+1), DataDir: t.TempDir(), Slots: 4,
			Resources: api.Resources{CPUMillis: 4000, MemoryMB: 2048},
			Labels:    map[string]string{"process": "no"},
			KillGrace: 200 * time.Millisecond,
			OnRun:     ch.recordRun,
		}
		ch.agentCfgs = append(ch.agentCfgs, ac)
		ch.agents = append(ch.agents, ch.c.StartAgent(ac))
	}
	ch.tickFile = filepath.Join(t.TempDir(), "ticks")
	ch.procs = ch.startProcAgents()
	ch.start = time.Now()

	ctx, stop := context.WithTimeout(context.Background(), cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ch.tickers(ctx) }()
	for i := 0; i < cfg.Clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); ch.client(ctx, i) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); ch.operator(ctx) }()
	go func() { defer wg.Done(); ch.zombie(ctx) }()
	ch.faults(ctx)
	wg.Wait()

	ch.quiesce()
	ch.check()

	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.report.Ops = len(ch.history)
	ch.report.Runs = len(ch.allRuns())
	for _, op := range ch.history {
		if op.Output.(taskOutput).Unknown {
			ch.report.Unknown++
		}
	}
	for k, v := range ch.anomalies {
		ch.report.Anomalies[k] = v
	}
	ch.report.Failovers = ch.failovers()
	return ch.report
}

// --- workload -------------------------------------------------------------
