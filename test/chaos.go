package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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
)

var allFaults = []string{
	FaultLeaderCrash, FaultFollowerCrash, FaultIsolateLeader, FaultPauseLeader, FaultSplit,
	FaultOneWay, FaultAgentPause, FaultAgentKill, FaultLoss, FaultDelay, FaultRestartAll,
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
)

// ChaosReport is what one schedule (or a campaign, merged) found.
type ChaosReport struct {
	Schedules int
	Faults    map[string]int
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
	for _, k := range allFaults {
		fmt.Fprintf(w, "%-28s %d\n", "faults "+k, r.Faults[k])
	}
	fmt.Fprintf(w, "%-28s %d\n", "operations", r.Ops)
	fmt.Fprintf(w, "%-28s %d\n", "unknown outcomes", r.Unknown)
	for _, k := range []string{CheckInvariants, CheckAcked, CheckTerminal, CheckStale, CheckHashes, CheckLinearizable, CheckIdempotency} {
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
	ch.c = NewClusterWith(t, 3, Setup{
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
			KillGrace: 200 * time.Millisecond,
		}
		ch.agentCfgs = append(ch.agentCfgs, ac)
		ch.agents = append(ch.agents, ch.c.StartAgent(ac))
	}
	ch.start = time.Now()

	ctx, stop := context.WithTimeout(context.Background(), cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
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

// taskInput and taskOutput are one client operation on one task, as the
// linearizability checker sees it; operations are partitioned by key.
type taskInput struct {
	Kind string // submit, get, cancel
	Key  string
}

type taskOutput struct {
	Unknown  bool
	Found    bool   // get/cancel: the task exists
	Rejected bool   // cancel: 409, the task had already ended another way
	State    string // get/cancel: the state returned
	Index    uint64 // get/cancel: the task's modify index
}

func (ch *chaos) clientsFor(name string) []*api.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = ch.net.Dialer(name)
	hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	var out []*api.Client
	for _, r := range ch.c.Replicas {
		cl, err := api.NewClient(r.Cfg.HTTPAddr)
		if err != nil {
			ch.t.Fatal(err)
		}
		cl.SetHTTPClient(hc)
		out = append(out, cl)
	}
	return out
}

var chaosCommands = [][]string{
	{"true"}, {"true"}, {"sleep", "0.2"}, {"sleep", "1"}, {"sh", "-c", "exit 3"},
}

// client submits, reads (consistent) and cancels tasks through random
// replicas, recording every operation; a failure that is not a clear 4xx
// answer is an unknown outcome.
func (ch *chaos) client(ctx context.Context, id int) {
	name := fmt.Sprintf("c%d", id+1)
	cls := ch.clientsFor(name)
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, uint64(100+id)))
	var keys []string
	// A submit that failed is retried, same key and spec, up to 3 times
	// before the client moves on, as a real client would.
	var retry *api.TaskSpec
	retries := 0
	for n := 0; ctx.Err() == nil; n++ {
		cl := cls[rng.IntN(len(cls))]
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		p := rng.IntN(100)
		if retry != nil {
			p = 0
		}
		switch {
		case p < 45 || len(keys) == 0:
			var spec api.TaskSpec
			if retry != nil {
				spec = *retry
			} else {
				key := fmt.Sprintf("%s-%d-%d", name, ch.cfg.Seed, n)
				if len(keys) > 0 && rng.IntN(10) == 0 {
					key = keys[rng.IntN(len(keys))] // an old submit sent again
				} else {
					keys = append(keys, key)
				}
				spec = api.TaskSpec{
					IdempotencyKey: key, Command: chaosCommands[rng.IntN(len(chaosCommands))], Submitter: name,
					Resources:   api.Resources{CPUMillis: 500, MemoryMB: 64},
					MaxAttempts: ptr(2), TimeoutSeconds: ptr(int64(20)),
				}
			}
			key := spec.IdempotencyKey
			retry = nil
			call := ch.now()
			resp, _, err := cl.SubmitTask(opCtx, spec)
			out := taskOutput{}
			if err != nil && !isClientError(err) && retries < 3 {
				retry, retries = &spec, retries+1
			} else {
				retries = 0
			}
			switch {
			case err == nil:
				ch.mu.Lock()
				if prev, ok := ch.acked[key]; ok && prev != resp.ID {
					ch.anomalies[CheckIdempotency] = append(ch.anomalies[CheckIdempotency], fmt.Sprintf("key %s acknowledged as %s and %s", key, prev, resp.ID))
				}
				ch.acked[key] = resp.ID
				ch.mu.Unlock()
			case isClientError(err) || notApplied(err):
				cancel()
				time.Sleep(20 * time.Millisecond)
				continue // a definite refusal, or never sent: not recorded
			default:
				out.Unknown = true
				ch.mu.Lock()
				ch.unknownKey[key] = true
				ch.mu.Unlock()
			}
			ch.record(id, taskInput{"submit", key}, out, call)
		default:
			key := keys[rng.IntN(len(keys))]
			taskID, ok := ch.taskID(key)
			if !ok {
				cancel()
				continue
			}
			call := ch.now()
			kind, out, answered := "get", taskOutput{}, false
			if p < 85 {
				task, _, err := cl.GetTask(opCtx, taskID, api.ReadOptions{Consistent: true})
				out, answered = readOutput(task, err)
			} else {
				kind = "cancel"
				task, err := cl.CancelTask(opCtx, taskID, "chaos")
				out, answered = cancelOutput(task, err)
			}
			if !answered {
				cancel()
				continue
			}
			ch.record(id, taskInput{kind, key}, out, call)
		}
		cancel()
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// readOutput turns a consistent read's answer into a history output; false
// means the read did not answer, which says nothing.
func readOutput(task api.Task, err error) (taskOutput, bool) {
	switch {
	case err == nil:
		return taskOutput{Found: true, State: task.State, Index: task.ModifyIndex}, true
	case isNotFound(err):
		return taskOutput{}, true
	}
	return taskOutput{}, false
}

// cancelOutput does the same for a cancel. Unknown outcomes are left out:
// the model lets a read see CANCELLED without a recorded cancel anyway.
func cancelOutput(task api.Task, err error) (taskOutput, bool) {
	if isConflict(err) {
		return taskOutput{Found: true, Rejected: true}, true
	}
	return readOutput(task, err)
}

func (ch *chaos) taskID(key string) (string, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	id, ok := ch.acked[key]
	return id, ok
}

func (ch *chaos) record(client int, in taskInput, out taskOutput, call int64) {
	ret := ch.now()
	if out.Unknown {
		ret = math.MaxInt64 // may take effect at any time after the call
	}
	ch.mu.Lock()
	ch.history = append(ch.history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	ch.mu.Unlock()
}

func statusOf(err error) int {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func isClientError(err error) bool {
	c := statusOf(err)
	return c >= 400 && c < 500 && c != http.StatusRequestTimeout && c != http.StatusTooManyRequests
}

// notApplied reports an error that proves the request had no effect: it
// was never sent, or the server said so.
func notApplied(err error) bool {
	var se *api.StatusError
	if errors.As(err, &se) {
		return se.Reason == api.CodeNotApplied
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func isNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }
func isConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// operator drains a random node for a while and makes it eligible again.
func (ch *chaos) operator(ctx context.Context) {
	cls := ch.clientsFor("op")
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, 3))
	for ctx.Err() == nil {
		node := ch.agentCfgs[rng.IntN(len(ch.agentCfgs))].ID
		ch.setDrain(ctx, cls, node, true)
		sleepCtx(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond)
		ch.setDrain(context.Background(), cls, node, false)
		sleepCtx(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
	}
}

func (ch *chaos) setDrain(ctx context.Context, cls []*api.Client, node string, drain bool) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := cls[i%len(cls)].DrainNode(opCtx, node, drain)
		cancel()
		if err == nil || isClientError(err) || (drain && ctx.Err() != nil) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// zombie replays completions for attempts that already ended, claiming
// another outcome, as an agent back from a long pause would: every one
// must be refused.
func (ch *chaos) zombie(ctx context.Context) {
	cls := ch.clientsFor("zombie")
	rng := rand.New(rand.NewPCG(ch.cfg.Seed, 4))
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
		srv := ch.c.Server(rng.IntN(len(ch.c.Replicas)))
		if srv == nil {
			continue
		}
		st := srv.FSM().State()
		var ended []*fsm.Attempt
		for _, s := range []fsm.AttemptState{fsm.AttemptSucceeded, fsm.AttemptFailed, fsm.AttemptLost, fsm.AttemptCancelled, fsm.AttemptTimedOut} {
			as, err := st.AttemptsInState(s)
			if err == nil {
				ended = append(ended, as...)
			}
		}
		if len(ended) == 0 {
			continue
		}
		a := ended[rng.IntN(len(ended))]
		rp := replay{attemptID: a.ID, lease: a.LeaseVersion, claimed: fsm.AttemptSucceeded, before: a.State}
		req := api.AttemptCompleteRequest{LeaseVersion: a.LeaseVersion, ExitCode: 0, State: string(fsm.AttemptSucceeded)}
		if a.State == fsm.AttemptSucceeded {
			rp.claimed, req.State, req.ExitCode = fsm.AttemptFailed, string(fsm.AttemptFailed), 9
		}
		if rng.IntN(3) == 0 && a.LeaseVersion > 1 {
			rp.lease--
			req.LeaseVersion--
		}
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		rep, err := cls[rng.IntN(len(cls))].CompleteAttempt(opCtx, a.ID, req)
		cancel()
		if err == nil {
			rp.accepted, rp.duplicate = true, rep.Duplicate
		}
		ch.mu.Lock()
		ch.replays = append(ch.replays, rp)
		ch.mu.Unlock()
	}
}

// --- faults ---------------------------------------------------------------

func (ch *chaos) serverNames() []string {
	var out []string
	for _, r := range ch.c.Replicas {
		out = append(out, r.Cfg.ID)
	}
	return out
}

// others lists every endpoint except the given ones.
func (ch *chaos) endpoints() []string {
	out := ch.serverNames()
	for _, a := range ch.agentCfgs {
		out = append(out, a.ID)
	}
	for i := 0; i < ch.cfg.Clients; i++ {
		out = append(out, fmt.Sprintf("c%d", i+1))
	}
	return append(out, "op", "zombie")
}

func (ch *chaos) leader() int {
	for i := range ch.c.Replicas {
		if s := ch.c.Server(i); s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

func (ch *chaos) injected(kind string, removesLeader bool) {
	ch.mu.Lock()
	ch.report.Faults[kind]++
	if removesLeader {
		ch.injections = append(ch.injections, time.Since(ch.start))
	}
	ch.mu.Unlock()
	ch.t.Logf("chaos seed %d: %v %s", ch.cfg.Seed, time.Since(ch.start).Round(time.Millisecond), kind)
}

// faults runs the seeded fault schedule until ctx ends: one fault at a
// time, held for a while, then healed.
func (ch *chaos) faults(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(300+ch.rng.IntN(700))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		kind := allFaults[ch.rng.IntN(len(allFaults))]
		hold := time.Duration(1000+ch.rng.IntN(2000)) * time.Millisecond
		ch.inject(kind, hold)
	}
}

func (ch *chaos) inject(kind string, hold time.Duration) {
	servers := ch.serverNames()
	leader := ch.leader()
	if leader < 0 {
		leader = ch.rng.IntN(len(servers))
	}
	follower := (leader + 1 + ch.rng.IntN(len(servers)-1)) % len(servers)
	switch kind {
	case FaultLeaderCrash, FaultFollowerCrash:
		i := leader
		if kind == FaultFollowerCrash {
			i = follower
		}
		ch.c.Stop(i)
		ch.injected(kind, kind == FaultLeaderCrash)
		time.Sleep(hold)
		ch.c.Start(i)
	case FaultRestartAll:
		for i := range servers {
			ch.c.Stop(i)
		}
		ch.injected(kind, true)
		time.Sleep(hold / 2)
		for i := range servers {
			ch.c.Start(i)
		}
	case FaultIsolateLeader:
		ch.injected(kind, true)
		var rest []string
		for _, e := range ch.endpoints() {
			if e != servers[leader] {
				rest = append(rest, e)
			}
		}
		ch.net.Partition([]string{servers[leader]}, rest)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultPauseLeader:
		ch.injected(kind, true)
		ch.net.Pause(servers[leader], true)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultSplit:
		// A random replica with a random share of agents and clients on
		// the minority side.
		ch.injected(kind, servers[follower] != servers[leader])
		minority := []string{servers[follower]}
		var majority []string
		for _, e := range ch.endpoints() {
			if slices.Contains(servers, e) {
				if e != servers[follower] {
					majority = append(majority, e)
				}
				continue
			}
			if ch.rng.IntN(3) == 0 {
				minority = append(minority, e)
			} else {
				majority = append(majority, e)
			}
		}
		ch.net.Partition(minority, majority)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultOneWay:
		ch.injected(kind, false)
		from, to := servers[leader], servers[follower]
		if ch.rng.IntN(2) == 0 {
			from, to = to, from
		}
		ch.net.Block(from, to, true)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultAgentPause:
		// Long enough for the leader to declare the node down and reclaim
		// its attempts; when it resumes it reports stale results.
		ch.injected(kind, false)
		a := ch.agentCfgs[ch.rng.IntN(len(ch.agentCfgs))].ID
		ch.net.Pause(a, true)
		time.Sleep(hold + 3*time.Second)
		ch.net.Heal()
	case FaultAgentKill:
		ch.injected(kind, false)
		i := ch.rng.IntN(len(ch.agentCfgs))
		ch.agentMu.Lock()
		ch.agents[i].Stop()
		ch.agentMu.Unlock()
		time.Sleep(hold)
		ch.agentMu.Lock()
		ch.agents[i] = ch.c.StartAgent(ch.agentCfgs[i])
		ch.agentMu.Unlock()
	case FaultLoss:
		ch.injected(kind, false)
		ch.net.SetLoss(0.1 + 0.2*ch.rng.Float64())
		time.Sleep(hold)
		ch.net.Heal()
	case FaultDelay:
		ch.injected(kind, false)
		ch.net.SetDelay(time.Duration(20+ch.rng.IntN(150)) * time.Millisecond)
		time.Sleep(hold)
		ch.net.Heal()
	}
}

// failovers measures, for each fault that took the leader away, the time
// from injection to the first acknowledged submit called after it.
func (ch *chaos) failovers() []time.Duration {
	var out []time.Duration
	for _, at := range ch.injections {
		first := int64(-1)
		for _, op := range ch.history {
			in, out := op.Input.(taskInput), op.Output.(taskOutput)
			if in.Kind != "submit" || out.Unknown || op.Call < int64(at) {
				continue
			}
			if first < 0 || op.Return < first {
				first = op.Return
			}
		}
		if first >= 0 {
			out = append(out, time.Duration(first)-at)
		}
	}
	return out
}

// --- quiescence and checks ---------------------------------------------------

func (ch *chaos) recordHash(replica string, index uint64, st *fsm.State) {
	if !ch.hashing.Load() {
		return
	}
	h, err := st.Hash()
	if err != nil {
		ch.anomaly(CheckHashes, "%s: hash at %d: %v", replica, index, err)
		return
	}
	ch.hashMu.Lock()
	if ch.hashes[replica] == nil {
		ch.hashes[replica] = map[uint64]string{}
	}
	ch.hashes[replica][index] = h
	ch.hashMu.Unlock()
}

// quiesce heals every fault, brings every replica and agent back and waits
// until every task the clients may have created has ended.
func (ch *chaos) quiesce() {
	ch.net.Heal()
	for i := range ch.c.Replicas {
		if ch.c.Server(i) == nil {
			ch.c.Start(i)
		}
	}
	ch.c.WaitForLeader()
	cl := ch.c.AllClient()
	ch.mu.Lock()
	keys := map[string]bool{}
	for k := range ch.acked {
		keys[k] = true
	}
	for k := range ch.unknownKey {
		keys[k] = true
	}
	ch.mu.Unlock()
	var last string
	ok := Eventually(90*time.Second, func() bool {
		i := ch.leader()
		if i < 0 {
			return false
		}
		st := ch.c.Server(i).FSM().State()
		for k := range keys {
			task, err := st.TaskByIdempotencyKey(k)
			if err != nil || task == nil {
				continue // an unknown submit that never happened
			}
			if !task.State.Terminal() {
				last = fmt.Sprintf("task %s (key %s) is %s: %s", task.ID, k, task.State, task.LastExplain)
				return false
			}
		}
		return true
	})
	if !ok {
		ch.anomaly(CheckTerminal, "tasks did not all end within 90s of healing; last: %s", last)
	}
	// Hash every replica's state from here on, and make a few entries
	// happen: a marker task runs to completion.
	ch.hashing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := cl.SubmitTask(ctx, api.TaskSpec{IdempotencyKey: fmt.Sprintf("marker-%d", ch.cfg.Seed), Command: []string{"true"}}); err != nil {
		ch.anomaly(CheckHashes, "marker submit after healing failed: %v", err)
	}
}

func (ch *chaos) check() {
	// Acknowledged submits on every replica, each ended, at one index.
	var target uint64
	if srv := ch.c.Server(ch.c.WaitForLeader()); srv != nil {
		target = srv.FSM().Index()
	}
	ch.c.WaitApplied(target)
	ch.mu.Lock()
	acked := make(map[string]string, len(ch.acked))
	for k, v := range ch.acked {
		acked[k] = v
	}
	ch.mu.Unlock()
	for i, r := range ch.c.Replicas {
		st := ch.c.Server(i).FSM().State()
		for key, id := range acked {
			task, err := st.TaskByIdempotencyKey(key)
			switch {
			case err != nil || task == nil:
				ch.anomaly(CheckAcked, "%s: acknowledged task %s (key %s) missing", r.Cfg.ID, id, key)
			case task.ID != id:
				ch.anomaly(CheckIdempotency, "%s: key %s is task %s, acknowledged as %s", r.Cfg.ID, key, task.ID, id)
			case !task.State.Terminal():
				ch.anomaly(CheckTerminal, "%s: task %s still %s", r.Cfg.ID, id, task.State)
			}
		}
	}

	// Zombie replays: none with another outcome may have been accepted,
	// and no attempt may carry a claimed outcome it did not have before.
	st := ch.c.Server(ch.c.WaitForLeader()).FSM().State()
	ch.mu.Lock()
	replays := slices.Clone(ch.replays)
	ch.mu.Unlock()
	for _, rp := range replays {
		if rp.accepted && !rp.duplicate {
			ch.anomaly(CheckStale, "attempt %s (%s) accepted a replayed %s with lease %d", rp.attemptID, rp.before, rp.claimed, rp.lease)
		}
		if a, err := st.Attempt(rp.attemptID); err == nil && a != nil && a.State != rp.before {
			ch.anomaly(CheckStale, "attempt %s changed from %s to %s after a zombie replay", rp.attemptID, rp.before, a.State)
		}
	}

	// Equal hashes at every index all replicas hashed.
	if !Eventually(30*time.Second, func() bool { return len(ch.commonHashIndexes()) > 0 }) {
		ch.anomaly(CheckHashes, "replicas hashed no common index after healing")
	}
	ch.hashing.Store(false)
	ch.hashMu.Lock()
	for _, idx := range ch.commonHashIndexesLocked() {
		var first, firstID string
		for id, m := range ch.hashes {
			if first == "" {
				first, firstID = m[idx], id
			} else if m[idx] != first {
				ch.anomaly(CheckHashes, "index %d: %s hash %.12s, %s hash %.12s", idx, firstID, first, id, m[idx])
			}
		}
	}
	ch.hashMu.Unlock()

	ch.checkLinearizable()
}

func (ch *chaos) commonHashIndexes() []uint64 {
	ch.hashMu.Lock()
	defer ch.hashMu.Unlock()
	return ch.commonHashIndexesLocked()
}

func (ch *chaos) commonHashIndexesLocked() []uint64 {
	if len(ch.hashes) < len(ch.c.Replicas) {
		return nil
	}
	var out []uint64
	for _, m := range ch.hashes {
		for idx := range m {
			all := true
			for _, o := range ch.hashes {
				if _, ok := o[idx]; !ok {
					all = false
					break
				}
			}
			if all {
				out = append(out, idx)
			}
		}
		break
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (ch *chaos) checkLinearizable() {
	ch.mu.Lock()
	history := slices.Clone(ch.history)
	ch.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(TaskModel, history, 60*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		ch.t.Logf("chaos seed %d: linearizability check timed out (%d operations); counted as no anomaly", ch.cfg.Seed, len(history))
		return
	}
	dir := ch.cfg.OutDir
	if dir == "" {
		dir = ch.t.ArtifactDir()
	}
	base := filepath.Join(dir, fmt.Sprintf("chaos-%d", ch.cfg.Seed))
	if b, err := json.MarshalIndent(history, "", " "); err == nil {
		_ = os.WriteFile(base+"-history.json", b, 0o644)
	}
	if err := porcupine.VisualizePath(TaskModel, info, base+"-porcupine.html"); err != nil {
		ch.t.Logf("visualize: %v", err)
	}
	ch.anomaly(CheckLinearizable, "history of %d operations is not linearizable; see %s-porcupine.html", len(history), base)
}

// taskState is the model's knowledge of one task.
type taskState struct {
	Exists bool
	State  string
	Index  uint64
	// DoneNotCancelled: a cancel was refused because the task had ended
	// otherwise; the outcome is not known yet.
	DoneNotCancelled bool
}

func terminal(s string) bool { st, _ := fsm.ParseTaskState(s); return st.Terminal() }

// TaskModel is the sequential specification of one task as clients see
// it. The scheduler and agents move a task forward on their own, so a read
// may observe any later state; what it may not do is go back (a lower
// modify index, or another state at the same index), lose an acknowledged
// task, or change a task's terminal state.
var TaskModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(taskInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return taskState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(taskState), input.(taskInput), output.(taskOutput)
		switch in.Kind {
		case "submit":
			s.Exists = true
			return true, s
		case "get", "cancel":
			if !out.Found {
				return !s.Exists, s
			}
			if !s.Exists {
				return false, s
			}
			if out.Rejected { // cancel refused: the task had ended another way
				if s.State == fsm.TaskCancelled.String() {
					return false, s
				}
				if s.State == "" || !terminal(s.State) {
					s.DoneNotCancelled = true
				}
				return true, s
			}
			if in.Kind == "cancel" && out.State != fsm.TaskCancelled.String() {
				return false, s
			}
			if out.Index < s.Index || (out.Index == s.Index && s.State != "" && out.State != s.State) {
				return false, s
			}
			if terminal(s.State) && out.State != s.State {
				return false, s
			}
			if s.DoneNotCancelled && (!terminal(out.State) || out.State == fsm.TaskCancelled.String()) {
				return false, s
			}
			s.State, s.Index = out.State, out.Index
			if terminal(out.State) {
				s.DoneNotCancelled = false
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(taskInput), output.(taskOutput)
		switch {
		case out.Unknown:
			return fmt.Sprintf("%s(%s) → ?", in.Kind, in.Key)
		case in.Kind == "submit":
			return fmt.Sprintf("submit(%s) → ok", in.Key)
		case !out.Found:
			return fmt.Sprintf("%s(%s) → not found", in.Kind, in.Key)
		case out.Rejected:
			return fmt.Sprintf("cancel(%s) → 409", in.Key)
		}
		return fmt.Sprintf("%s(%s) → %s@%d", in.Kind, in.Key, out.State, out.Index)
	},
	DescribeState: func(state any) string {
		s := state.(taskState)
		if !s.Exists {
			return "absent"
		}
		return strings.TrimSpace(fmt.Sprintf("%s@%d %s", s.State, s.Index, map[bool]string{true: "(ended, not cancelled)"}[s.DoneNotCancelled]))
	},
}
