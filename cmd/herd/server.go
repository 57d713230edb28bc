package main

import (
	"fmt"
	"herd/internal/version"
	"os"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"herd/cluster"
	"herd/config"
	"herd/internal/gcpace"
)

func runServer(e *env, args []string) error {
	fs := newFlags(e, "server", "", "Run one scheduler replica. Settings come from defaults, then -config FILE,\nthen HERD_* environment variables, then flags.")
	configFile := fs.String("config", "", "HCL config file")
	applyFlags := config.ServerSettings.BindFlags(fs)
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("server takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	cfg, err := loadServerConfig(e, *configFile, applyFlags)
	if err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "herd", Level: hclog.LevelFromString(cfg.LogLevel), Output: e.stderr})
	logger.Info("server starting", "id", cfg.ID, "build", version.Get().String())
	if cfg.MemoryLimitMiB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMiB) << 20)
		logger.Info("soft memory limit set", "mib", cfg.MemoryLimitMiB)
	}
	if cfg.GCHeadroomMiB > 0 {
		// nil, and nothing to stop, when GOGC=off leaves nothing to pace.
		if pacer := gcpace.Start(uint64(cfg.GCHeadroomMiB) << 20); pacer != nil {
			defer pacer.Stop()
			logger.Debug("collector paced", "headroom_mib", cfg.GCHeadroomMiB)
		}
	}
	srv, err := cluster.Start(cfg, cluster.Options{Logger: logger})
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	sigs, stop := e.signals()
	defer stop()
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			// Rotation: new certificates take effect for new connections.
			_ = srv.ReloadTLS()
			continue
		}
		logger.Info("signal received, shutting down", "signal", sig.String())
		break
	}
	return srv.Shutdown()
}

// loadServerConfig layers the defaults, the file, the environment and the
// flags given, and validates the result.
func loadServerConfig(e *env, configFile string, applyFlags func(*config.Server) error) (config.Server, error) {
	cfg := config.DefaultServer()
	if configFile != "" {
		if err := config.LoadServerFile(&cfg, configFile); err != nil {
			return cfg, err
		}
	}
	if err := config.ApplyServerEnv(&cfg, e.getenv); err != nil {
		return cfg, err
	}
	if err := applyFlags(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func runDev(e *env, args []string) error {
	fs := newFlags(e, "dev", "", "Run three replicas and a few agents in this process on free loopback ports, with data in a\ntemporary directory (removed on exit unless -data-dir is given). Ctrl-C stops.")
	dataDir := fs.String("data-dir", "", "keep data here instead of a temporary directory")
	logLevel := fs.String("log-level", "warn", "log level of the replicas")
	agents := fs.Int("agents", 2, "how many agents to run, each pretending to be another kind of machine\n(a mini PC, an Atom, a Raspberry Pi, an old laptop, a workstation, then again), so that the\ncluster's judgement of hardware shows on one computer")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if *agents < 0 || *agents > 64 {
		return usagef("-agents %d: want 0 to 64", *agents)
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
	if err := startDevAgents(dev, dir, *agents); err != nil {
		return err
	}
	printDevBanner(e.stdout, dev, dir)
	sigs, stop := e.signals()
	defer stop()
	<-sigs
	fmt.Fprintln(e.stdout, "\nShutting down the dev cluster…")
	// The replicas stop one after another, and the last ones would log
	// every refused connection to the ones gone: the cluster is going
	// away on purpose, so its logs end here.
	logger.SetLevel(hclog.Off)
	return nil
}
