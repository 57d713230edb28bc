package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"herd/api"
)

// Agent is one running edge agent.
type Agent struct {
	cfg      Config
	logger   hclog.Logger
	client   *api.Client
	reports  *reporter
	limiter  limiter
	paths    pathCache
	workDirs *workDirs

	session    atomic.Uint64
	reregister chan struct{}

	gossip      *agentGossip
	hibernating atomic.Bool
	wakeCh      chan struct{}
	metaDirty   atomic.Bool

	mu       sync.Mutex
	running  map[string]*execution // attempt id → what runs it
	finished map[string]bool       // attempts this agent ended (or gave up on)
	last     *api.Assignments      // latest assignments, to start more when slots free up

	wg sync.WaitGroup
	// Stats for tests and the node's view of itself.
	started, completed, rejected atomic.Uint64
}

type execution struct {
	assignment api.Assignment
	cancel     context.CancelFunc
}

// New checks the configuration and prepares an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid agent configuration: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "herd"})
	}
	logger = logger.Named("agent").With("node", cfg.ID)
	client, err := api.NewClient(cfg.Servers...)
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	hc := &http.Client{Timeout: cfg.AssignmentWait + 30*time.Second, Transport: api.NewTransport()}
	if cfg.Transport != nil {
		hc.Transport = cfg.Transport
	}
	client.SetHTTPClient(hc)
	client.OnFailover = func(from, to string, err error) {
		logger.Warn("server unreachable, continuing through another", "from", from, "to", to, "error", err)
	}
	for _, d := range []string{"work", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o750); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
	}
	lim, skipped := pickLimiter(cfg.Limits, cfg.DataDir)
	for _, s := range skipped {
		logger.Info("limit method unavailable", "reason", s)
	}
	logger.Info("resource limits", "method", lim.Name())
	return &Agent{
		cfg: cfg, logger: logger, client: client, reports: newReporter(client), limiter: lim, paths: pathCache{now: time.Now},
		workDirs:   newWorkDirs(filepath.Join(cfg.DataDir, "work")),
		reregister: make(chan struct{}, 1),
		wakeCh:     make(chan struct{}, 1),
		running:    map[string]*execution{}, finished: map[string]bool{},
	}, nil
}

// LimitMethod is how this agent enforces resource limits.
func (a *Agent) LimitMethod() string { return a.limiter.Name() }

// Config is the configuration in force, defaults applied.
func (a *Agent) Config() Config { return a.cfg }

// Session is the current session generation (0 before registration).
func (a *Agent) Session() uint64 { return a.session.Load() }

// Running lists the attempts running now.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.running))
}

// Stats returns attempts started, completions acknowledged and results
// the cluster rejected as stale.
func (a *Agent) Stats() (started, completed, rejected uint64) {
	return a.started.Load(), a.completed.Load(), a.rejected.Load()
}

// Run registers and works until ctx ends, then stops every attempt it
// runs (reporting them lost) and returns.
func (a *Agent) Run(ctx context.Context) error {
	// Join the gossip pool first: a duplicate name or a wrong key is then
	// refused before this agent's registration disturbs anyone.
	if err := a.startGossip(ctx); err != nil {
		return err
	}
	if err := a.register(ctx); err != nil {
		if a.gossip != nil {
			a.gossip.stop()
		}
		return err
	}
	a.wg.Add(3)
	go func() { defer a.wg.Done(); a.reports.run(ctx) }()
	go func() { defer a.wg.Done(); a.heartbeatLoop(ctx) }()
	go func() { defer a.wg.Done(); a.janitor(ctx) }()
	if a.gossip != nil {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.gossipLoop(ctx) }()
	}
	a.assignmentLoop(ctx)
	if a.gossip != nil {
		defer a.gossip.stop()
	}
	a.mu.Lock()
	for _, ex := range a.running {
		ex.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
	if d, ok := a.limiter.(interface{ drain() }); ok {
		d.drain() // idle pooled cgroups
	}
	a.logger.Info("agent stopped")
	return nil
}

// register registers through any server, retrying with backoff.
func (a *Agent) register(ctx context.Context) error {
	labels := maps.Clone(a.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["herd.limits"] = a.limiter.Name()
	// One token per registration: its retries (a lost answer, a failover)
	// return the same session instead of starting new ones.
	token := make([]byte, 12)
	_, _ = rand.Read(token)
	reg := api.NodeRegistration{
		ID: a.cfg.ID, Address: a.cfg.Address, Labels: labels, Capabilities: a.cfg.Capabilities,
		Resources: a.cfg.Resources, Slots: a.cfg.Slots, Weight: a.cfg.Weight, Token: hex.EncodeToString(token),
	}
	backoff := 200 * time.Millisecond
	for {
		res, err := a.client.RegisterNode(ctx, reg)
		if err == nil {
			a.session.Store(res.SessionGeneration)
			a.logger.Info("registered", "session", res.SessionGeneration, "cpu_millis", reg.Resources.CPUMillis,
				"memory_mb", reg.Resources.MemoryMB, "slots", reg.Slots, "limits", a.limiter.Name())
			return nil
		}
		var se *api.StatusError
		if errors.As(err, &se) && se.Code == http.StatusBadRequest {
			return fmt.Errorf("registration refused: %w", err)
		}
		a.logger.Warn("registration failed, retrying", "in", backoff, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (a *Agent) requestReregister() {
	select {
	case a.reregister <- struct{}{}:
	default:
	}
}

// heartbeatLoop keeps the session alive and registers again when the
// cluster declared the node down or its session is no longer current.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	every := a.cfg.HeartbeatInterval
	if a.gossip != nil {
		// Gossip carries liveness; HTTP heartbeats only check the session.
		every *= 6
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reregister:
			a.logger.Warn("registering again: the cluster no longer knows this session")
			if err := a.register(ctx); err != nil {
				return
			}
			continue
		case <-t.C:
		}
		hb, err := a.client.Heartbeat(ctx, a.cfg.ID, a.session.Load())
		var se *api.StatusError
		switch {
		case err == nil && hb.Liveness == api.LivenessDown:
			a.requestReregister()
		case errors.As(err, &se) && (se.Reason == "session_changed" || se.Code == http.StatusNotFound):
			a.requestReregister()
		case err != nil && ctx.Err() == nil:
			a.logger.Warn("heartbeat failed", "error", err)
		}
	}
}

// assignmentLoop watches this node's assignments and reconciles.
func (a *Agent) assignmentLoop(ctx context.Context) {
	// index is the last list's (what the next watch waits past); applied
	// the most advanced replica state a list acted on came from.
	var index, applied uint64
	lastBusy := time.Now()
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		q := api.AssignmentsQuery{Index: index, Wait: a.cfg.AssignmentWait}
		if index > 0 {
			q.Known = a.knownAssignments()
		}
		as, err := a.client.Assignments(ctx, a.cfg.ID, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A 404 here may only mean the replica asked has not applied the
			// registration yet; the heartbeat, answered by the leader,
			// decides whether to register again.
			a.logger.Warn("assignment watch failed, retrying", "in", backoff, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		if as.AppliedIndex != 0 && as.AppliedIndex < applied {
			// A replica behind one this agent already heard from (it failed
			// over to a lagging or partitioned one): its list is older than
			// what the agent acts on, and an attempt missing from it was not
			// taken back. Wait for the replica to catch up.
			continue
		}
		if as.SessionGeneration < a.session.Load() {
			// The replica asked has not applied this agent's registration
			// yet: its list predates the session, and an attempt the agent's
			// previous run started may still read RESERVED there (starting
			// it would run it twice). Wait until the registration reaches it.
			index = max(index, as.Index)
			continue
		}
		index, applied = as.Index, max(applied, as.AppliedIndex)
		if as.Liveness == api.LivenessDown {
			a.requestReregister()
		}
		a.reconcile(ctx, &as)
		if len(as.Attempts) > 0 || len(a.Running()) > 0 {
			lastBusy = time.Now()
		}
		if a.cfg.HibernateAfter > 0 && a.gossip != nil && time.Since(lastBusy) >= a.cfg.HibernateAfter {
			if !a.hibernate(ctx) {
				return
			}
			index, lastBusy = 0, time.Now()
		}
	}
}

// knownAssignments is the digest of the live set this agent expects: the
// last list it got without the attempts it has ended since. The cluster
// then answers only changes the agent did not make itself (a reservation,
// a cancel, a reclaim, a new session or liveness), not its own starts and
// results committing.
func (a *Agent) knownAssignments() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return ""
	}
	ids := make([]string, 0, len(a.last.Attempts))
	for _, x := range a.last.Attempts {
		if !a.finished[x.Attempt.ID] {
			ids = append(ids, x.Attempt.ID)
		}
	}
	return api.AssignmentsDigest(a.last.SessionGeneration, a.last.Liveness, ids)
}

// hibernate stops polling and advertises it, keeping only gossip (the
// node stays alive) until the leader wakes it. It returns false when the
// agent stops meanwhile.
func (a *Agent) hibernate(ctx context.Context) bool {
	a.hibernating.Store(true)
	a.gossip.publish()
	a.logger.Info("idle: hibernating until woken", "idle_for", a.cfg.HibernateAfter)
	select {
	case <-ctx.Done():
		return false
	case <-a.wakeCh:
	}
	a.hibernating.Store(false)
	a.gossip.publish()
	a.logger.Info("woken up: polling for assignments again")
	return true
}

// wakeUp ends hibernation (a wake message from the leader).
func (a *Agent) wakeUp() {
	select {
	case a.wakeCh <- struct{}{}:
	default:
	}
}

// Hibernating reports whether the agent sleeps.
func (a *Agent) Hibernating() bool { return a.hibernating.Load() }

// meta is what the agent advertises in the gossip pool.
func (a *Agent) meta() api.GossipMeta {
	a.mu.Lock()
	running := len(a.running)
	a.mu.Unlock()
	return api.GossipMeta{
		Role: api.RoleAgent, ID: a.cfg.ID, FreeSlots: max(a.cfg.Slots-running, 0), Running: running,
		Load: loadAverage(), Hibernating: a.hibernating.Load(), Session: a.session.Load(),
	}
}

// gossipLoop heartbeats the servers over gossip and pushes metadata
// changes, at most once a second (memberlist spreads every update).
func (a *Agent) gossipLoop(ctx context.Context) {
	hb := time.NewTicker(a.cfg.HeartbeatInterval)
	defer hb.Stop()
	meta := time.NewTicker(time.Second)
	defer meta.Stop()
	a.gossip.heartbeatGossip()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			a.gossip.heartbeatGossip()
		case <-meta.C:
			if a.metaDirty.Swap(false) {
				// UpdateNode waits for the broadcast to go out: never let
				// it delay a heartbeat.
				go a.gossip.publish()
			}
		}
	}
}

// loadAverage is the 1-minute load average × 100 (0 if unknown).
func loadAverage() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return int(v * 100)
}

// reconcile makes what runs here match the cluster's assignments: stop
// what was taken back, start what is new, up to the slots.
func (a *Agent) reconcile(ctx context.Context, as *api.Assignments) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if as != nil {
		a.last = as
	}
	if a.last == nil {
		return
	}
	live := make(map[string]struct{}, len(a.last.Attempts))
	for _, x := range a.last.Attempts {
		live[x.Attempt.ID] = struct{}{}
	}
	for id, ex := range a.running {
		if _, ok := live[id]; !ok {
			a.logger.Info("attempt taken back by the cluster (cancelled or reclaimed), stopping it", "attempt", id)
			ex.cancel()
		}
	}
	for id := range a.finished {
		if _, ok := live[id]; !ok {
			delete(a.finished, id) // the cluster has recorded its end
		}
	}
	// By index: a copy per element escaped to the heap through the
	// goroutines below, on every call (a third of a busy agent's
	// allocations); the copy is now made only for an attempt started.
	for i := range a.last.Attempts {
		id := a.last.Attempts[i].Attempt.ID
		if a.running[id] != nil || a.finished[id] {
			continue
		}
		x := a.last.Attempts[i]
		if x.Attempt.State == api.AttemptRunning {
			// Started by an earlier run of this agent, which is gone: the
			// process is lost. Report it so the task is retried now rather
			// than when a timeout notices.
			a.finished[id] = true
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.report(ctx, x, outcome{state: api.AttemptLost, exitCode: -1, err: "the agent restarted; the process is gone"})
			}()
			continue
		}
		if len(a.running) >= max(a.cfg.Slots, 1) {
			continue
		}
		actx, cancel := context.WithCancel(ctx)
		a.running[id] = &execution{assignment: x, cancel: cancel}
		a.metaDirty.Store(true)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer cancel()
			a.execute(ctx, actx, x)
			a.mu.Lock()
			delete(a.running, id)
			a.finished[id] = true
			a.mu.Unlock()
			a.metaDirty.Store(true)
			a.reconcile(ctx, nil) // a slot is free: start what waits
		}()
	}
}

// execute runs one attempt: report the start (fenced), run it under a
// watchdog, report the result. agentCtx ends with the agent; attemptCtx
// also ends when the cluster takes the attempt back.
func (a *Agent) execute(agentCtx, attemptCtx context.Context, x api.Assignment) {
	att := x.Attempt
	log := a.logger.With("task", att.TaskID, "attempt", att.ID, "number", att.Number)
	if !a.reportStart(attemptCtx, x, log) {
		return
	}
	a.started.Add(1)
	log.Info("attempt started", "command", x.Spec.Command)

	timeout := time.Duration(derefInt64(x.Spec.TimeoutSeconds, api.DefaultTimeoutSeconds)) * time.Second
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				log.Error("executor crashed", "panic", p)
				done <- outcome{state: api.AttemptFailed, exitCode: -1, err: fmt.Sprintf("executor crashed: %v", p)}
			}
		}()
		done <- a.runProcess(attemptCtx, x)
	}()
	var out outcome
	watchdog := time.NewTimer(timeout + a.cfg.KillGrace + a.cfg.WatchdogGrace)
	defer watchdog.Stop()
	select {
	case out = <-done:
	case <-watchdog.C:
		// The executor should have ended the process by now: it is hung.
		// Report the attempt failed and move on; the agent stays up.
		log.Error("executor hung past the run timeout; giving the attempt up")
		out = outcome{state: api.AttemptFailed, exitCode: -1, err: "executor hung past the run timeout"}
	}
	if out.abandoned {
		if agentCtx.Err() == nil {
			log.Info("attempt stopped after the cluster took it back")
			return
		}
		out.err = "the agent stopped"
	}
	a.report(agentCtx, x, out)
}

// reportStart reports the start, retrying through failovers; false means
// the attempt must not run (taken back, or no server acknowledged it in
// time — the cluster will reclaim it).
func (a *Agent) reportStart(ctx context.Context, x api.Assignment, log hclog.Logger) bool {
	deadline := time.Now().Add(30 * time.Second)
	backoff := 100 * time.Millisecond
	for {
		_, err := a.reports.report(ctx, api.AttemptReportItem{AttemptID: x.Attempt.ID, Start: &api.AttemptStartRequest{LeaseVersion: x.Attempt.LeaseVersion}})
		if err == nil {
			return true
		}
		if refused(err) {
			log.Warn("start refused; not running the attempt", "error", err)
			return false
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			log.Warn("could not report the start; not running the attempt", "error", err)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// report sends an attempt's result until a server acknowledges or
// refuses it, or the agent stops.
// refused reports an answer that settles a report: a 4xx. A 5xx (no
// leader, outcome unknown, a timeout) and a failed request are retried:
// reports are idempotent, a repeat of an applied one is answered as a
// duplicate.
func refused(err error) bool {
	var se *api.StatusError
	return errors.As(err, &se) && se.Code >= 400 && se.Code < 500
}

func (a *Agent) report(ctx context.Context, x api.Assignment, out outcome) {
	log := a.logger.With("task", x.Attempt.TaskID, "attempt", x.Attempt.ID)
	req := api.AttemptCompleteRequest{
		LeaseVersion: x.Attempt.LeaseVersion, ExitCode: out.exitCode, OutputTail: truncate(out.tail, api.MaxOutputTail),
		Error: truncate(out.err, api.MaxErrorText), State: out.state,
	}
	backoff := 100 * time.Millisecond
	for {
		rep, err := a.reports.report(ctx, api.AttemptReportItem{AttemptID: x.Attempt.ID, Complete: &req})
		if err == nil {
			a.completed.Add(1)
			log.Info("result accepted", "state", out.state, "exit_code", out.exitCode, "duplicate", rep.Duplicate)
			return
		}
		if refused(err) {
			if errors.Is(err, api.ErrConflict) {
				a.rejected.Add(1)
			}
			log.Warn("result refused by the cluster", "state", out.state, "error", err)
			return
		}
		if ctx.Err() != nil {
			log.Warn("agent stopping; result not delivered", "state", out.state)
			return
		}
		log.Warn("result not delivered yet, retrying", "in", backoff, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// janitor removes logs and working directories older than the retention.
func (a *Agent) janitor(ctx context.Context) {
	every := min(a.cfg.LogRetention/4, time.Hour)
	for {
		if n := a.pruneAttemptFiles(time.Now().Add(-a.cfg.LogRetention)); n > 0 {
			a.logger.Info("removed old logs and working directories", "count", n, "retention", a.cfg.LogRetention)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// pruneAttemptFiles removes the logs and working directories last
// written before cutoff, except those of running attempts, and returns
// how many it removed.
func (a *Agent) pruneAttemptFiles(cutoff time.Time) int {
	a.mu.Lock()
	active := map[string]bool{}
	for id, ex := range a.running {
		active[id] = true
		active[ex.assignment.Attempt.TaskID] = true
	}
	a.mu.Unlock()
	// Entries are named by attempt (work directories, logs/ID.log and its
	// rotations) or, as older agents left them, by task.
	keep := func(name string) bool {
		id, _, _ := strings.Cut(name, ".")
		return active[id] || a.workDirs.inPool(name)
	}
	return pruneOld(filepath.Join(a.cfg.DataDir, "logs"), cutoff, keep) + pruneOld(filepath.Join(a.cfg.DataDir, "work"), cutoff, keep)
}

// truncate makes s valid UTF-8 of at most n bytes, keeping its end (the
// last output matters most) and cutting on a character boundary.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	return s
}
