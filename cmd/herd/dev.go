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

// devMachine is a kind of machine herd dev's agents pretend to be: the
// profile each reports instead of measuring this computer, so that the
// cluster's judgement of junk and good hardware (tiers, profile scores)
// shows on one laptop.
type devMachine struct {
	kind      string
	labels    map[string]string
	resources api.Resources
	slots     int
	profile   api.NodeProfile
}

var devMachines = []devMachine{
	{"mini-pc", map[string]string{"zone": "a", "disk": "ssd"}, api.Resources{CPUMillis: 4000, MemoryMB: 8192}, 4,
		api.NodeProfile{CPUScore: 620, MemoryMBps: 9500, FsyncMicros: 800, Cores: 4, MemoryMB: 8192, DiskFreeMB: 200_000, Benchmarked: true, Rounds: 1}},
	{"atom", map[string]string{"zone": "b", "disk": "hdd"}, api.Resources{CPUMillis: 2000, MemoryMB: 4096}, 2,
		api.NodeProfile{CPUScore: 110, MemoryMBps: 2400, FsyncMicros: 9000, Cores: 2, MemoryMB: 4096, DiskFreeMB: 40_000, Benchmarked: true, Rounds: 1}},
	{"raspberry-pi", map[string]string{"zone": "a", "disk": "sd"}, api.Resources{CPUMillis: 4000, MemoryMB: 2048}, 2,
		api.NodeProfile{CPUScore: 85, MemoryMBps: 1700, FsyncMicros: 15000, Cores: 4, MemoryMB: 2048, DiskFreeMB: 20_000, Benchmarked: true, Rounds: 1}},
	{"old-laptop", map[string]string{"zone": "b", "disk": "ssd"}, api.Resources{CPUMillis: 2000, MemoryMB: 8192}, 2,
		api.NodeProfile{CPUScore: 300, MemoryMBps: 5200, FsyncMicros: 2500, Cores: 2, MemoryMB: 8192, DiskFreeMB: 60_000, Benchmarked: true, Rounds: 1}},
	{"workstation", map[string]string{"zone": "a", "disk": "nvme", "accelerator": "gpu"}, api.Resources{CPUMillis: 8000, MemoryMB: 16384, GPU: 1}, 8,
		api.NodeProfile{CPUScore: 1300, MemoryMBps: 18000, FsyncMicros: 300, Cores: 8, MemoryMB: 16384, DiskFreeMB: 500_000, Benchmarked: true, Rounds: 1}},
}

// startDevAgents starts n agents, each pretending to be the next kind of
// machine in devMachines (round robin) and talking to the replicas in
// its own order.
func startDevAgents(c *localcluster.Cluster, dir string, n int) error {
	addrs := c.HTTPAddrs()
	for i := range n {
		m := devMachines[i%len(devMachines)]
		profile := m.profile
		servers := append(append([]string(nil), addrs[i%len(addrs):]...), addrs[:i%len(addrs)]...)
		cfg := agent.Config{
			ID: fmt.Sprintf("%s-%d", m.kind, i+1), Labels: m.labels, Resources: m.resources, Slots: m.slots,
			Servers: servers, Profile: &profile, DataDir: filepath.Join(dir, fmt.Sprintf("agent-%d", i+1)),
		}
		if _, err := c.StartAgent(cfg); err != nil {
			return err
		}
	}
	return nil
}

// printDevBanner tells what runs where and what to try next.
func printDevBanner(w io.Writer, c *localcluster.Cluster, dir string) {
	fmt.Fprintf(w, "herd dev cluster is up: 3 replicas and %d agents, data in %s\n", len(c.Agents()), dir)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", "ID", "HTTP", "RAFT", "GOSSIP")
	for _, s := range c.Servers() {
		fmt.Fprintf(w, "  %-6s %-22s %-22s %-22s\n", s.ID(), s.HTTPAddr(), s.RaftAddr(), s.Config().GossipAdvertise)
	}
	fmt.Fprintln(w)
	for _, a := range c.Agents() {
		c := a.Config()
		fmt.Fprintf(w, "  agent %-14s cpu %dm, memory %d MB, %d slots, labels %s, limits %s", c.ID, c.Resources.CPUMillis, c.Resources.MemoryMB, c.Slots, joinMap(c.Labels), a.LimitMethod())
		if p := c.Profile; p != nil {
			fmt.Fprintf(w, "; pretends to be a machine of cpu score %d, memory %d MB/s, fsync %d µs", p.CPUScore, p.MemoryMBps, p.FsyncMicros)
		}
		fmt.Fprintln(w)
	}
	addr := "http://" + c.Config(0).HTTPAddr
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Dashboard: %s/ui/\n\n", addr)
	fmt.Fprintln(w, "Next, in another terminal:")
	fmt.Fprintf(w, "  export HERD_ADDR=%s\n", addr)
	fmt.Fprintln(w, "  go run ./cmd/herd operator raft list-peers")
	fmt.Fprintln(w, "  go run ./cmd/herd task run -name hello -prefer disk=ssd -cpu 500 -memory 64 sh -c 'echo hello from $HERD_NODE_ID'")
	fmt.Fprintln(w, "  go run ./cmd/herd node list                 # tiers and health: the cluster's judgement of each machine")
	fmt.Fprintln(w, "  go run ./cmd/herd explain -size large -cpu 1000   # which machines a large task may use, and why not the others")
	fmt.Fprintln(w, "  go run ./cmd/herd task list")
	fmt.Fprintln(w, "  go run ./cmd/herd task status ID        # attempts, output tail and timeline")
	fmt.Fprintf(w, "  curl -s %s/v1/status/leader\n", addr)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Press Ctrl-C to stop.")
}
