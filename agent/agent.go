package agent

import (
	"context"
	"fmt"
	"herd/internal/version"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"herd/api"
	"herd/internal/pki"
	"herd/internal/steady"
)

// Agent is one running edge agent.
type Agent struct {
	// keyring is the gossip pool's keys in use (nil ring without
	// encryption).
	keyring agentKeyring
	// tls is the agent's certificate and CA, nil without TLS.
	tls      *pki.Material
	cfg      Config
	logger   hclog.Logger
	client   *api.Client
	reports  *reporter
	limiter  limiter
	paths    pathCache
	workDirs *workDirs
	clock    *steady.Clock // ages files; see Config.Clock
	// conditions finds and reports what is wrong with the node.
	conditions *conditionWatch
	// profile measures the node and its datasets, and runs health checks;
	// dataAddr is where the agent serves its datasets.
	profile  *profiler
	dataAddr string
	metrics  *prometheus.Registry
	// oci runs containers (nil: none works here, ociProblem says why);
	// images is the image cache.
	oci        *ociRuntime
	ociProblem string
	images     *imageCache

	session    atomic.Uint64
	reregister chan struct{}
	lease      lease
	guard      atomic.Pointer[leaseGuard] // nil: no lease guard runs beside the agent
	leaseAddr  atomic.Pointer[string]     // where tasks check their leases, once served
	// startDeadline bounds how long a start report is retried (30 s).
	startDeadline time.Duration
	renewNow      chan struct{} // asks the heartbeat loop for an HTTP heartbeat now

	gossip      *agentGossip
	hibernating atomic.Bool
	wakeCh      chan struct{}
	metaDirty   atomic.Bool

	mu       sync.Mutex
	running  map[string]*execution // attempt id → what runs it
	finished map[string]bool       // attempts this agent ended (or gave up on)
	// leftovers counts, per attempt, the processes an earlier run of the
	// agent left running, which the first reconcile killed (nil before it).
	leftovers map[string]int
	// leftoverContainers are the attempts whose containers an earlier run
	// left, removed when the agent started.
	leftoverContainers map[string]bool
	last               *api.Assignments // latest assignments, to start more when slots free up
	lastAt             time.Time        // when last arrived (its StartWithinMs count from then)

	wg sync.WaitGroup
	// Stats for tests and the node's view of itself.
	started, completed, rejected atomic.Uint64
	fences                       atomic.Uint64 // attempts stopped for want of a lease
	lapses                       atomic.Uint64 // times the lease ran out
}

type execution struct {
	assignment api.Assignment
	// cancel stops the attempt; the cause is a *fenceError when the lease
	// on it ran out.
	cancel context.CancelCauseFunc
	fenced bool // stopped for want of a lease
	// ended: the process has ended and its result is on its way; the
	// cluster's list drops the attempt once the result commits, which
	// may be before the report's answer is back.
	ended bool
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
	transport := api.NewTransport()
	var material *pki.Material
	if cfg.TLS.Enabled() {
		if material, err = pki.Load(cfg.TLS); err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		if id := material.Identity(); id != (pki.Identity{Role: pki.RoleAgent, ID: cfg.ID}) {
			return nil, fmt.Errorf("TLS: %s holds the identity %s, not agent/%s (issue one with herd tls cert create -agent -id %s)", cfg.TLS.Cert, id, cfg.ID, cfg.ID)
		}
		// The servers are judged by their certificates' role, not by
		// host names: an agent reaches them at whatever address it is
		// given.
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		transport.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, dialer.DialContext, addr, material.ClientConfig(pki.RoleServer))
		}
		client.WithHTTPS()
	}
	hc := &http.Client{Timeout: cfg.AssignmentWait + 30*time.Second, Transport: transport}
	if cfg.Transport != nil {
		hc.Transport = cfg.Transport
	}
	client.SetHTTPClient(hc)
	if cfg.Token != "" {
		client.SetToken(cfg.Token)
	}
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
	if w, ok := lim.(interface{ warnings() []string }); ok {
		for _, msg := range w.warnings() {
			logger.Warn("resource limits: "+msg, "method", lim.Name())
		}
	}
	a := &Agent{
		tls: material,
		cfg: cfg, logger: logger, client: client, reports: newReporter(client), limiter: lim, paths: pathCache{now: time.Now},
		workDirs:   newWorkDirs(filepath.Join(cfg.DataDir, "work")),
		reregister: make(chan struct{}, 1),
		renewNow:   make(chan struct{}, 1),
		wakeCh:     make(chan struct{}, 1),
		running:    map[string]*execution{}, finished: map[string]bool{},
		clock: steady.New(cfg.Clock, nil), startDeadline: 30 * time.Second,
	}
	a.lease.onRenew = func(renewedAt time.Time, ttl time.Duration) {
		a.guard.Load().leaseRenewed(renewedAt, ttl, a.fenceGrace(ttl), a.leaseCheckEvery())
	}
	if err := a.setUpContainers(); err != nil {
		return nil, err
	}
	a.conditions = newConditionWatch(a)
	a.profile = newProfiler(a)
	a.metrics = newAgentRegistry(a)
	a.profile.loadOutputs()
	return a, nil
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

// LeaseLapses is how many times the agent's lease ran out (with or
// without attempts to stop).
func (a *Agent) LeaseLapses() uint64 { return a.lapses.Load() }

// Fences is how many attempts the agent stopped because the lease on
// them ran out.
func (a *Agent) Fences() uint64 { return a.fences.Load() }

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
	if addr, err := a.serveDatasets(ctx); err != nil {
		// Stages elsewhere then cannot fetch this node's outputs.
		a.logger.Warn("cannot serve datasets to other agents", "error", err)
	} else {
		a.dataAddr = addr
	}
	if err := a.serveLeaseChecks(ctx); err != nil {
		// Tasks then find no HERD_AGENT_ADDR; everything else works.
		a.logger.Warn("tasks cannot check their leases", "error", err)
	}
	// The guard runs before anything can start: from the first attempt
	// on, a stop or a death of the agent does not leave it running.
	a.guard.Store(a.startGuard())
	if err := a.register(ctx); err != nil {
		if a.gossip != nil {
			a.gossip.stop()
		}
		a.guard.Load().stop()
		return err
	}
	a.wg.Add(6)
	go func() { defer a.wg.Done(); a.profile.run(ctx) }()
	go func() { defer a.wg.Done(); a.reports.run(ctx) }()
	go func() { defer a.wg.Done(); a.leaseLoop(ctx) }()
	go func() { defer a.wg.Done(); a.conditions.run(ctx) }()
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
		ex.cancel(nil)
	}
	a.mu.Unlock()
	a.wg.Wait()
	// Every attempt is stopped: the guard may go.
	a.guard.Load().stop()
	if d, ok := a.limiter.(interface{ drain() }); ok {
		d.drain() // idle pooled cgroups
	}
	a.logger.Info("agent stopped")
	return nil
}

// meta is what the agent advertises in the gossip pool.
func (a *Agent) meta() api.GossipMeta {
	a.mu.Lock()
	running := len(a.running)
	a.mu.Unlock()
	return api.GossipMeta{
		Version: version.Version(),
		Role:    api.RoleAgent, ID: a.cfg.ID, FreeSlots: max(a.cfg.Slots-running, 0), Running: running,
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
	// An unanswered heartbeat goes again three times within its
	// interval: at 30% loss each way a single one is answered about half
	// the time, four about 94%.
	resend := time.NewTicker(max(a.cfg.HeartbeatInterval/4, 10*time.Millisecond))
	defer resend.Stop()
	a.gossip.heartbeatGossip()
	for {
		select {
		case <-ctx.Done():
			return
		case <-resend.C:
			a.gossip.resendHeartbeat()
		case <-hb.C:
			resend.Reset(max(a.cfg.HeartbeatInterval/4, 10*time.Millisecond))
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

// janitor removes logs and working directories older than the retention.
func (a *Agent) janitor(ctx context.Context) {
	every := min(a.cfg.LogRetention/4, time.Hour)
	for {
		if n := a.pruneAttemptFiles(a.pruneCutoff()); n > 0 {
			a.logger.Info("removed old logs and working directories", "count", n, "retention", a.cfg.LogRetention)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// pruneCutoff is the time before which attempt files are old enough to
// remove: by the steady clock, so that a step of the wall clock after the
// files were written does not age them at once.
func (a *Agent) pruneCutoff() time.Time { return a.clock.Now().Add(-a.cfg.LogRetention) }

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
	return pruneOld(filepath.Join(a.cfg.DataDir, "logs"), cutoff, keep) + pruneOld(filepath.Join(a.cfg.DataDir, "work"), cutoff, keep) +
		pruneOld(fenceDir(a.cfg.DataDir), cutoff, keep)
}

// ReloadTLS reads the agent's certificate, key and CA again (SIGHUP): new
// connections to the servers use them. On an error the material in use
// stays.
func (a *Agent) ReloadTLS() error {
	if a.tls == nil {
		return nil
	}
	if err := a.tls.Reload(); err != nil {
		a.logger.Error("TLS reload failed; keeping the certificates in use", "error", err)
		return err
	}
	a.logger.Info("TLS certificates reloaded", "expires", a.tls.NotAfter())
	return nil
}
