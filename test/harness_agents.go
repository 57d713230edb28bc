package test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"herd/agent"
	"herd/internal/pki"
)

// AgentHandle is an agent running in this test process.
type AgentHandle struct {
	Agent     *agent.Agent
	Transport *CutTransport
	cancel    context.CancelFunc
	done      chan struct{}
}

// Stop stops the agent and waits for it.
func (h *AgentHandle) Stop() {
	h.cancel()
	<-h.done
}

// StartAgent runs an agent against the given replicas (in that order of
// preference), with fast heartbeats; every request goes through a
// transport the test can cut.
func (c *Cluster) StartAgent(cfg agent.Config, replicas ...int) *AgentHandle {
	c.t.Helper()
	if len(replicas) == 0 {
		for i := range c.Replicas {
			replicas = append(replicas, i)
		}
	}
	for _, i := range replicas {
		cfg.Servers = append(cfg.Servers, c.Replicas[i].Cfg.HTTPAddr)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = c.t.TempDir()
	}
	if cfg.HeartbeatInterval == 0 {
		// With gossip, the servers' interval: they judge misses by it.
		cfg.HeartbeatInterval = 300 * time.Millisecond
		if c.setup.Gossip {
			cfg.HeartbeatInterval = c.Replicas[0].Cfg.Liveness.HeartbeatInterval
		}
	}
	if cfg.AssignmentWait == 0 {
		cfg.AssignmentWait = 5 * time.Second
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = time.Second
	}
	if !c.setup.Bench {
		// Half a second of benchmark per agent start is not what these
		// tests are about (the real-process tests measure their nodes).
		cfg.NoBench = true
	}
	cut := NewCutTransport()
	if n := c.setup.Network; n != nil {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.DialContext = n.Dialer(cfg.ID)
		cut.base = base
		if c.setup.Gossip {
			if cfg.GossipAddr == "" {
				cfg.GossipAddr = FreeAddr(c.t)
			}
			n.Own(cfg.GossipAddr, cfg.ID)
			cfg.GossipTransport = n.GossipTransport(cfg.ID, uint64(len(cfg.ID))*104729)
		}
	}
	if c.sec != nil && !cfg.TLS.Enabled() {
		cfg.TLS = c.agentFiles(cfg.ID)
	}
	if cfg.TLS.Enabled() {
		// The agent's own TLS dialer is bypassed by the cut transport:
		// give the cut transport one that presents the agent's
		// certificate and checks the servers' role.
		m, err := pki.Load(cfg.TLS)
		if err != nil {
			c.t.Fatalf("agent %s TLS: %v", cfg.ID, err)
		}
		base := cut.base.(*http.Transport)
		dial := base.DialContext // the fault network's, when the test has one
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		base.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return pki.Dial(ctx, dial, addr, m.ClientConfig(pki.RoleServer))
		}
		for i := range cfg.Servers {
			cfg.Servers[i] = "https://" + cfg.Servers[i]
		}
	}
	cfg.Transport = cut
	if c.setup.Gossip {
		cfg.GossipTune = FastGossip
	}
	cfg.Logger = c.logger
	ag, err := agent.New(cfg)
	if err != nil {
		c.t.Fatalf("agent %s: %v", cfg.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &AgentHandle{Agent: ag, Transport: cut, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		_ = ag.Run(ctx)
	}()
	c.t.Cleanup(h.Stop)
	return h
}

// WaitRegistered waits until every agent has a committed session: the
// leader then schedules onto it. Tests that expect a task on a particular
// agent call it first, or the task may go to whichever agent registered
// first.
func WaitRegistered(t testing.TB, agents ...*AgentHandle) {
	t.Helper()
	if !Eventually(30*time.Second, func() bool {
		for _, h := range agents {
			if h.Agent.Session() == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("agents did not register within 30 s")
	}
}

// CutTransport is an HTTP transport a test can cut: while cut, requests
// fail and requests in flight are aborted, as in a network partition.
type CutTransport struct {
	base     http.RoundTripper
	mu       sync.Mutex
	cut      bool
	inflight map[int]context.CancelFunc
	next     int
}

// NewCutTransport returns a transport that works until Cut.
func NewCutTransport() *CutTransport {
	return &CutTransport{base: http.DefaultTransport.(*http.Transport).Clone(), inflight: map[int]context.CancelFunc{}}
}

// RoundTrip implements http.RoundTripper.
func (t *CutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.cut {
		t.mu.Unlock()
		return nil, errors.New("test partition: link cut")
	}
	ctx, cancel := context.WithCancel(req.Context())
	id := t.next
	t.next++
	t.inflight[id] = cancel
	t.mu.Unlock()
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.forget(id)
		cancel()
		return nil, err
	}
	resp.Body = &trackedBody{ReadCloser: resp.Body, done: func() { t.forget(id); cancel() }}
	return resp, nil
}

func (t *CutTransport) forget(id int) {
	t.mu.Lock()
	delete(t.inflight, id)
	t.mu.Unlock()
}

// Cut starts the partition.
func (t *CutTransport) Cut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cut = true
	for id, cancel := range t.inflight {
		cancel()
		delete(t.inflight, id)
	}
}

// Heal ends the partition.
func (t *CutTransport) Heal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cut = false
}

type trackedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// ProcessesWith returns the pids whose command line contains marker.
func ProcessesWith(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			out = append(out, pid)
		}
	}
	return out
}
