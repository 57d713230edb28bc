package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/api"
	"herd/config"
)

func runAgent(e *env, args []string) error {
	fs := newFlags(e, "agent", "", "Run an edge agent: register through any of -servers, run assigned attempts\nunder resource limits, report results. Resources default to the machine's.")
	id := fs.String("id", "", "node id, unique in the cluster (HERD_NODE_ID)")
	servers := fs.String("servers", "", "comma-separated HTTP addresses of the servers (HERD_SERVERS)")
	dataDir := fs.String("data-dir", "", "directory for logs and working directories (HERD_DATA_DIR)")
	labels := kvFlag{}
	fs.Var(labels, "labels", "node labels k=v,k=v")
	caps := fs.String("capabilities", "exec@1", "comma-separated name@version list")
	cpu := fs.Int64("cpu-millis", 0, "CPU to offer in millicores (default: all CPUs)")
	mem := fs.Int64("memory-mb", 0, "memory to offer in MB (default: the machine's)")
	gpu := fs.Int64("gpu", 0, "GPU units to offer")
	disk := fs.Int64("disk-mb", 0, "disk to offer in MB (default: free space under -data-dir)")
	slots := fs.Int("slots", 0, "attempts that may run at once (default: one per CPU)")
	weight := fs.Int("weight", 0, "scheduling weight (default 100)")
	limits := fs.String("limits", "auto", "how to enforce limits: auto, cgroup-v2, cgroup-v1, rlimit or none")
	retention := fs.Duration("log-retention", agent.DefaultLogRetention, "how long attempt logs and working directories are kept")
	heartbeat := fs.Duration("heartbeat-interval", agent.DefaultHeartbeatInterval, "how often the agent heartbeats")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	gossipAddr := fs.String("gossip-addr", "", "gossip address (default: the local address towards the servers, a free port kept across restarts)")
	gossipKey := fs.String("gossip-key", "", "base64 gossip key, when the cluster encrypts gossip (HERD_GOSSIP_KEY)")
	hibernate := fs.Duration("hibernate-after", 0, "sleep after this long idle, keeping only gossip, until the leader wakes the agent (0: never)")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("agent takes no arguments")
	}
	if *id == "" {
		*id, _ = e.getenv("HERD_NODE_ID")
	}
	if *servers == "" {
		*servers, _ = e.getenv("HERD_SERVERS")
	}
	if *dataDir == "" {
		*dataDir, _ = e.getenv("HERD_DATA_DIR")
	}
	capMap, err := parseCapabilities(*caps)
	if err != nil {
		return err
	}
	if *gossipKey == "" {
		*gossipKey, _ = e.getenv("HERD_GOSSIP_KEY")
	}
	var key []byte
	if *gossipKey != "" {
		if key, err = config.DecodeGossipKey(*gossipKey); err != nil {
			return usagef("-gossip-key: %v", err)
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(*logLevel), Output: e.stderr})
	ag, err := agent.New(agent.Config{
		ID: *id, Servers: config.SplitList(*servers), DataDir: *dataDir, Labels: labels, Capabilities: capMap,
		Resources: api.Resources{CPUMillis: *cpu, MemoryMB: *mem, GPU: *gpu, DiskMB: *disk},
		Slots:     *slots, Weight: *weight, Limits: *limits, LogRetention: *retention,
		HeartbeatInterval: *heartbeat, Logger: logger,
		GossipAddr: *gossipAddr, GossipKey: key, HibernateAfter: *hibernate,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs, stop := e.signals()
	defer stop()
	go func() {
		sig := <-sigs
		logger.Info("signal received, stopping", "signal", sig.String())
		cancel()
	}()
	if err := ag.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}
