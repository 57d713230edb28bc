// Package config loads herd's configuration: built-in defaults, then an
// HCL file, then HERD_* environment variables, then command-line flags
// (applied by the caller), and validates the result with clear errors.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"herd/internal/check"
)

// Raft holds the consensus timings and log-compaction settings.
type Raft struct {
	// HeartbeatTimeout is how long a follower goes without hearing from the
	// leader before it stands for election (the leader watch has raft
	// check after a timeout and a random share of a quarter more, so a
	// crashed leader is noticed within a timeout and a quarter). 1 s: the
	// bench's failover stays under 3 s at its worst trial, and the
	// timeout leaves the leader's lease (below) room to be long. Pre-vote
	// keeps a follower that alone misses heartbeats from deposing the
	// leader.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before it
	// retries; equal to the heartbeat timeout, as raft recommends.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader keeps serving without
	// reaching a quorum before it steps down. 900 ms: what packet loss
	// trips is this lease, not the followers' timeout. At 30 % loss nearly
	// every election the bench's elections step counts follows a leader
	// that stepped down for want of a quorum: a lost TCP segment stalls a
	// link for 200 ms and more, and loss inflates TCP's round-trip
	// estimate until a stall lasts seconds. 500 ms cost several times the
	// elections of 750, and 900 about half those of 750. It stays below
	// the heartbeat timeout, so an isolated leader stops answering before
	// a new one can be elected, and the leader watch can shorten the
	// timeout.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout bounds how long followers wait to learn a new commit
	// index when no other traffic flows; it sets follower-read staleness,
	// and so how soon an agent watching a follower sees its reservation.
	// 20 ms costs an idle leader 50 small messages a second per follower.
	CommitTimeout time.Duration
	// MaxAppendEntries is how many entries one replication message carries;
	// larger than raft's 64 so slow disks fsync fewer, bigger batches.
	MaxAppendEntries int
	// SnapshotInterval and SnapshotThreshold: check every interval, snapshot
	// when at least threshold entries have been applied since the last one.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// TrailingLogs is how many entries stay after a snapshot, so a briefly
	// lagging follower catches up from the log instead of a full snapshot.
	TrailingLogs uint64
	// SnapshotRetain is how many snapshots are kept on disk.
	SnapshotRetain int
	// ApplyTimeout bounds how long a write waits to be committed.
	ApplyTimeout time.Duration
	// LogStore is what keeps the Raft log and the stable store on disk:
	// LogStoreBoltDB (the default) or LogStoreWAL. A replica that finds
	// its log kept by the other one copies it over at start.
	LogStore string
}

// The Raft log stores a replica may keep its log in.
const (
	// LogStoreWAL is hashicorp/raft-wal: append-only segment files, one
	// fsync per append, read with pread. Nothing of the log is mapped
	// into the replica's memory, and truncation deletes whole files. Its
	// authors still call it experimental; herd mends the failures found
	// in it (see cluster/walstore.go).
	LogStoreWAL = "wal"
	// LogStoreBoltDB is hashicorp/raft-boltdb/v2: one bbolt B+tree file,
	// two fsyncs per append, mapped into memory. An append that finds the
	// disk full fails, and the next one succeeds once space is back.
	LogStoreBoltDB = "boltdb"
)

// Scheduler tunes the leader's placement loop.
type Scheduler struct {
	// HeartbeatTTL is how old a node's last heartbeat may be for it to get
	// new work.
	HeartbeatTTL time.Duration
	// BatchSize is the most placements committed in one Raft entry.
	BatchSize int
	// MaxPassPlacements bounds the placements decided from one view of the
	// state before the loop looks again.
	MaxPassPlacements int
	// ExplainInterval is how often a waiting task's explanation is
	// recomputed (and recorded in its timeline when it changed).
	ExplainInterval time.Duration
	// Queue order (see scheduler.QueueConfig).
	AgingGrace     time.Duration
	AgingInterval  time.Duration
	AgingCap       int
	FailurePenalty int
	// ProfileScale > 0 adds the profile score, its parts weighed by
	// ProfileWeights; RandomTopK > 1 picks at random among the best K
	// within SpreadWindow points of the best (seeded by the task and
	// attempt, so a decision replays).
	ProfileScale   int64
	ProfileWeights ProfileWeights
	RandomTopK     int
	SpreadWindow   int64
	// SizeSmall, SizeMedium and SizeLarge are the tiers a task of each
	// size may run on.
	SizeSmall, SizeMedium, SizeLarge []string
	// Retry backoff after a failed attempt: base * factor^(failures-1),
	// capped.
	RetryBase   time.Duration
	RetryFactor float64
	RetryCap    time.Duration
	// ScheduleToStartTimeout reclaims an attempt that was reserved but
	// never reported started (its agent never saw it, or died).
	ScheduleToStartTimeout time.Duration
	// TaskRetention is how long a finished task (and its attempts) is kept
	// after its last event; then the leader forgets it, so finished work
	// does not grow memory without bound. Its idempotency key is forgotten
	// with it. A job's tasks are kept while it runs; once they are all
	// forgotten, a job finished as long ago is forgotten too (with its
	// key), so a schedule's runs do not accumulate either. 0 keeps
	// finished tasks and jobs forever.
	TaskRetention time.Duration
}

// DefaultScheduler returns the scheduler defaults.
func DefaultScheduler() Scheduler {
	return Scheduler{
		HeartbeatTTL:      30 * time.Second,
		BatchSize:         512,
		MaxPassPlacements: 4096,
		ExplainInterval:   5 * time.Second,
		AgingGrace:        2 * time.Minute,
		AgingInterval:     10 * time.Second,
		AgingCap:          100,
		FailurePenalty:    10,
		// A perfect profile counts like 200 points of weight (20 running
		// attempts); near-equals, within 2 running attempts' worth, share
		// the work three ways.
		ProfileScale:   200_000,
		ProfileWeights: ProfileWeights{Capacity: 0.4, Health: 0.3, Locality: 0.2, History: 0.1},
		RandomTopK:     3,
		SpreadWindow:   20_000,
		SizeSmall:      []string{"L1", "L2", "L3"},
		SizeMedium:     []string{"L1", "L2"},
		SizeLarge:      []string{"L1"},
		RetryBase:      time.Second,
		RetryFactor:    2,
		RetryCap:       5 * time.Minute,
		// Agents poll assignments with a blocking query and start within
		// milliseconds; a minute covers a reconnect through another replica.
		ScheduleToStartTimeout: time.Minute,
		TaskRetention:          24 * time.Hour,
	}
}

// Liveness tunes how the leader turns gossip observations into node
// states; weak networks must not make healthy nodes look dead
// (docs/scheduling.md, "Liveness").
type Liveness struct {
	// HeartbeatInterval is an agent's normal heartbeat; the interval in
	// force for a node stretches towards MaxHeartbeatInterval as its
	// observed heartbeat loss rises to 30%, and comes back as it falls.
	HeartbeatInterval    time.Duration
	MaxHeartbeatInterval time.Duration
	// SuspectAfter and DownAfter count consecutive missed intervals.
	SuspectAfter int
	DownAfter    int
	// LeaderGrace is how long a new leader observes before it may declare
	// a node SUSPECT or DOWN (it does not inherit its predecessor's timers).
	LeaderGrace time.Duration
	// WakeTimeout is how long the leader waits for a hibernating node it
	// woke before passing it over for the task.
	WakeTimeout time.Duration
}

// Lease is how long an agent may keep running its attempts without a
// heartbeat acknowledged by the leader, when the interval in force for
// it is interval: DownAfter intervals. The leader declares a node DOWN
// only after DownAfter intervals and half an interval of silence, and
// re-places its attempts only once the lease and a tenth more have passed
// since it was last heard (the tenth covers clocks running at different
// rates); the agent starts stopping its attempts a kill grace before the
// lease ends, so they are dead before they can run elsewhere.
func (l Liveness) Lease(interval time.Duration) time.Duration {
	return time.Duration(l.DownAfter) * interval
}

// MaxLease is the longest lease the leader gives: at the longest
// interval.
func (l Liveness) MaxLease() time.Duration { return l.Lease(l.MaxHeartbeatInterval) }

// DefaultLiveness: 5 s heartbeats stretched up to 15 s, SUSPECT after 2
// misses, DOWN after 5.
func DefaultLiveness() Liveness {
	return Liveness{
		HeartbeatInterval: 5 * time.Second, MaxHeartbeatInterval: 15 * time.Second,
		SuspectAfter: 2, DownAfter: 5, LeaderGrace: 30 * time.Second, WakeTimeout: 10 * time.Second,
	}
}

// ProfileWeights weigh the parts of the profile score.
type ProfileWeights struct {
	Capacity, Health, Locality, History float64
}

// Profiles are the rules that turn measured profiles and history into
// tiers and quarantines. The leader commits them to the replicated state,
// so every replica derives the same from the same facts.
type Profiles struct {
	// Base tiers: L1 from L1MinCores and L1MinMemoryMB, L2 from the L2
	// minimums, L3 below.
	L1MinCores    int
	L1MinMemoryMB int64
	L2MinCores    int
	L2MinMemoryMB int64
	// SlowRuns of the last SlowWindow runs of a class over SlowFactor
	// times the fleet median demote a node; it is promoted after Dwell
	// without a run over PromoteFactor times it or a failure of work that
	// succeeds elsewhere.
	SlowFactor    float64
	SlowRuns      int
	SlowWindow    int
	PromoteFactor float64
	Dwell         time.Duration
	// A node whose failures of work that succeeds elsewhere reach
	// FailureRate of at least FailureMinAttempts results within
	// FailureWindow is demoted.
	FailureWindow      time.Duration
	FailureMinAttempts int
	FailureRate        float64
	// BlackHoleFailures failures of a class in a row, each within
	// FastFailure of its start, while the class succeeds elsewhere:
	// quarantined for QuarantineSuspect, or QuarantineConfirmed once most
	// of those tasks succeeded elsewhere. A failed health check is asked
	// again every HealthRecheck.
	BlackHoleFailures   int
	FastFailure         time.Duration
	QuarantineSuspect   time.Duration
	QuarantineConfirmed time.Duration
	HealthRecheck       time.Duration
	// An attempt running over SlowAttemptFactor times its class's fleet
	// median, and at least SlowAttemptFloor, is marked slow: reported,
	// counted as a slow run of its node, and a speculative task's backup
	// starts elsewhere.
	SlowAttemptFactor float64
	SlowAttemptFloor  time.Duration
}

// DefaultProfiles are the defaults of fsm.DefaultProfileSettings.
func DefaultProfiles() Profiles {
	return Profiles{
		L1MinCores: 4, L1MinMemoryMB: 8192, L2MinCores: 2, L2MinMemoryMB: 2048,
		SlowFactor: 2.5, SlowRuns: 3, SlowWindow: 5, PromoteFactor: 1.5, Dwell: 10 * time.Minute,
		FailureWindow: 5 * time.Minute, FailureMinAttempts: 4, FailureRate: 0.5,
		BlackHoleFailures: 3, FastFailure: 30 * time.Second,
		QuarantineSuspect: 2 * time.Minute, QuarantineConfirmed: 30 * time.Minute, HealthRecheck: 30 * time.Second,
		SlowAttemptFactor: 5, SlowAttemptFloor: 10 * time.Second,
	}
}

// Server is the configuration of one scheduler replica.
type Server struct {
	ID              string
	DataDir         string
	HTTPAddr        string // listen address of the HTTP API
	RaftAddr        string // listen address of the Raft transport
	HTTPAdvertise   string // address other replicas and clients use; defaults to HTTPAddr
	RaftAdvertise   string // address other replicas use for Raft; defaults to RaftAddr
	Bootstrap       bool
	BootstrapExpect int
	Join            []string
	LogLevel        string
	Raft            Raft
	Scheduler       Scheduler
	Liveness        Liveness
	Profiles        Profiles
	// GossipAddr is where the replica joins the memberlist pool ("" : no
	// gossip; liveness then rests on HTTP heartbeats alone).
	GossipAddr      string
	GossipAdvertise string
	// GossipKey is a base64 AES key (16, 24 or 32 bytes) encrypting gossip.
	GossipKey string
	// EnableDebug serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on the HTTP API. Off by default: profiles reveal internals and cost
	// CPU while taken.
	EnableDebug bool
	// MemoryLimitMiB is a soft limit on the replica's Go heap and runtime
	// (Go's GOMEMLIMIT): the collector works harder as memory nears it,
	// trading CPU for a smaller footprint. 0 leaves Go's default (the
	// heap may grow to about twice what is live).
	MemoryLimitMiB int
	// GCHeadroomMiB bounds how far the heap grows past what is live
	// before the next collection: the collector's target (GOGC, 100 unless
	// the environment sets it) is lowered after each collection so the
	// growth stays within it, to no less than 25 %. 0 leaves GOGC alone.
	GCHeadroomMiB int
	// TLS names the replica's CA, certificate and key: with them the API
	// is HTTPS and every link between replicas mutual TLS.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// ACL enforces tokens on every endpoint (it needs TLS: replicas prove
	// they are servers by their certificates).
	ACL bool
	// Insecure lets a replica listen off loopback without TLS and ACLs.
	Insecure bool
}

// TLSEnabled reports whether TLS files are given.
func (c *Server) TLSEnabled() bool {
	return c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != ""
}

// Open reports whether the replica runs without TLS or without ACLs.
func (c *Server) Open() bool { return !c.TLSEnabled() || !c.ACL }

// Loopback reports whether addr listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// securityErrors checks the TLS files and ACL settings, and refuses an
// open replica reachable from other machines unless Insecure says so.
func (c *Server) securityErrors() []error {
	var errs []error
	if c.TLSEnabled() && (c.TLSCAFile == "" || c.TLSCertFile == "" || c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS needs tls_ca_file, tls_cert_file and tls_key_file together"))
	}
	if c.ACL && !c.TLSEnabled() {
		errs = append(errs, errors.New("acl needs TLS: replicas prove they are servers by their certificates (give tls_ca_file, tls_cert_file and tls_key_file)"))
	}
	if c.Open() && !c.Insecure {
		for name, addr := range map[string]string{"http_addr": c.HTTPAddr, "raft_addr": c.RaftAddr, "gossip_addr": c.GossipAddr} {
			if addr != "" && !Loopback(addr) {
				errs = append(errs, fmt.Errorf("%s %s is reachable from other machines, but TLS and ACLs are not both on: give -tls-ca-file, -tls-cert-file, -tls-key-file and -acl, or -insecure to run open anyway", name, addr))
			}
		}
	}
	if !c.Open() && c.GossipAddr != "" && !Loopback(c.GossipAddr) && c.GossipKey == "" {
		errs = append(errs, errors.New("gossip off loopback needs gossip_key when the replica is secured: unencrypted gossip would let anyone fake liveness"))
	}
	return errs
}

// DefaultRaft returns the timings tuned for low-spec servers on weak links.
func DefaultRaft() Raft {
	return Raft{
		HeartbeatTimeout:   time.Second,
		ElectionTimeout:    time.Second,
		LeaderLeaseTimeout: 900 * time.Millisecond,
		CommitTimeout:      20 * time.Millisecond,
		MaxAppendEntries:   128,
		SnapshotInterval:   120 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotRetain:     2,
		ApplyTimeout:       10 * time.Second,
		LogStore:           LogStoreBoltDB,
	}
}

// DefaultGCHeadroomMiB is how far a replica's heap grows past what is
// live, unless set otherwise. A replica's live heap is mostly its
// replicated state, which outlives every collection, so Go's default
// target would double the footprint of a large state for memory that
// never becomes garbage, and collect a small state every few megabytes
// allocated (BENCHMARKS.md, "The collector's headroom").
const DefaultGCHeadroomMiB = 16

// DefaultServer returns a server configuration with every default set.
func DefaultServer() Server {
	return Server{
		HTTPAddr:  "127.0.0.1:4646",
		RaftAddr:  "127.0.0.1:4647",
		LogLevel:  "info",
		Raft:      DefaultRaft(),
		Scheduler: DefaultScheduler(),
		Liveness:  DefaultLiveness(),
		Profiles:  DefaultProfiles(),

		GCHeadroomMiB: DefaultGCHeadroomMiB,
	}
}

// SplitList splits a comma-separated list, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ValidID reports whether s may name a server or node.
func ValidID(s string) bool { return check.ID(s) }

// Validate checks c and fills the advertise addresses. All problems are
// reported together.
func (c *Server) Validate() error {
	var errs []error
	if !ValidID(c.ID) {
		errs = append(errs, fmt.Errorf("id %q must be 1-64 letters, digits, '.', '_' or '-'", c.ID))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	if c.HTTPAdvertise == "" {
		c.HTTPAdvertise = c.HTTPAddr
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	for name, addr := range map[string]string{"http_addr": c.HTTPAddr, "raft_addr": c.RaftAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	for name, addr := range map[string]string{"http_advertise": c.HTTPAdvertise, "raft_advertise": c.RaftAdvertise} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
			continue
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) || port == "0" {
			errs = append(errs, fmt.Errorf("%s %q is not an address others can reach: set it explicitly", name, addr))
		}
	}
	errs = append(errs, c.securityErrors()...)
	if c.Bootstrap && c.BootstrapExpect > 0 {
		errs = append(errs, errors.New("bootstrap and bootstrap_expect are mutually exclusive"))
	}
	if c.MemoryLimitMiB < 0 || (c.MemoryLimitMiB > 0 && c.MemoryLimitMiB < 32) {
		errs = append(errs, fmt.Errorf("memory_limit_mib %d must be 0 (no limit) or at least 32", c.MemoryLimitMiB))
	}
	if c.GCHeadroomMiB < 0 {
		errs = append(errs, fmt.Errorf("gc_headroom_mib %d must be 0 (GOGC alone) or more", c.GCHeadroomMiB))
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 9 {
		errs = append(errs, fmt.Errorf("bootstrap_expect %d is outside 0..9", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && len(c.Join) == 0 {
		errs = append(errs, errors.New("bootstrap_expect needs join: the HTTP addresses of the other servers"))
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(j, "http://"), "https://")); err != nil {
			errs = append(errs, fmt.Errorf("join address %q: %w", j, err))
		}
	}
	switch strings.ToLower(c.LogLevel) {
	case "trace", "debug", "info", "warn", "error", "off":
	default:
		errs = append(errs, fmt.Errorf("log_level %q must be trace, debug, info, warn, error or off", c.LogLevel))
	}
	errs = append(errs, c.Raft.validate()...)
	errs = append(errs, c.Liveness.validate()...)
	if c.GossipAddr != "" {
		if _, _, err := net.SplitHostPort(c.GossipAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip_addr %q: %w", c.GossipAddr, err))
		}
		if c.GossipAdvertise == "" {
			c.GossipAdvertise = c.GossipAddr
		}
		if host, _, err := net.SplitHostPort(c.GossipAdvertise); err != nil || host == "" || net.ParseIP(host) == nil || net.ParseIP(host).IsUnspecified() {
			errs = append(errs, fmt.Errorf("gossip_advertise %q must be an IP:port others can reach", c.GossipAdvertise))
		}
	}
	if c.GossipKey != "" {
		if _, err := DecodeGossipKey(c.GossipKey); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.Scheduler.validate()...)
	errs = append(errs, c.Profiles.validate()...)
	return joinSorted(errs)
}

// validate checks the scheduler block.
func (sc Scheduler) validate() []error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"heartbeat_ttl": sc.HeartbeatTTL, "explain_interval": sc.ExplainInterval,
		"aging_interval": sc.AgingInterval, "retry_base": sc.RetryBase, "retry_cap": sc.RetryCap,
		"schedule_to_start_timeout": sc.ScheduleToStartTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("scheduler.%s must be positive", name))
		}
	}
	if sc.TaskRetention < 0 {
		errs = append(errs, errors.New("scheduler.task_retention must not be negative"))
	}
	if sc.AgingGrace < 0 {
		errs = append(errs, errors.New("scheduler.aging_grace must not be negative"))
	}
	if sc.BatchSize < 1 || sc.BatchSize > 8192 {
		errs = append(errs, fmt.Errorf("scheduler.batch_size %d is outside 1..8192", sc.BatchSize))
	}
	if sc.MaxPassPlacements < sc.BatchSize {
		errs = append(errs, errors.New("scheduler.max_pass_placements must be at least scheduler.batch_size"))
	}
	if sc.AgingCap < 0 || sc.FailurePenalty < 0 || sc.ProfileScale < 0 || sc.RandomTopK < 0 {
		errs = append(errs, errors.New("scheduler.aging_cap, failure_penalty, profile_scale and random_top_k must not be negative"))
	}
	if sc.SpreadWindow < 0 {
		errs = append(errs, errors.New("scheduler.spread_window must not be negative"))
	}
	w := sc.ProfileWeights
	if w.Capacity < 0 || w.Health < 0 || w.Locality < 0 || w.History < 0 || (sc.ProfileScale > 0 && w.Capacity+w.Health+w.Locality+w.History <= 0) {
		errs = append(errs, errors.New("scheduler.weight_capacity, weight_health, weight_locality and weight_history must not be negative, nor all 0 with a profile_scale"))
	}
	for name, tiers := range map[string][]string{"size_small": sc.SizeSmall, "size_medium": sc.SizeMedium, "size_large": sc.SizeLarge} {
		if len(tiers) == 0 {
			errs = append(errs, fmt.Errorf("scheduler.%s must name at least one tier", name))
		}
		for _, t := range tiers {
			if t != "L1" && t != "L2" && t != "L3" {
				errs = append(errs, fmt.Errorf("scheduler.%s: tier %q is not L1, L2 or L3", name, t))
			}
		}
	}
	if sc.RetryFactor < 1 || sc.RetryFactor > 100 {
		errs = append(errs, fmt.Errorf("scheduler.retry_factor %v is outside 1..100", sc.RetryFactor))
	}
	if sc.RetryCap < sc.RetryBase {
		errs = append(errs, errors.New("scheduler.retry_cap must be at least scheduler.retry_base"))
	}
	return errs
}

// validate checks the profiles block (the replicated state checks the
// same again when the leader commits it).
func (p Profiles) validate() []error {
	var errs []error
	bad := func(cond bool, msg string) {
		if cond {
			errs = append(errs, errors.New("profiles."+msg))
		}
	}
	bad(p.L2MinCores < 0 || p.L1MinCores < p.L2MinCores, "l1_min_cores must be at least l2_min_cores, both at least 0")
	bad(p.L2MinMemoryMB < 0 || p.L1MinMemoryMB < p.L2MinMemoryMB, "l1_min_memory_mb must be at least l2_min_memory_mb, both at least 0")
	bad(p.SlowWindow < 1 || p.SlowWindow > 16, "slow_window must be 1..16")
	bad(p.SlowRuns < 1 || p.SlowRuns > p.SlowWindow, "slow_runs must be 1..slow_window")
	bad(p.SlowFactor <= 1 || p.SlowFactor > 100, "slow_factor must be over 1 (and at most 100)")
	bad(p.PromoteFactor < 1 || p.PromoteFactor > p.SlowFactor, "promote_factor must be 1..slow_factor")
	bad(p.Dwell < 0, "dwell must not be negative")
	bad(p.FailureWindow <= 0 || p.FastFailure <= 0 || p.QuarantineSuspect <= 0 || p.HealthRecheck <= 0, "failure_window, fast_failure, quarantine_suspect and health_recheck must be positive")
	bad(p.QuarantineConfirmed < p.QuarantineSuspect, "quarantine_confirmed must be at least quarantine_suspect")
	bad(p.FailureMinAttempts < 1, "failure_min_attempts must be at least 1")
	bad(p.FailureRate <= 0 || p.FailureRate > 1, "failure_rate must be in (0, 1]")
	bad(p.BlackHoleFailures < 1 || p.BlackHoleFailures > 16, "black_hole_failures must be 1..16")
	bad(p.SlowAttemptFactor <= 1 || p.SlowAttemptFactor > 100, "slow_attempt_factor must be over 1 (and at most 100)")
	bad(p.SlowAttemptFloor < 0, "slow_attempt_floor must not be negative")
	return errs
}

// validate checks the raft block.
func (r Raft) validate() []error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"heartbeat_timeout": r.HeartbeatTimeout, "election_timeout": r.ElectionTimeout,
		"leader_lease_timeout": r.LeaderLeaseTimeout, "commit_timeout": r.CommitTimeout,
		"snapshot_interval": r.SnapshotInterval, "apply_timeout": r.ApplyTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("raft.%s must be positive", name))
		}
	}
	if r.HeartbeatTimeout < 5*time.Millisecond {
		errs = append(errs, errors.New("raft.heartbeat_timeout must be at least 5ms"))
	}
	if r.LeaderLeaseTimeout > r.HeartbeatTimeout {
		errs = append(errs, errors.New("raft.leader_lease_timeout must not exceed raft.heartbeat_timeout"))
	}
	if r.MaxAppendEntries < 1 || r.MaxAppendEntries > 1024 {
		errs = append(errs, fmt.Errorf("raft.max_append_entries %d is outside 1..1024", r.MaxAppendEntries))
	}
	if r.SnapshotThreshold < 1 {
		errs = append(errs, errors.New("raft.snapshot_threshold must be at least 1"))
	}
	if r.SnapshotRetain < 1 {
		errs = append(errs, errors.New("raft.snapshot_retain must be at least 1"))
	}
	if r.LogStore != LogStoreWAL && r.LogStore != LogStoreBoltDB {
		errs = append(errs, fmt.Errorf("raft.log_store %q is neither %q nor %q", r.LogStore, LogStoreWAL, LogStoreBoltDB))
	}
	return errs
}

// validate checks the liveness block.
func (lv Liveness) validate() []error {
	var errs []error
	if lv.HeartbeatInterval <= 0 || lv.MaxHeartbeatInterval < lv.HeartbeatInterval {
		errs = append(errs, errors.New("liveness.heartbeat_interval must be positive and at most liveness.max_heartbeat_interval"))
	}
	if lv.SuspectAfter < 1 || lv.DownAfter <= lv.SuspectAfter {
		errs = append(errs, errors.New("liveness.suspect_after must be at least 1 and below liveness.down_after"))
	}
	if lv.LeaderGrace < 0 || lv.WakeTimeout <= 0 {
		errs = append(errs, errors.New("liveness.leader_grace must not be negative and liveness.wake_timeout must be positive"))
	}
	return errs
}

// joinSorted reports every problem of a configuration in one error, in
// a stable order (some are found by ranging over maps).
func joinSorted(errs []error) error {
	if err := check.JoinSorted(errs); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// DecodeGossipKey decodes a base64 gossip encryption key of 16, 24 or 32
// bytes (AES-128, -192 or -256).
func DecodeGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	switch len(k) {
	case 16, 24, 32:
		return k, nil
	}
	return nil, fmt.Errorf("gossip key is %d bytes; it must be 16, 24 or 32", len(k))
}
