package config

import (
	"fmt"
	"os"
	"time"
)

type srv = Setting[Server]

// ServerSettings is every setting of a replica (herd server), declared
// once. Defaults come from DefaultServer.
var ServerSettings = Table[Server]{Defaults: DefaultServer, File: true, Settings: []srv{
	Field("id", "HERD_ID", "id", "server id, unique in the cluster", func(c *Server) *string { return &c.ID }),
	Field("data_dir", "HERD_DATA_DIR", "data-dir", "directory for the raft log, snapshots and state", func(c *Server) *string { return &c.DataDir }),
	Field("http_addr", "HERD_HTTP_ADDR", "http-addr", "HTTP API listen address", func(c *Server) *string { return &c.HTTPAddr }),
	Field("raft_addr", "HERD_RAFT_ADDR", "raft-addr", "raft listen address", func(c *Server) *string { return &c.RaftAddr }),
	Field("http_advertise", "HERD_HTTP_ADVERTISE", "http-advertise", "HTTP address others use, if not the listen address (needed when listening on 0.0.0.0)", func(c *Server) *string { return &c.HTTPAdvertise }),
	Field("raft_advertise", "HERD_RAFT_ADVERTISE", "raft-advertise", "raft address others use, if not the listen address", func(c *Server) *string { return &c.RaftAdvertise }),
	Field("bootstrap", "HERD_BOOTSTRAP", "bootstrap", "bootstrap a one-server cluster", func(c *Server) *bool { return &c.Bootstrap }),
	Field("bootstrap_expect", "HERD_BOOTSTRAP_EXPECT", "bootstrap-expect", "bootstrap once this many servers found each other through join", func(c *Server) *int { return &c.BootstrapExpect }),
	Field("join", "HERD_JOIN", "join", "HTTP addresses of servers to join (comma-separated in the environment and flag)", func(c *Server) *[]string { return &c.Join }),
	Field("log_level", "HERD_LOG_LEVEL", "log-level", "trace, debug, info, warn, error or off", func(c *Server) *string { return &c.LogLevel }),
	Field("gossip_addr", "HERD_GOSSIP_ADDR", "gossip-addr", "gossip (memberlist) address; empty: no gossip, liveness by HTTP heartbeats alone", func(c *Server) *string { return &c.GossipAddr }),
	Field("gossip_advertise", "HERD_GOSSIP_ADVERTISE", "", "gossip address others use, if not gossip_addr", func(c *Server) *string { return &c.GossipAdvertise }),
	Field("gossip_key", "HERD_GOSSIP_KEY", "gossip-key", "base64 AES key (16, 24 or 32 bytes) encrypting gossip", func(c *Server) *string { return &c.GossipKey }),
	Field("enable_debug", "", "enable-debug", "serve Go's profiles under /debug/pprof/ on the HTTP API", func(c *Server) *bool { return &c.EnableDebug }),
	Field("tls_ca_file", "HERD_TLS_CA_FILE", "tls-ca-file", "the cluster CA's certificate (PEM): with the next two, HTTPS and mutual TLS on every link", func(c *Server) *string { return &c.TLSCAFile }),
	Field("tls_cert_file", "HERD_TLS_CERT_FILE", "tls-cert-file", "this replica's server certificate (herd tls cert create -server); reloaded on SIGHUP", func(c *Server) *string { return &c.TLSCertFile }),
	Field("tls_key_file", "HERD_TLS_KEY_FILE", "tls-key-file", "the certificate's private key; reloaded on SIGHUP", func(c *Server) *string { return &c.TLSKeyFile }),
	Field("acl", "HERD_ACL", "acl", "enforce ACL tokens on every endpoint (needs TLS); bootstrap with herd acl bootstrap", func(c *Server) *bool { return &c.ACL }),
	Field("insecure", "HERD_INSECURE", "insecure", "allow listening off loopback without TLS and ACLs (logged at start and shown in /v1/status/self)", func(c *Server) *bool { return &c.Insecure }),
	Field("memory_limit_mib", "HERD_MEMORY_LIMIT_MIB", "memory-limit-mib", "soft memory limit in MiB, 0 for none: the collector works harder near it", func(c *Server) *int { return &c.MemoryLimitMiB }),
	Field("gc_headroom_mib", "HERD_GC_HEADROOM_MIB", "gc-headroom-mib", "how far (MiB) the heap grows past what is live before a collection: GOGC is set after each one to allow that, between 25 and 400 (and at most a GOGC set in the environment); 0: GOGC alone", func(c *Server) *int { return &c.GCHeadroomMiB }),

	Field("raft.heartbeat_timeout", "", "", "how long a follower goes without the leader before it stands for election", func(c *Server) *time.Duration { return &c.Raft.HeartbeatTimeout }),
	Field("raft.election_timeout", "", "", "how long a candidate waits for votes before it retries", func(c *Server) *time.Duration { return &c.Raft.ElectionTimeout }),
	Field("raft.leader_lease_timeout", "", "", "how long a leader serves without reaching a quorum before it steps down", func(c *Server) *time.Duration { return &c.Raft.LeaderLeaseTimeout }),
	Field("raft.commit_timeout", "", "", "how soon idle followers learn a new commit index (follower-read staleness: an agent whose server is a follower may start a lone task up to twice this late); 100ms about halves an idle leader's CPU", func(c *Server) *time.Duration { return &c.Raft.CommitTimeout }),
	Field("raft.max_append_entries", "", "", "entries per replication message", func(c *Server) *int { return &c.Raft.MaxAppendEntries }),
	Field("raft.snapshot_interval", "", "", "how often to check whether to snapshot", func(c *Server) *time.Duration { return &c.Raft.SnapshotInterval }),
	Field("raft.snapshot_threshold", "", "", "entries applied since the last snapshot that make a new one", func(c *Server) *uint64 { return &c.Raft.SnapshotThreshold }),
	Field("raft.trailing_logs", "", "", "entries kept after a snapshot, so a lagging follower catches up from the log", func(c *Server) *uint64 { return &c.Raft.TrailingLogs }),
	Field("raft.snapshot_retain", "", "", "snapshots kept on disk", func(c *Server) *int { return &c.Raft.SnapshotRetain }),
	Field("raft.apply_timeout", "", "", "how long a write waits to be committed", func(c *Server) *time.Duration { return &c.Raft.ApplyTimeout }),
	Field("raft.log_store", "HERD_RAFT_LOG_STORE", "", "what keeps the raft log on disk: boltdb (one bbolt file) or wal (segment files: less memory and CPU, experimental; see Configuration); a change copies the log over at the next start", func(c *Server) *string { return &c.Raft.LogStore }),

	Field("scheduler.heartbeat_ttl", "", "", "how old a node's last heartbeat may be for it to get new work", func(c *Server) *time.Duration { return &c.Scheduler.HeartbeatTTL }),
	Field("scheduler.batch_size", "", "", "placements per Raft entry", func(c *Server) *int { return &c.Scheduler.BatchSize }),
	Field("scheduler.max_pass_placements", "", "", "placements decided from one view of the state", func(c *Server) *int { return &c.Scheduler.MaxPassPlacements }),
	Field("scheduler.explain_interval", "", "", "how often a waiting task's reason is recomputed (with every slot taken, a newly waiting task gets its first within the smaller of this and 1s)", func(c *Server) *time.Duration { return &c.Scheduler.ExplainInterval }),
	Field("scheduler.aging_grace", "", "", "how long a task waits before aging raises its priority", func(c *Server) *time.Duration { return &c.Scheduler.AgingGrace }),
	Field("scheduler.aging_interval", "", "", "each interval waited past the grace adds one to the priority", func(c *Server) *time.Duration { return &c.Scheduler.AgingInterval }),
	Field("scheduler.aging_cap", "", "", "the most aging adds to a priority", func(c *Server) *int { return &c.Scheduler.AgingCap }),
	Field("scheduler.failure_penalty", "", "", "priority a retried task loses per failure", func(c *Server) *int { return &c.Scheduler.FailurePenalty }),
	Field("scheduler.profile_scale", "", "", "> 0 adds the capacity/health/locality/history profile score", func(c *Server) *int64 { return &c.Scheduler.ProfileScale }),
	Field("scheduler.random_top_k", "", "", "> 1 picks among the best K, weighted by score (1: always the best)", func(c *Server) *int { return &c.Scheduler.RandomTopK }),
	Field("scheduler.spread_window", "", "", "how far below the best a score may be and still be drawn by random_top_k", func(c *Server) *int64 { return &c.Scheduler.SpreadWindow }),
	Field("scheduler.weight_capacity", "", "", "weight of capacity (free share and measured power) in the profile score", func(c *Server) *float64 { return &c.Scheduler.ProfileWeights.Capacity }),
	Field("scheduler.weight_health", "", "", "weight of health (online ratio, failures of tasks that then succeed elsewhere)", func(c *Server) *float64 { return &c.Scheduler.ProfileWeights.Health }),
	Field("scheduler.weight_locality", "", "", "weight of data locality (grows with the input's size, up to 4x from 1 GiB)", func(c *Server) *float64 { return &c.Scheduler.ProfileWeights.Locality }),
	Field("scheduler.weight_history", "", "", "weight of history (the class's fleet median over the node's run time)", func(c *Server) *float64 { return &c.Scheduler.ProfileWeights.History }),
	Field("scheduler.size_small", "", "", "tiers a task of size small may run on", func(c *Server) *[]string { return &c.Scheduler.SizeSmall }),
	Field("scheduler.size_medium", "", "", "tiers a task of size medium may run on", func(c *Server) *[]string { return &c.Scheduler.SizeMedium }),
	Field("scheduler.size_large", "", "", "tiers a task of size large may run on", func(c *Server) *[]string { return &c.Scheduler.SizeLarge }),
	Field("scheduler.retry_base", "", "", "retry backoff: base * factor^(failures-1), capped", func(c *Server) *time.Duration { return &c.Scheduler.RetryBase }),
	Field("scheduler.retry_factor", "", "", "the backoff's factor", func(c *Server) *float64 { return &c.Scheduler.RetryFactor }),
	Field("scheduler.retry_cap", "", "", "the longest backoff", func(c *Server) *time.Duration { return &c.Scheduler.RetryCap }),
	Field("scheduler.schedule_to_start_timeout", "", "", "reclaim an attempt reserved but never reported started", func(c *Server) *time.Duration { return &c.Scheduler.ScheduleToStartTimeout }),
	Field("scheduler.task_retention", "", "", "forget finished tasks (and their idempotency keys) this long after their last event, then the finished jobs whose tasks are all forgotten; 0 keeps them", func(c *Server) *time.Duration { return &c.Scheduler.TaskRetention }),

	Field("profiles.l1_min_cores", "", "", "cores a node needs for tier L1", func(c *Server) *int { return &c.Profiles.L1MinCores }),
	Field("profiles.l1_min_memory_mb", "", "", "memory a node needs for tier L1", func(c *Server) *int64 { return &c.Profiles.L1MinMemoryMB }),
	Field("profiles.l2_min_cores", "", "", "cores a node needs for tier L2 (below: L3)", func(c *Server) *int { return &c.Profiles.L2MinCores }),
	Field("profiles.l2_min_memory_mb", "", "", "memory a node needs for tier L2 (below: L3)", func(c *Server) *int64 { return &c.Profiles.L2MinMemoryMB }),
	Field("profiles.slow_factor", "", "", "a run this many times the fleet median of its class is slow", func(c *Server) *float64 { return &c.Profiles.SlowFactor }),
	Field("profiles.slow_runs", "", "", "slow runs among the last slow_window of a class that demote a node", func(c *Server) *int { return &c.Profiles.SlowRuns }),
	Field("profiles.slow_window", "", "", "how many of a class's latest runs on a node are judged", func(c *Server) *int { return &c.Profiles.SlowWindow }),
	Field("profiles.promote_factor", "", "", "a demoted node moves up only if no run took over this many times the fleet median", func(c *Server) *float64 { return &c.Profiles.PromoteFactor }),
	Field("profiles.dwell", "", "", "how long a node keeps a tier before it may be promoted", func(c *Server) *time.Duration { return &c.Profiles.Dwell }),
	Field("profiles.failure_window", "", "", "the window of a node's failure rate", func(c *Server) *time.Duration { return &c.Profiles.FailureWindow }),
	Field("profiles.failure_min_attempts", "", "", "results within the window before the failure rate counts", func(c *Server) *int { return &c.Profiles.FailureMinAttempts }),
	Field("profiles.failure_rate", "", "", "share of failures (of tasks that then succeed elsewhere) that demotes a node", func(c *Server) *float64 { return &c.Profiles.FailureRate }),
	Field("profiles.black_hole_failures", "", "", "fast failures of distinct tasks in a row that quarantine a node, while other nodes succeed", func(c *Server) *int { return &c.Profiles.BlackHoleFailures }),
	Field("profiles.fast_failure", "", "", "a failure within this time of its start is fast", func(c *Server) *time.Duration { return &c.Profiles.FastFailure }),
	Field("profiles.quarantine_suspect", "", "", "how long a suspected black hole is quarantined", func(c *Server) *time.Duration { return &c.Profiles.QuarantineSuspect }),
	Field("profiles.quarantine_confirmed", "", "", "how long a confirmed black hole is quarantined", func(c *Server) *time.Duration { return &c.Profiles.QuarantineConfirmed }),
	Field("profiles.health_recheck", "", "", "how often a quarantined node's failed health check is asked again", func(c *Server) *time.Duration { return &c.Profiles.HealthRecheck }),
	Field("profiles.slow_attempt_factor", "", "", "an attempt running over this many times its class's fleet median (and the floor) is slow", func(c *Server) *float64 { return &c.Profiles.SlowAttemptFactor }),
	Field("profiles.slow_attempt_floor", "", "", "an attempt is never slow before it ran this long", func(c *Server) *time.Duration { return &c.Profiles.SlowAttemptFloor }),

	Field("liveness.heartbeat_interval", "", "", "an agent's normal heartbeat", func(c *Server) *time.Duration { return &c.Liveness.HeartbeatInterval }),
	Field("liveness.max_heartbeat_interval", "", "", "how far the interval stretches as a node's heartbeat loss rises to 30%", func(c *Server) *time.Duration { return &c.Liveness.MaxHeartbeatInterval }),
	Field("liveness.suspect_after", "", "", "missed intervals in a row before a node is SUSPECT", func(c *Server) *int { return &c.Liveness.SuspectAfter }),
	Field("liveness.down_after", "", "", "missed intervals in a row before a node is DOWN and its attempts are reclaimed", func(c *Server) *int { return &c.Liveness.DownAfter }),
	Field("liveness.leader_grace", "", "", "how long a new leader observes before it may declare a node SUSPECT or DOWN", func(c *Server) *time.Duration { return &c.Liveness.LeaderGrace }),
	Field("liveness.wake_timeout", "", "", "how long the leader waits for a hibernating node it woke before passing it over", func(c *Server) *time.Duration { return &c.Liveness.WakeTimeout }),
}}

// LoadServerFile applies an HCL config file on top of c.
func LoadServerFile(c *Server, path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	return ParseServer(c, path, src)
}

// ParseServer applies HCL source (named filename in messages) on top of c.
func ParseServer(c *Server, filename string, src []byte) error {
	return ServerSettings.ParseHCL(c, filename, src)
}

// ApplyServerEnv applies HERD_* variables found through lookup on top of c.
func ApplyServerEnv(c *Server, lookup func(string) (string, bool)) error {
	return ServerSettings.ApplyEnv(c, lookup)
}
