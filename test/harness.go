package test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/cluster"
	"herd/config"
	"herd/fsm"
	"herd/test/localcluster"
)

// Replica is one server of a test cluster; it keeps its addresses and data
// directory across restarts.
type Replica struct {
	Cfg    config.Server
	Server *cluster.Server // nil while stopped
}

// Cluster is a set of replicas running in this process.
type Cluster struct {
	mu       sync.Mutex // guards Replicas[i].Server for concurrent readers
	lc       *localcluster.Cluster
	t        testing.TB
	Replicas []*Replica
	logger   hclog.Logger
	setup    Setup
	// sec is the CA and management token of a secured cluster, nil
	// otherwise.
	sec *security
}

// ClusterOption adjusts each replica's configuration before start.
type ClusterOption func(*config.Server)

// FastRaft shortens raft timings so elections in tests take well under a
// second, while staying tolerant of a loaded 2-core machine.
func FastRaft(c *config.Server) {
	c.Raft.HeartbeatTimeout = 500 * time.Millisecond
	c.Raft.ElectionTimeout = 500 * time.Millisecond
	c.Raft.LeaderLeaseTimeout = 250 * time.Millisecond
	c.Raft.CommitTimeout = 10 * time.Millisecond
}

// FreeAddr returns a loopback address whose port was free for TCP and UDP
// just now, never handed out before in this test binary (see
// localcluster.FreeAddr).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := localcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestLogger logs at HERD_TEST_LOG level to stderr; off by default, since
// fault tests make raft log expected errors by the hundred.
func TestLogger() hclog.Logger {
	level := os.Getenv("HERD_TEST_LOG")
	if level == "" {
		level = "off"
	}
	return hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(level), Output: os.Stderr})
}

// Setup holds what a test may change about the replicas it starts.
type Setup struct {
	// Config adjusts each replica's configuration.
	Config []ClusterOption
	// Clock replaces the wall clock whose readings the leader writes into
	// commands and judges deadlines by (raft keeps its own timers). By
	// default its moves are time passing (the replicas' monotonic time
	// moves with it); with ClockSteps they are steps of the wall clock,
	// and the replicas measure elapsed time themselves.
	Clock      func() time.Time
	ClockSteps bool
	// CheckInvariants checks fsm invariants after every applied entry on
	// every replica; violations fail the test.
	CheckInvariants bool
	// Gossip gives every replica a gossip address (fast memberlist timings)
	// and liveness verdicts on the scale of LivenessScale.
	Gossip bool
	// Network, when set, carries every link of the replicas and of the
	// agents started with StartAgent (raft, HTTP, forwarding, gossip), so
	// the test can partition, pause and degrade them.
	Network *Network
	// OnViolation receives invariant violations found by CheckInvariants;
	// nil fails the test.
	OnViolation func(replica string, index uint64, err error)
	// AfterApply, when set, also observes every applied entry.
	AfterApply func(replica string, index uint64, st *fsm.State)
	// Options, when set, adjusts a replica's options each time it starts.
	Options func(replica string, o *cluster.Options)
	// Bench lets the agents started with StartAgent benchmark their
	// nodes (by default they report static figures only).
	Bench bool
	// Secure runs the replicas with TLS and ACLs: certificates from a CA
	// of the test's, a management token bootstrapped once a leader is
	// up. The harness's clients and agents then use them.
	Secure bool
}

// FastLiveness scales liveness to tests: 150 ms heartbeats stretched up
// to 450 ms (a thirty-third of 5 s and 15 s), SUSPECT after 2 misses, DOWN
// after 5, 1 s leader grace.
func FastLiveness(c *config.Server) {
	c.Liveness = config.Liveness{
		HeartbeatInterval: 150 * time.Millisecond, MaxHeartbeatInterval: 450 * time.Millisecond,
		SuspectAfter: 2, DownAfter: 5, LeaderGrace: time.Second, WakeTimeout: time.Second,
	}
}

// NewCluster starts n replicas that form a cluster the way operators do
// it: each with bootstrap_expect n and the HTTP addresses of all.
func NewCluster(t testing.TB, n int, opts ...ClusterOption) *Cluster {
	return NewClusterWith(t, n, Setup{Config: opts})
}

// NewClusterWith is NewCluster with more control.
func NewClusterWith(t testing.TB, n int, setup Setup) *Cluster {
	t.Helper()
	opts := setup.Config
	c := &Cluster{t: t, logger: TestLogger(), setup: setup}
	if setup.Secure {
		c.sec = newSecurity(t, t.TempDir())
		opts = append(opts, secureOption(t, c.sec.dir))
	}
	cfgs, err := localcluster.Configs(t.TempDir(), "s", n, setup.Gossip)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		cfg.LogLevel = "error"
		FastRaft(&cfg)
		// Liveness verdicts are off unless a test asks for them: many tests
		// register nodes with no agent heartbeating behind them.
		cfg.Liveness.HeartbeatInterval, cfg.Liveness.MaxHeartbeatInterval = time.Hour, time.Hour
		if setup.Gossip {
			FastLiveness(&cfg)
		}
		for _, o := range opts {
			o(&cfg)
		}
		c.Replicas = append(c.Replicas, &Replica{Cfg: cfg})
	}
	for i := range c.Replicas {
		c.Start(i)
	}
	t.Cleanup(c.StopAll)
	c.WaitForLeader()
	if c.sec != nil {
		c.bootstrapACL()
	}
	return c
}

// Start (re)starts replica i from its data directory, with its current
// Cfg.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	r := c.Replicas[i]
	if r.Server != nil {
		c.t.Fatalf("replica %s already running", r.Cfg.ID)
	}
	c.mu.Lock()
	if c.lc == nil {
		c.lc = localcluster.New(nil, localcluster.Options{Logger: c.logger, Server: c.serverOptions})
	}
	for c.lc.Len() <= i {
		c.lc.Add(config.Server{})
	}
	c.lc.SetConfig(i, r.Cfg)
	c.mu.Unlock()
	if err := c.lc.StartReplica(i); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	r.Server = c.lc.Server(i)
	c.mu.Unlock()
}

// serverOptions are the start options of a replica: the test's clock,
// apply hooks and network.
func (c *Cluster) serverOptions(cfg config.Server, opts *cluster.Options) error {
	opts.Now = c.setup.Clock
	if clock := c.setup.Clock; clock != nil && !c.setup.ClockSteps {
		start := clock()
		opts.Elapsed = func() time.Duration { return clock().Sub(start) }
	}
	if c.setup.Gossip {
		opts.Gossip.Tune = FastGossip
	}
	id := cfg.ID
	check, observe, onViolation := c.setup.CheckInvariants, c.setup.AfterApply, c.setup.OnViolation
	if check || observe != nil {
		opts.AfterApply = func(index uint64, st *fsm.State) {
			if check {
				if err := st.CheckInvariants(); err != nil {
					if onViolation != nil {
						onViolation(id, index, err)
					} else {
						c.t.Errorf("%s: invariant broken at index %d: %v", id, index, err)
					}
				}
			}
			if observe != nil {
				observe(id, index, st)
			}
		}
	}
	if c.setup.Options != nil {
		c.setup.Options(id, opts)
	}
	if c.setup.Network != nil {
		return c.networkOptions(cfg, opts)
	}
	return nil
}

// networkOptions routes replica r's links through the test network.
func (c *Cluster) networkOptions(cfg config.Server, opts *cluster.Options) error {
	n, id := c.setup.Network, cfg.ID
	httpLn, err := n.Listen(id, cfg.HTTPAddr)
	if err != nil {
		return err
	}
	raftLn, err := n.Listen(id, cfg.RaftAddr)
	if err != nil {
		httpLn.Close()
		return err
	}
	opts.HTTPListener, opts.RaftListener = httpLn, raftLn
	opts.Dial = n.Dialer(id)
	if cfg.GossipAddr != "" {
		n.Own(cfg.GossipAddr, id)
		opts.Gossip.WrapTransport = n.GossipTransport(id, uint64(len(id))*7919)
	}
	return nil
}

// Stop shuts replica i down, keeping its data directory.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.take(i, "stop", c.lc.StopReplica)
}

// Crash stops replica i as a crash looks from outside: requests in
// flight cut off, no leadership handover (see cluster.Server.Halt).
func (c *Cluster) Crash(i int) {
	c.t.Helper()
	c.take(i, "crash", c.lc.HaltReplica)
}

// take stops running replica i with stop (nothing when it is not running).
func (c *Cluster) take(i int, what string, stop func(int) error) {
	c.t.Helper()
	r := c.Replicas[i]
	if r.Server == nil {
		return
	}
	c.mu.Lock()
	r.Server = nil
	c.mu.Unlock()
	if err := stop(i); err != nil {
		c.t.Errorf("%s %s: %v", what, r.Cfg.ID, err)
	}
}

// Server returns replica i's running server or nil; unlike reading
// Replicas[i].Server it is safe while other goroutines stop and start
// replicas.
func (c *Cluster) Server(i int) *cluster.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Replicas[i].Server
}

// StopAll stops every running replica.
func (c *Cluster) StopAll() {
	for i := range c.Replicas {
		c.Stop(i)
	}
}

// Client returns an API client for replica i only.
func (c *Cluster) Client(i int) *api.Client {
	c.t.Helper()
	cl, err := api.NewClient(c.Replicas[i].Cfg.HTTPAddr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.Secure(cl, nil, 60*time.Second)
	return cl
}

// AllClient returns a client that knows every replica and retries through
// elections.
func (c *Cluster) AllClient() *api.Client {
	c.t.Helper()
	var addrs []string
	for _, r := range c.Replicas {
		addrs = append(addrs, r.Cfg.HTTPAddr)
	}
	cl, err := api.NewClient(addrs...)
	if err != nil {
		c.t.Fatal(err)
	}
	cl.Retries = 40
	cl.RetryWait = 250 * time.Millisecond
	c.Secure(cl, nil, 60*time.Second)
	return cl
}

// WaitForLeader waits until every running replica knows the same
// established leader, and returns its index.
func (c *Cluster) WaitForLeader() int {
	c.t.Helper()
	var last string
	ok := Eventually(30*time.Second, func() bool {
		leader := -1
		for i, r := range c.Replicas {
			if r.Server != nil && r.Server.IsLeader() {
				leader = i
			}
		}
		if leader < 0 {
			last = "no established leader"
			return false
		}
		want := c.Replicas[leader].Cfg.HTTPAddr
		for _, r := range c.Replicas {
			if r.Server == nil {
				continue
			}
			if got, ok := r.Server.LeaderHTTPAddress(); !ok || got != want {
				last = fmt.Sprintf("%s sees leader %q, want %q", r.Cfg.ID, got, want)
				return false
			}
		}
		return true
	})
	if !ok {
		c.t.Fatalf("cluster has no leader: %s", last)
	}
	for i, r := range c.Replicas {
		if r.Server != nil && r.Server.IsLeader() {
			return i
		}
	}
	c.t.Fatal("leader vanished")
	return -1
}

// Follower returns the index of some running non-leader replica.
func (c *Cluster) Follower() int {
	c.t.Helper()
	leader := c.WaitForLeader()
	for i, r := range c.Replicas {
		if i != leader && r.Server != nil {
			return i
		}
	}
	c.t.Fatal("no running follower")
	return -1
}

// WaitApplied waits until every running replica has applied index. It
// gives up when no lagging replica has applied anything for 30 s (or
// after 3 minutes in all): a replica replaying a backlog under the race
// detector, with invariants checked and the state hashed after every
// entry, can take longer than 30 s and still be moving.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	const stall, limit = 30 * time.Second, 3 * time.Minute
	start, lastMove := time.Now(), time.Now()
	var lastProgress uint64
	for {
		// progress moves only when a lagging replica applies an entry.
		done, progress := true, uint64(0)
		for _, r := range c.Replicas {
			if srv := c.serverOf(r); srv != nil {
				applied := min(srv.FSM().Index(), index)
				progress += applied
				done = done && applied == index
			}
		}
		if done {
			return
		}
		if progress != lastProgress {
			lastProgress, lastMove = progress, time.Now()
		}
		if time.Since(lastMove) > stall || time.Since(start) > limit {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lag []string
	for _, r := range c.Replicas {
		if srv := c.serverOf(r); srv != nil {
			st := srv.RaftStats()
			lag = append(lag, fmt.Sprintf("%s: applied %d, raft %s, last log %s, commit %s, last contact %s",
				r.Cfg.ID, srv.FSM().Index(), st["state"], st["last_log_index"], st["commit_index"], st["last_contact"]))
		}
	}
	c.t.Fatalf("replicas did not apply index %d in time (waited %s):\n%s", index, time.Since(start).Round(time.Second), strings.Join(lag, "\n"))
}

// serverOf is r's running server or nil, read under the cluster's lock.
func (c *Cluster) serverOf(r *Replica) *cluster.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.Server
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctx returns a context that ends with the test or after d.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FakeClock is a settable clock for the timestamps leaders write.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock starts at t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{now: t} }

// Now reads the clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
