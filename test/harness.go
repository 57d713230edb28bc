package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/cluster"
	"herd/config"
	"herd/fsm"
)

// Replica is one server of a test cluster; it keeps its addresses and data
// directory across restarts.
type Replica struct {
	Cfg    config.Server
	Server *cluster.Server // nil while stopped
}

// Cluster is a set of replicas running in this process.
type Cluster struct {
	t        testing.TB
	Replicas []*Replica
	logger   hclog.Logger
	setup    Setup
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

// FreeAddr returns a loopback address with a port that was free just now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
	// Clock replaces the clock whose readings the leader writes into
	// commands (raft keeps its own timers).
	Clock func() time.Time
	// CheckInvariants checks fsm invariants after every applied entry on
	// every replica; violations fail the test.
	CheckInvariants bool
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
	base := t.TempDir()
	var join []string
	for i := 0; i < n; i++ {
		cfg := config.DefaultServer()
		cfg.ID = fmt.Sprintf("s%d", i+1)
		cfg.DataDir = filepath.Join(base, cfg.ID)
		cfg.HTTPAddr = FreeAddr(t)
		cfg.RaftAddr = FreeAddr(t)
		cfg.LogLevel = "error"
		if n == 1 {
			cfg.Bootstrap = true
		} else {
			cfg.BootstrapExpect = n
		}
		FastRaft(&cfg)
		for _, o := range opts {
			o(&cfg)
		}
		join = append(join, cfg.HTTPAddr)
		c.Replicas = append(c.Replicas, &Replica{Cfg: cfg})
	}
	for _, r := range c.Replicas {
		if n > 1 {
			r.Cfg.Join = join
		}
	}
	for i := range c.Replicas {
		c.Start(i)
	}
	t.Cleanup(c.StopAll)
	c.WaitForLeader()
	return c
}

// Start (re)starts replica i from its data directory.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	r := c.Replicas[i]
	if r.Server != nil {
		c.t.Fatalf("replica %s already running", r.Cfg.ID)
	}
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		opts := cluster.Options{Logger: c.logger, Now: c.setup.Clock}
		if c.setup.CheckInvariants {
			id := r.Cfg.ID
			opts.AfterApply = func(index uint64, st *fsm.State) {
				if err := st.CheckInvariants(); err != nil {
					c.t.Errorf("%s: invariant broken at index %d: %v", id, index, err)
				}
			}
		}
		r.Server, err = cluster.Start(r.Cfg, opts)
		// Right after a stop the old port can be briefly unavailable.
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("start %s: %v", r.Cfg.ID, err)
	}
}

// Stop shuts replica i down, keeping its data directory.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	r := c.Replicas[i]
	if r.Server == nil {
		return
	}
	if err := r.Server.Shutdown(); err != nil {
		c.t.Errorf("stop %s: %v", r.Cfg.ID, err)
	}
	r.Server = nil
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

// WaitApplied waits until every running replica has applied index.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	if !Eventually(30*time.Second, func() bool {
		for _, r := range c.Replicas {
			if r.Server != nil && r.Server.FSM().Index() < index {
				return false
			}
		}
		return true
	}) {
		c.t.Fatalf("replicas did not apply index %d in time", index)
	}
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

func apiQueryAll() api.TaskQuery  { return api.TaskQuery{Limit: api.MaxListLimit} }
func consistent() api.ReadOptions { return api.ReadOptions{Consistent: true} }

func bytesReader(s string) *strings.Reader { return strings.NewReader(s) }

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
