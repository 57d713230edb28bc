package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/api"
	"herd/test/localcluster"
)

// startDev starts the dev cluster's three replicas on free loopback
// ports, with their data under dir, and waits for a leader.
func startDev(dir string, logger hclog.Logger) (*localcluster.Cluster, error) {
	c, err := localcluster.StartLoopback(dir, "dev", 3, localcluster.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("dev cluster: %w", err)
	}
	return c, nil
}

// startDevAgents starts two agents of different sizes and labels, each
// talking to the replicas in a different order.
func startDevAgents(c *localcluster.Cluster, dir string) error {
	addrs := c.HTTPAddrs()
	specs := []agent.Config{
		{ID: "edge-small", Labels: map[string]string{"zone": "a", "disk": "hdd"}, Resources: api.Resources{CPUMillis: 2000, MemoryMB: 2048}, Slots: 2,
			Servers: addrs},
		{ID: "edge-big", Labels: map[string]string{"zone": "b", "disk": "ssd"}, Resources: api.Resources{CPUMillis: 4000, MemoryMB: 4096}, Slots: 4,
			Servers: []string{addrs[2], addrs[1], addrs[0]}},
	}
	for _, cfg := range specs {
		cfg.DataDir = filepath.Join(dir, cfg.ID)
		if _, err := c.StartAgent(cfg); err != nil {
			return err
		}
	}
	return nil
}

// printDevBanner tells what runs where and what to try next.
func printDevBanner(w io.Writer, c *localcluster.Cluster, dir string) {
	fmt.Fprintln(w, "herd dev cluster is up: 3 replicas and 2 agents, data in", dir)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", "ID", "HTTP", "RAFT", "GOSSIP")
	for _, s := range c.Servers() {
		fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", s.ID(), s.HTTPAddr(), s.RaftAddr(), s.Config().GossipAdvertise)
	}
	fmt.Fprintln(w)
	for _, a := range c.Agents() {
		c := a.Config()
		fmt.Fprintf(w, "  agent %-10s cpu %dm, memory %d MB, %d slots, labels %s, limits %s\n",
			c.ID, c.Resources.CPUMillis, c.Resources.MemoryMB, c.Slots, joinMap(c.Labels), a.LimitMethod())
	}
	addr := "http://" + c.Config(0).HTTPAddr
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Dashboard: %s/ui/\n\n", addr)
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
