package main

import (
	"strings"

	"herd/cmd/herd/internal/bench"
	"herd/config"
)

// runBench is `herd bench`: flags for cmd/herd/internal/bench, which does the work.
func runBench(e *env, args []string) error {
	fs := newFlags(e, "bench", "", "Measure herd on this machine: the raft ceiling, placements per second,\nend-to-end throughput and latency, decision latency, footprint and failover.\nPrints a table and, with -json, writes the results with machine facts.")
	var o bench.Options
	fs.BoolVar(&o.Quick, "quick", false, "shrink every workload so the run takes about a minute")
	fs.StringVar(&o.JSON, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.StringVar(&o.PlacementProfile, "placementprofile", "", "write a CPU profile of the timed placement phase only to this file (not with -cpuprofile)")
	fs.StringVar(&o.AllocProfile, "allocprofile", "", "write a profile of the whole run's allocations (this process's) to this file")
	fs.StringVar(&o.HeapProfile, "heapprofile", "", "write the footprint replica's heap profile, taken once loaded, to this file")
	only := fs.String("only", "", "run only these steps (comma-separated: "+strings.Join(bench.Steps, ",")+")")
	fs.IntVar(&o.Backlog, "backlog", 0, "override the placement backlog size")
	fs.IntVar(&o.Agents, "agents", 0, "override how many agents the agents step starts (1,000; 50 with -quick);\nthe fleet curve then stops at this size")
	fs.DurationVar(&o.FootprintIdle, "footprint-idle", 0, "override the footprint replica's settling time and idle window (each; 20s by default):\n30m lets a loaded leader explain every waiting task once before the settled RSS is read")
	fs.StringVar(&o.AgentDir, "agent-dir", "", "put the end-to-end agents' data (attempt logs and working directories) under this directory\ninstead of the run's temporary one: a tmpfs leaves out the disk's cost of creating them")
	fs.StringVar(&o.ProcessProfiles, "process-profiles", "", "have the e2e-processes step's servers and agents each write a CPU profile of their run, up to\nthe end of the measured window, into this directory (one/s1.pprof, two/pa-1.pprof, …), and the agents step's leader one of\nits idle and one of its placing window, a follower and the bench's own agents one of the idle window\n(agents/leader-idle.pprof, agents/leader-placing.pprof, agents/follower-idle.pprof, agents/agents-idle.pprof)")
	fs.StringVar(&o.AgentLimits, "agent-limits", "", "have every end-to-end agent enforce limits this way (auto, cgroup-v2, cgroup-v1, rlimit or none;\ndefault: auto, or $HERD_LIMITS)")
	curves := fs.String("curves", "", "with the curves step, measure only these curves (comma-separated: "+strings.Join(bench.CurveNames, ",")+")")
	fs.StringVar(&o.Plots, "plots", "", "write an SVG plot of each curve the curves step measures into this directory")
	fs.StringVar(&o.LogStore, "log-store", "", "run every replica with this raft.log_store (boltdb or wal; default: "+config.DefaultRaft().LogStore+", or $HERD_RAFT_LOG_STORE)")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("bench takes no arguments")
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if *curves != "" {
		o.Curves = strings.Split(*curves, ",")
	}
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	o.Progress = e.stderr
	return bench.Run(o, e.stdout)
}
