package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/hashicorp/go-hclog"

	"herd/cluster"
	"herd/config"
)

// serverFlags binds the server flags; only flags given on the command line
// override the file and the environment.
type serverFlags struct {
	configFile                                                        string
	id, dataDir, httpAddr, raftAddr, httpAdv, raftAdv, join, logLevel string
	gossipAddr, gossipKey                                             string
	bootstrap, enableDebug                                            bool
	bootstrapExpect, memoryLimitMiB                                   int
}

func runServer(e *env, args []string) error {
	fs := newFlags(e, "server", "", "Run one scheduler replica. Settings come from defaults, then -config FILE,\nthen HERD_* environment variables, then flags.")
	var f serverFlags
	fs.StringVar(&f.configFile, "config", "", "HCL config file")
	fs.StringVar(&f.id, "id", "", "server id, unique in the cluster (HERD_ID)")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for raft log, snapshots and state (HERD_DATA_DIR)")
	fs.StringVar(&f.httpAddr, "http-addr", "", "HTTP API listen address (default 127.0.0.1:4646; HERD_HTTP_ADDR)")
	fs.StringVar(&f.raftAddr, "raft-addr", "", "raft listen address (default 127.0.0.1:4647; HERD_RAFT_ADDR)")
	fs.StringVar(&f.httpAdv, "http-advertise", "", "HTTP address others use, if not the listen address (HERD_HTTP_ADVERTISE)")
	fs.StringVar(&f.raftAdv, "raft-advertise", "", "raft address others use, if not the listen address (HERD_RAFT_ADVERTISE)")
	fs.BoolVar(&f.bootstrap, "bootstrap", false, "bootstrap a one-server cluster (HERD_BOOTSTRAP)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "bootstrap once this many servers found each other through -join (HERD_BOOTSTRAP_EXPECT)")
	fs.StringVar(&f.join, "join", "", "comma-separated HTTP addresses of servers to join (HERD_JOIN)")
	fs.StringVar(&f.logLevel, "log-level", "", "trace, debug, info, warn or error (default info; HERD_LOG_LEVEL)")
	fs.StringVar(&f.gossipAddr, "gossip-addr", "", "gossip (memberlist) address; empty: no gossip, liveness by HTTP heartbeats (HERD_GOSSIP_ADDR)")
	fs.StringVar(&f.gossipKey, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip (HERD_GOSSIP_KEY)")
	fs.BoolVar(&f.enableDebug, "enable-debug", false, "serve Go profiles under /debug/pprof/ on the HTTP API (enable_debug)")
	fs.IntVar(&f.memoryLimitMiB, "memory-limit-mib", 0, "soft memory limit in MiB, 0 for none: the GC works harder near it (HERD_MEMORY_LIMIT_MIB)")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("server takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	cfg, err := loadServerConfig(e, fs, &f)
	if err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(cfg.LogLevel), Output: e.stderr})
	if cfg.MemoryLimitMiB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMiB) << 20)
		logger.Info("soft memory limit set", "mib", cfg.MemoryLimitMiB)
	}
	srv, err := cluster.Start(cfg, cluster.Options{Logger: logger})
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	sigs, stop := e.signals()
	defer stop()
	sig := <-sigs
	logger.Info("signal received, shutting down", "signal", sig.String())
	return srv.Shutdown()
}

func loadServerConfig(e *env, fs *flag.FlagSet, f *serverFlags) (config.Server, error) {
	cfg := config.DefaultServer()
	if f.configFile != "" {
		if err := config.LoadServerFile(&cfg, f.configFile); err != nil {
			return cfg, err
		}
	}
	if err := config.ApplyServerEnv(&cfg, e.getenv); err != nil {
		return cfg, err
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "id":
			cfg.ID = f.id
		case "data-dir":
			cfg.DataDir = f.dataDir
		case "http-addr":
			cfg.HTTPAddr = f.httpAddr
		case "raft-addr":
			cfg.RaftAddr = f.raftAddr
		case "http-advertise":
			cfg.HTTPAdvertise = f.httpAdv
		case "raft-advertise":
			cfg.RaftAdvertise = f.raftAdv
		case "bootstrap":
			cfg.Bootstrap = f.bootstrap
		case "bootstrap-expect":
			cfg.BootstrapExpect = f.bootstrapExpect
		case "join":
			cfg.Join = config.SplitList(f.join)
		case "log-level":
			cfg.LogLevel = f.logLevel
		case "gossip-addr":
			cfg.GossipAddr = f.gossipAddr
		case "gossip-key":
			cfg.GossipKey = f.gossipKey
		case "enable-debug":
			cfg.EnableDebug = f.enableDebug
		case "memory-limit-mib":
			cfg.MemoryLimitMiB = f.memoryLimitMiB
		}
	})
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func runDev(e *env, args []string) error {
	fs := newFlags(e, "dev", "", "Run three replicas in this process on free loopback ports, with data in a\ntemporary directory (removed on exit unless -data-dir is given). Ctrl-C stops.")
	dataDir := fs.String("data-dir", "", "keep data here instead of a temporary directory")
	logLevel := fs.String("log-level", "warn", "log level of the replicas")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	dir := *dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "herd-dev-")
		if err != nil {
			return fmt.Errorf("create temp dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(*logLevel), Output: e.stderr})
	dev, err := startDev(dir, logger)
	if err != nil {
		return err
	}
	defer dev.Shutdown()
	if err := startDevAgents(dev, dir); err != nil {
		return err
	}
	printDevBanner(e.stdout, dev, dir)
	sigs, stop := e.signals()
	defer stop()
	<-sigs
	fmt.Fprintln(e.stdout, "\nShutting down the dev cluster…")
	return nil
}
