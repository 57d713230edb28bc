package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/api"
	"herd/cluster"
	"herd/config"
)

// devCluster is three replicas and two agents in one process, for trying
// herd out.
type devCluster struct {
	servers []*cluster.Server
	agents  []*agent.Agent
	stop    context.CancelFunc
	agentWG sync.WaitGroup
}

func startDevCluster(dir string, logger hclog.Logger) (*devCluster, error) {
	const n = 3
	type listeners struct {
		http, raft net.Listener
		gossip     string
	}
	var (
		ls   []listeners
		join []string
	)
	closeAll := func() {
		for _, l := range ls {
			l.http.Close()
			l.raft.Close()
		}
	}
	for i := 0; i < n; i++ {
		h, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("listen: %w", err)
		}
		r, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.Close()
			closeAll()
			return nil, fmt.Errorf("listen: %w", err)
		}
		g, err := freeGossipAddr()
		if err != nil {
			h.Close()
			r.Close()
			closeAll()
			return nil, err
		}
		ls = append(ls, listeners{h, r, g})
		join = append(join, h.Addr().String())
	}
	d := &devCluster{}
	for i, l := range ls {
		cfg := config.DefaultServer()
		cfg.ID = fmt.Sprintf("dev%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		cfg.HTTPAddr = l.http.Addr().String()
		cfg.RaftAddr = l.raft.Addr().String()
		cfg.BootstrapExpect = n
		cfg.Join = join
		cfg.GossipAddr = l.gossip
		srv, err := cluster.Start(cfg, cluster.Options{Logger: logger, HTTPListener: l.http, RaftListener: l.raft})
		if err != nil {
			for _, rest := range ls[i+1:] {
				rest.http.Close()
				rest.raft.Close()
			}
			d.shutdown()
			return nil, fmt.Errorf("start %s: %w", cfg.ID, err)
		}
		d.servers = append(d.servers, srv)
	}
	return d, nil
}

func (d *devCluster) waitForLeader(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, s := range d.servers {
		if err := s.WaitForLeader(ctx); err != nil {
			return fmt.Errorf("dev cluster did not elect a leader: %w", err)
		}
	}
	return nil
}

// startAgents starts two agents of different sizes and labels, each
// talking to the replicas in a different order.
func (d *devCluster) startAgents(dir string, logger hclog.Logger) error {
	var addrs []string
	for _, s := range d.servers {
		addrs = append(addrs, s.HTTPAddr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	specs := []agent.Config{
		{ID: "edge-small", Labels: map[string]string{"zone": "a", "disk": "hdd"}, Resources: api.Resources{CPUMillis: 2000, MemoryMB: 2048}, Slots: 2,
			Servers: addrs},
		{ID: "edge-big", Labels: map[string]string{"zone": "b", "disk": "ssd"}, Resources: api.Resources{CPUMillis: 4000, MemoryMB: 4096}, Slots: 4,
			Servers: []string{addrs[2], addrs[1], addrs[0]}},
	}
	for _, cfg := range specs {
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		cfg.Logger = logger
		ag, err := agent.New(cfg)
		if err != nil {
			return fmt.Errorf("agent %s: %w", cfg.ID, err)
		}
		d.agents = append(d.agents, ag)
		d.agentWG.Add(1)
		go func() {
			defer d.agentWG.Done()
			if err := ag.Run(ctx); err != nil && ctx.Err() == nil {
				logger.Error("agent stopped", "node", cfg.ID, "error", err)
			}
		}()
	}
	return nil
}

func (d *devCluster) shutdown() {
	if d.stop != nil {
		d.stop()
		d.agentWG.Wait()
	}
	var errs []error
	for _, s := range d.servers {
		errs = append(errs, s.Shutdown())
	}
	_ = errors.Join(errs...)
}

func (d *devCluster) printBanner(w io.Writer, dir string) {
	fmt.Fprintln(w, "herd dev cluster is up: 3 replicas and 2 agents, data in", dir)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", "ID", "HTTP", "RAFT", "GOSSIP")
	for _, s := range d.servers {
		fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", s.ID(), s.HTTPAddr(), s.RaftAddr(), s.Config().GossipAdvertise)
	}
	fmt.Fprintln(w)
	for _, a := range d.agents {
		c := a.Config()
		fmt.Fprintf(w, "  agent %-10s cpu %dm, memory %d MB, %d slots, labels %s, limits %s\n",
			c.ID, c.Resources.CPUMillis, c.Resources.MemoryMB, c.Slots, joinMap(c.Labels), a.LimitMethod())
	}
	addr := "http://" + d.servers[0].HTTPAddr()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Next, in another terminal:")
	fmt.Fprintf(w, "  export HERD_ADDR=%s\n", addr)
	fmt.Fprintln(w, "  go run ./cmd/herd operator raft list-peers")
	fmt.Fprintln(w, "  go run ./cmd/herd task submit -name hello -prefer disk=ssd -cpu 500 -memory 64 -- sh -c 'echo hello from $HERD_NODE_ID'")
	fmt.Fprintln(w, "  go run ./cmd/herd task list")
	fmt.Fprintln(w, "  go run ./cmd/herd task status ID        # attempts, output tail and timeline")
	fmt.Fprintln(w, "  go run ./cmd/herd node list")
	fmt.Fprintf(w, "  curl -s %s/v1/status/leader\n", addr)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}

// freeGossipAddr finds a loopback port free for both TCP and UDP (memberlist
// uses both on one port).
func freeGossipAddr() (string, error) {
	for i := 0; i < 50; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("find a gossip port: %w", err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no loopback port free for TCP and UDP")
}
