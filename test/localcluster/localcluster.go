// Package localcluster starts herd replicas and agents inside one process,
// on loopback: `herd dev`, the benchmark and the tests all start theirs
// here, so a replica is configured, started, restarted and stopped one way.
//
// A Cluster is safe for concurrent use: one goroutine may restart a
// replica while others read Server.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/cluster"
	"herd/config"
)

// Configs returns the configurations of n replicas that form one cluster
// the way operators form one: ids prefix1…prefixN, data directories under
// dir, fresh loopback addresses (see FreeAddr), bootstrap_expect n and the
// HTTP addresses of all to join; a single replica bootstraps itself. With
// gossip, each also gets a gossip address.
func Configs(dir, prefix string, n int, gossip bool) ([]config.Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("a cluster needs at least one replica, not %d", n)
	}
	cfgs := make([]config.Server, n)
	var join []string
	for i := range cfgs {
		cfg := config.DefaultServer()
		cfg.ID = fmt.Sprintf("%s%d", prefix, i+1)
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		addrs := make([]string, 2, 3)
		if gossip {
			addrs = addrs[:3]
		}
		for j := range addrs {
			a, err := FreeAddr()
			if err != nil {
				return nil, err
			}
			addrs[j] = a
		}
		cfg.HTTPAddr, cfg.RaftAddr = addrs[0], addrs[1]
		if gossip {
			cfg.GossipAddr = addrs[2]
		}
		if n == 1 {
			cfg.Bootstrap = true
		} else {
			cfg.BootstrapExpect = n
		}
		join = append(join, cfg.HTTPAddr)
		cfgs[i] = cfg
	}
	if n > 1 {
		for i := range cfgs {
			cfgs[i].Join = join
		}
	}
	return cfgs, nil
}

// Options adjust how a Cluster starts its replicas.
type Options struct {
	// Logger is given to every replica and agent; nil discards.
	Logger hclog.Logger
	// Server, when set, adjusts a replica's start options each time it
	// starts (listeners, dialer, clock, apply hooks). An error from it (a
	// listener that cannot be bound yet) counts as a failed start and is
	// retried like one; listeners it set are closed after a failed start.
	Server func(cfg config.Server, o *cluster.Options) error
	// PKIDir, for StartLoopback, secures the replicas: a CA made there,
	// a server certificate each, TLS and ACLs on (see Secure).
	PKIDir string
	// Configure, for StartLoopback, adjusts each replica's configuration.
	Configure func(*config.Server)
	// StartTimeout bounds the retries of one replica's start (a restarted
	// replica's old ports can be briefly unavailable); 10 s when zero.
	StartTimeout time.Duration
}

// Cluster is a set of replicas, and the agents started beside them, in
// this process.
type Cluster struct {
	opts Options

	mu      sync.Mutex
	configs []config.Server
	servers []*cluster.Server // nil while stopped

	agentCtx    context.Context
	stopAgents  context.CancelFunc
	agentWG     sync.WaitGroup
	agentsMu    sync.Mutex
	agents      []*agent.Agent
	agentErrors []error
}

// New prepares a cluster of these replicas without starting any.
func New(cfgs []config.Server, opts Options) *Cluster {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cluster{opts: opts, configs: cfgs, servers: make([]*cluster.Server, len(cfgs)), agentCtx: ctx, stopAgents: cancel}
}

// Start starts every replica of cfgs; on an error the ones started are
// shut down again.
func Start(cfgs []config.Server, opts Options) (*Cluster, error) {
	c := New(cfgs, opts)
	for i := range cfgs {
		if err := c.StartReplica(i); err != nil {
			_ = c.Shutdown()
			return nil, err
		}
	}
	return c, nil
}

// StartLoopback starts n replicas named prefix1…prefixN with their data
// under dir, formed as Configs forms them (with gossip), and waits up to
// 30 s for a leader; on an error nothing is left running.
func StartLoopback(dir, prefix string, n int, opts Options) (*Cluster, error) {
	cfgs, err := Configs(dir, prefix, n, true)
	if err != nil {
		return nil, err
	}
	if opts.Configure != nil {
		for i := range cfgs {
			opts.Configure(&cfgs[i])
		}
	}
	if opts.PKIDir != "" {
		if err := Secure(opts.PKIDir, cfgs); err != nil {
			return nil, err
		}
	}
	c, err := Start(cfgs, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitForLeader(ctx); err != nil {
		_ = c.Shutdown()
		return nil, err
	}
	return c, nil
}

// Len is the number of replicas, running or not.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.configs)
}

// Add adds a replica, not yet started, and returns its index.
func (c *Cluster) Add(cfg config.Server) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.configs = append(c.configs, cfg)
	c.servers = append(c.servers, nil)
	return len(c.configs) - 1
}

// SetConfig replaces replica i's configuration; it takes effect at the
// replica's next start.
func (c *Cluster) SetConfig(i int, cfg config.Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.configs[i] = cfg
}

// Config returns replica i's configuration.
func (c *Cluster) Config(i int) config.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.configs[i]
}

// Server returns replica i's running server, or nil while it is stopped.
func (c *Cluster) Server(i int) *cluster.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Servers returns the running servers, in replica order.
func (c *Cluster) Servers() []*cluster.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cluster.Server
	for _, s := range c.servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// HTTPAddrs returns every replica's HTTP address, in replica order.
func (c *Cluster) HTTPAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.configs))
	for i, cfg := range c.configs {
		out[i] = cfg.HTTPAddr
	}
	return out
}

// StartReplica (re)starts replica i from its data directory, retrying for
// up to Options.StartTimeout while the start fails.
func (c *Cluster) StartReplica(i int) error {
	cfg := c.Config(i)
	if c.Server(i) != nil {
		return fmt.Errorf("replica %s is already running", cfg.ID)
	}
	deadline := time.Now().Add(c.opts.StartTimeout)
	for {
		srv, err := c.startOnce(cfg)
		if err == nil {
			c.mu.Lock()
			c.servers[i] = srv
			c.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start %s: %w", cfg.ID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) startOnce(cfg config.Server) (*cluster.Server, error) {
	o := cluster.Options{Logger: c.opts.Logger}
	closeListeners := func() {
		if o.HTTPListener != nil {
			o.HTTPListener.Close()
		}
		if o.RaftListener != nil {
			o.RaftListener.Close()
		}
	}
	if c.opts.Server != nil {
		if err := c.opts.Server(cfg, &o); err != nil {
			closeListeners()
			return nil, err
		}
	}
	srv, err := cluster.Start(cfg, o)
	if err != nil {
		closeListeners()
		return nil, err
	}
	return srv, nil
}

// StopReplica shuts replica i down, keeping its data directory; a stopped
// replica's stop does nothing.
func (c *Cluster) StopReplica(i int) error {
	return c.takeReplica(i, (*cluster.Server).Shutdown)
}

// HaltReplica stops replica i as a crash would look to its peers (no
// leadership handover; see cluster.Server.Halt).
func (c *Cluster) HaltReplica(i int) error {
	return c.takeReplica(i, (*cluster.Server).Halt)
}

// takeReplica removes replica i from the running ones and stops it with
// stop (nothing when it is not running).
func (c *Cluster) takeReplica(i int, stop func(*cluster.Server) error) error {
	c.mu.Lock()
	srv := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if srv == nil {
		return nil
	}
	return stop(srv)
}

// WaitForLeader waits until every running replica knows a leader.
func (c *Cluster) WaitForLeader(ctx context.Context) error {
	for _, s := range c.Servers() {
		if err := s.WaitForLeader(ctx); err != nil {
			return fmt.Errorf("no leader elected: %w", err)
		}
	}
	return nil
}

// Leader returns the running replica that leads, waiting for one until
// ctx ends.
func (c *Cluster) Leader(ctx context.Context) (*cluster.Server, error) {
	for {
		for _, s := range c.Servers() {
			if s.IsLeader() {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no replica leads: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// StartAgent starts an agent with this configuration (its logger defaults
// to the cluster's) that runs until Shutdown.
func (c *Cluster) StartAgent(cfg agent.Config) (*agent.Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = c.opts.Logger
	}
	ag, err := agent.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", cfg.ID, err)
	}
	c.agentsMu.Lock()
	c.agents = append(c.agents, ag)
	c.agentsMu.Unlock()
	c.agentWG.Add(1)
	go func() {
		defer c.agentWG.Done()
		if err := ag.Run(c.agentCtx); err != nil && c.agentCtx.Err() == nil {
			c.opts.Logger.Error("agent stopped", "node", cfg.ID, "error", err)
			c.agentsMu.Lock()
			c.agentErrors = append(c.agentErrors, fmt.Errorf("agent %s: %w", cfg.ID, err))
			c.agentsMu.Unlock()
		}
	}()
	return ag, nil
}

// Agents returns the agents started, in the order they were.
func (c *Cluster) Agents() []*agent.Agent {
	c.agentsMu.Lock()
	defer c.agentsMu.Unlock()
	return append([]*agent.Agent(nil), c.agents...)
}

// Shutdown stops the agents, then every replica, and returns what failed
// (an agent that stopped early with an error included).
func (c *Cluster) Shutdown() error {
	c.stopAgents()
	c.agentWG.Wait()
	c.agentsMu.Lock()
	errs := append([]error(nil), c.agentErrors...)
	c.agentsMu.Unlock()
	for i := range c.Len() {
		errs = append(errs, c.StopReplica(i))
	}
	return errors.Join(errs...)
}
