package main

import (
	"context"
	"fmt"
	"herd/internal/version"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/agent"
	"herd/api"
	"herd/config"
	"herd/internal/pki"
)

// agentSettings are the settings of `herd agent`, as given.
type agentSettings struct {
	ID, DataDir, Capabilities, Limits, LogLevel, GossipAddr, GossipKey string
	TLSCAFile, TLSCertFile, TLSKeyFile, Token, HealthCheck, DataAddr   string
	OCIRuntime, RegistryAuthFile                                       string
	InsecureRegistries                                                 []string
	ImageCacheMB                                                       int64
	Insecure, NoBench                                                  bool
	Servers                                                            []string
	Labels, Datasets                                                   map[string]string
	CPUMillis, MemoryMB, GPU, DiskMB, MinFreeDiskMB                    int64
	Slots, Weight, Procs                                               int
	LogRetention, HeartbeatInterval, HibernateAfter, RebenchInterval   time.Duration
}

type agentSetting = config.Setting[agentSettings]

// agentTable is every setting of an agent, declared once: defaults, then
// HERD_* variables, then flags.
var agentTable = config.Table[agentSettings]{
	Defaults: func() agentSettings {
		return agentSettings{Capabilities: "exec@1", Limits: "auto", LogLevel: "info",
			LogRetention: agent.DefaultLogRetention, HeartbeatInterval: agent.DefaultHeartbeatInterval, MinFreeDiskMB: agent.DefaultMinFreeDiskMB,
			RebenchInterval: agent.DefaultRebenchInterval, OCIRuntime: "auto", ImageCacheMB: agent.DefaultImageCacheMB, Procs: -1}
	},
	Settings: []agentSetting{
		config.Field("id", "HERD_NODE_ID", "id", "node id, unique in the cluster", func(c *agentSettings) *string { return &c.ID }),
		config.Field("servers", "HERD_SERVERS", "servers", "comma-separated HTTP addresses of the servers", func(c *agentSettings) *[]string { return &c.Servers }),
		config.Field("data_dir", "HERD_DATA_DIR", "data-dir", "directory for logs and working directories", func(c *agentSettings) *string { return &c.DataDir }),
		config.Field("labels", "", "labels", "node labels", func(c *agentSettings) *map[string]string { return &c.Labels }),
		config.Field("capabilities", "", "capabilities", "comma-separated name@version list", func(c *agentSettings) *string { return &c.Capabilities }),
		config.Field("cpu_millis", "", "cpu-millis", "CPU to offer in millicores, 0 for all CPUs", func(c *agentSettings) *int64 { return &c.CPUMillis }),
		config.Field("memory_mb", "", "memory-mb", "memory to offer in MB, 0 for the machine's", func(c *agentSettings) *int64 { return &c.MemoryMB }),
		config.Field("gpu", "", "gpu", "GPU units to offer", func(c *agentSettings) *int64 { return &c.GPU }),
		config.Field("disk_mb", "", "disk-mb", "disk to offer in MB, 0 for the free space under the data directory", func(c *agentSettings) *int64 { return &c.DiskMB }),
		config.Field("slots", "", "slots", "attempts that may run at once, 0 for one per CPU", func(c *agentSettings) *int { return &c.Slots }),
		config.Field("weight", "", "weight", "scheduling weight, 0 for 100", func(c *agentSettings) *int { return &c.Weight }),
		config.Field("procs", "", "procs", "how many threads run the agent's own Go code at once (GOMAXPROCS); 0 for one per CPU; -1: one, or $GOMAXPROCS when it is set", func(c *agentSettings) *int { return &c.Procs }),
		config.Field("limits", "HERD_LIMITS", "limits", "how to enforce limits: auto, cgroup-v2, cgroup-v1, rlimit or none", func(c *agentSettings) *string { return &c.Limits }),
		config.Field("log_retention", "", "log-retention", "how long attempt logs and working directories are kept", func(c *agentSettings) *time.Duration { return &c.LogRetention }),
		config.Field("min_free_disk_mb", "", "min-free-disk-mb", "free space the data directory keeps; below it the node reports disk_full and takes no new attempt", func(c *agentSettings) *int64 { return &c.MinFreeDiskMB }),
		config.Field("heartbeat_interval", "", "heartbeat-interval", "how often the agent heartbeats", func(c *agentSettings) *time.Duration { return &c.HeartbeatInterval }),
		config.Field("log_level", "", "log-level", "trace, debug, info, warn or error", func(c *agentSettings) *string { return &c.LogLevel }),
		config.Field("gossip_addr", "", "gossip-addr", "gossip address; empty for the local address towards the servers, on a free port kept across restarts", func(c *agentSettings) *string { return &c.GossipAddr }),
		config.Field("gossip_key", "HERD_GOSSIP_KEY", "gossip-key", "base64 gossip key, when the cluster encrypts gossip", func(c *agentSettings) *string { return &c.GossipKey }),
		config.Field("tls_ca_file", "HERD_TLS_CA_FILE", "tls-ca-file", "the cluster CA's certificate (PEM); with the next two, the servers are reached over mutual TLS", func(c *agentSettings) *string { return &c.TLSCAFile }),
		config.Field("tls_cert_file", "HERD_TLS_CERT_FILE", "tls-cert-file", "this node's agent certificate (herd tls cert create -agent -id NODE_ID); reloaded on SIGHUP", func(c *agentSettings) *string { return &c.TLSCertFile }),
		config.Field("tls_key_file", "HERD_TLS_KEY_FILE", "tls-key-file", "the certificate's private key; reloaded on SIGHUP", func(c *agentSettings) *string { return &c.TLSKeyFile }),
		config.Field("token", "HERD_TOKEN", "token", "the node's ACL token (herd acl token create -agent NODE_ID), when the cluster enforces ACLs", func(c *agentSettings) *string { return &c.Token }),
		config.Field("insecure", "HERD_INSECURE", "insecure", "talk to servers, or gossip, off loopback without TLS", func(c *agentSettings) *bool { return &c.Insecure }),
		config.Field("hibernate_after", "", "hibernate-after", "sleep after this long idle, keeping only gossip, until the leader wakes the agent; 0 never", func(c *agentSettings) *time.Duration { return &c.HibernateAfter }),
		config.Field("no_bench", "", "no-bench", "do not benchmark the node: its profile holds only the cores, memory and free disk detected", func(c *agentSettings) *bool { return &c.NoBench }),
		config.Field("profile.rebench_interval", "", "rebench-interval", "how often the node is measured again; negative: only at registration and on herd node rebench", func(c *agentSettings) *time.Duration { return &c.RebenchInterval }),
		config.Field("datasets", "", "dataset", "data the node holds, NAME=PATH (a file or directory; the flag repeats): tasks naming NAME among their inputs prefer this node", func(c *agentSettings) *map[string]string { return &c.Datasets }),
		config.Field("data_addr", "", "data-addr", "where the agent serves the outputs it keeps to other agents (a later stage's inputs); empty for the local address towards the servers, on a free port", func(c *agentSettings) *string { return &c.DataAddr }),
		config.Field("oci_runtime", "", "oci-runtime", "runtime of oci tasks (containers from images): auto (crun, then runc: the first that runs a probe container), crun, runc or none; a node with one advertises oci@1", func(c *agentSettings) *string { return &c.OCIRuntime }),
		config.Field("image_cache_mb", "", "image-cache-mb", "MB of unpacked images kept on the node; the least recently used go first", func(c *agentSettings) *int64 { return &c.ImageCacheMB }),
		config.Field("insecure_registries", "", "insecure-registries", "comma-separated registry hosts reached over plain HTTP (loopback ones always are)", func(c *agentSettings) *[]string { return &c.InsecureRegistries }),
		config.Field("registry_auth_file", "HERD_REGISTRY_AUTH_FILE", "registry-auth-file", "a Docker-style config.json whose \"auths\" give the credentials for the registries it names (read at each pull; credential helpers are not run); empty: anonymous pulls", func(c *agentSettings) *string { return &c.RegistryAuthFile }),
		config.Field("health_check", "", "health-check", "the site's health check, run through /bin/sh -c when the cluster asks (a quarantine); empty: the built-in check (data directory writable, sh found and run as tasks are, a container starts where the oci driver is, clock sane)", func(c *agentSettings) *string { return &c.HealthCheck }),
	},
}

func runAgent(e *env, args []string) error {
	fs := newFlags(e, "agent", "", "Run an edge agent: register through any of -servers, run assigned attempts\nunder resource limits, report results. Resources default to the machine's.")
	applyFlags := agentTable.BindFlags(fs)
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("agent takes no arguments")
	}
	set := agentTable.Defaults()
	if err := agentTable.ApplyEnv(&set, e.getenv); err != nil {
		return usagef("%v", err)
	}
	if err := applyFlags(&set); err != nil {
		return usagef("%v", err)
	}
	capMap, err := parseCapabilities(set.Capabilities)
	if err != nil {
		return err
	}
	var key []byte
	if set.GossipKey != "" {
		if key, err = config.DecodeGossipKey(set.GossipKey); err != nil {
			return usagef("-gossip-key: %v", err)
		}
	}
	if set.Procs < -1 {
		return usagef("-procs: %d is not a count of threads (0 for one per CPU, -1 for the default)", set.Procs)
	}
	if n := agentProcs(set.Procs, e.getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(set.LogLevel), Output: e.stderr})
	logger.Info("agent starting", "build", version.Get().String())
	guard, err := os.Executable()
	if err != nil {
		logger.Warn("cannot find the herd binary to run the lease guard: a stopped or killed agent leaves its attempts running", "error", err)
		guard = ""
	}
	ag, err := agent.New(agent.Config{
		GuardPath: guard,
		ID:        set.ID, Servers: set.Servers, DataDir: set.DataDir, Labels: set.Labels, Capabilities: capMap,
		Resources: api.Resources{CPUMillis: set.CPUMillis, MemoryMB: set.MemoryMB, GPU: set.GPU, DiskMB: set.DiskMB},
		Slots:     set.Slots, Weight: set.Weight, Limits: set.Limits, LogRetention: set.LogRetention, MinFreeDiskMB: set.MinFreeDiskMB,
		HeartbeatInterval: set.HeartbeatInterval, Logger: logger,
		GossipAddr: set.GossipAddr, GossipKey: key, HibernateAfter: set.HibernateAfter,
		TLS:   pki.Files{CA: set.TLSCAFile, Cert: set.TLSCertFile, Key: set.TLSKeyFile},
		Token: set.Token, Insecure: set.Insecure,
		NoBench: set.NoBench, RebenchInterval: set.RebenchInterval, Datasets: set.Datasets, HealthCheck: set.HealthCheck, DataAddr: set.DataAddr,
		OCIRuntime: set.OCIRuntime, ImageCacheMB: set.ImageCacheMB, InsecureRegistries: set.InsecureRegistries,
		RegistryAuthFile: set.RegistryAuthFile,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs, stop := e.signals()
	defer stop()
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				_ = ag.ReloadTLS()
				continue
			}
			logger.Info("signal received, stopping", "signal", sig.String())
			cancel()
			return
		}
	}()
	if set.Insecure {
		logger.Warn("running INSECURE: the agent may talk to servers off loopback without TLS")
	}
	if err := ag.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// agentProcs is the GOMAXPROCS an agent runs with for its procs setting
// (0: leave the runtime's). By default it is one: the agent's own work
// is launching processes, waiting for them and a few requests, little of
// it Go code, while the cores are its tasks'. With a processor for each
// core, the runtime of an agent whose tasks keep the cores busy spends
// CPU looking for work between its wake-ups, and takes that CPU from the
// tasks (BENCHMARKS.md has the measurement). $GOMAXPROCS, the runtime's
// own setting, is kept when set and procs is not.
func agentProcs(procs int, getenv func(string) (string, bool)) int {
	switch {
	case procs > 0:
		return procs
	case procs == 0:
		return runtime.NumCPU()
	}
	if _, set := getenv("GOMAXPROCS"); set {
		return 0
	}
	return 1
}

// agentGuardCommand is the hidden command an agent runs its lease guard
// as: the same binary, reading the agent's messages on its standard input.
const agentGuardCommand = "agent-guard"

// runAgentGuard is the lease guard beside an agent (agent.RunGuard). It
// ignores the signals that stop an agent: it goes when the agent says
// goodbye or its pipe closes, after stopping what the agent left. It
// asks the kernel's OOM killer to pick it last where it may.
func runAgentGuard(e *env, args []string) error {
	if len(args) != 0 {
		return usagef("%s takes no arguments; the agent starts it", agentGuardCommand)
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-900"), 0)
	debug.SetGCPercent(50)
	level := hclog.Info
	if v, ok := e.getenv("HERD_LOG_LEVEL"); ok {
		level = hclog.LevelFromString(v)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: level, Output: e.stderr}).Named("agent.guard")
	return agent.RunGuard(e.stdin, logger)
}
