// Package config loads herd's configuration: built-in defaults, then an
// HCL file, then HERD_* environment variables, then command-line flags
// (applied by the caller), and validates the result with clear errors.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// Raft holds the consensus timings and log-compaction settings.
type Raft struct {
	// HeartbeatTimeout is how long a follower goes without hearing from the
	// leader before it stands for election. 1.5 s instead of raft's 1 s:
	// small boxes on flaky links miss a heartbeat now and then, and an
	// election costs more than a slightly slower failover.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before it
	// retries; equal to the heartbeat timeout, as raft recommends.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout is how long a leader keeps serving without
	// reaching a quorum before it steps down. Half the heartbeat timeout:
	// an isolated leader stops answering well before a new one is elected.
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
}

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
	// ProfileScale > 0 adds the profile score; RandomTopK > 1 picks among
	// the best K at random (seeded per leader term).
	ProfileScale int64
	RandomTopK   int
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
	// with it. 0 keeps finished tasks forever.
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
		RetryBase:         time.Second,
		RetryFactor:       2,
		RetryCap:          5 * time.Minute,
		// Agents poll assignments with a blocking query and start within
		// milliseconds; a minute covers a reconnect through another replica.
		ScheduleToStartTimeout: time.Minute,
		TaskRetention:          24 * time.Hour,
	}
}

// Liveness tunes how the leader turns gossip observations into node
// states (seed 003 §2.3: weak networks must not cause false "offline").
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

// DefaultLiveness: 5 s heartbeats stretched up to 15 s, SUSPECT after 2
// misses, DOWN after 5.
func DefaultLiveness() Liveness {
	return Liveness{
		HeartbeatInterval: 5 * time.Second, MaxHeartbeatInterval: 15 * time.Second,
		SuspectAfter: 2, DownAfter: 5, LeaderGrace: 30 * time.Second, WakeTimeout: 10 * time.Second,
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
}

// DefaultRaft returns the timings tuned for low-spec servers on weak links.
func DefaultRaft() Raft {
	return Raft{
		HeartbeatTimeout:   1500 * time.Millisecond,
		ElectionTimeout:    1500 * time.Millisecond,
		LeaderLeaseTimeout: 750 * time.Millisecond,
		CommitTimeout:      20 * time.Millisecond,
		MaxAppendEntries:   128,
		SnapshotInterval:   120 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotRetain:     2,
		ApplyTimeout:       10 * time.Second,
	}
}

// DefaultServer returns a server configuration with every default set.
func DefaultServer() Server {
	return Server{
		HTTPAddr:  "127.0.0.1:4646",
		RaftAddr:  "127.0.0.1:4647",
		LogLevel:  "info",
		Raft:      DefaultRaft(),
		Scheduler: DefaultScheduler(),
		Liveness:  DefaultLiveness(),
	}
}

// fileServer is the HCL layout of a server config file. Pointers tell
// "absent" from "zero" so that only what the file says is applied.
type fileServer struct {
	ID              *string        `hcl:"id,optional"`
	DataDir         *string        `hcl:"data_dir,optional"`
	HTTPAddr        *string        `hcl:"http_addr,optional"`
	RaftAddr        *string        `hcl:"raft_addr,optional"`
	HTTPAdvertise   *string        `hcl:"http_advertise,optional"`
	RaftAdvertise   *string        `hcl:"raft_advertise,optional"`
	Bootstrap       *bool          `hcl:"bootstrap,optional"`
	BootstrapExpect *int           `hcl:"bootstrap_expect,optional"`
	Join            *[]string      `hcl:"join,optional"`
	LogLevel        *string        `hcl:"log_level,optional"`
	Raft            *fileRaft      `hcl:"raft,block"`
	Scheduler       *fileScheduler `hcl:"scheduler,block"`
	Liveness        *fileLiveness  `hcl:"liveness,block"`
	GossipAddr      *string        `hcl:"gossip_addr,optional"`
	GossipAdvertise *string        `hcl:"gossip_advertise,optional"`
	GossipKey       *string        `hcl:"gossip_key,optional"`
	EnableDebug     *bool          `hcl:"enable_debug,optional"`
	MemoryLimitMiB  *int           `hcl:"memory_limit_mib,optional"`
}

type fileLiveness struct {
	HeartbeatInterval    *string `hcl:"heartbeat_interval,optional"`
	MaxHeartbeatInterval *string `hcl:"max_heartbeat_interval,optional"`
	SuspectAfter         *int    `hcl:"suspect_after,optional"`
	DownAfter            *int    `hcl:"down_after,optional"`
	LeaderGrace          *string `hcl:"leader_grace,optional"`
	WakeTimeout          *string `hcl:"wake_timeout,optional"`
}

type fileScheduler struct {
	HeartbeatTTL      *string  `hcl:"heartbeat_ttl,optional"`
	BatchSize         *int     `hcl:"batch_size,optional"`
	MaxPassPlacements *int     `hcl:"max_pass_placements,optional"`
	ExplainInterval   *string  `hcl:"explain_interval,optional"`
	AgingGrace        *string  `hcl:"aging_grace,optional"`
	AgingInterval     *string  `hcl:"aging_interval,optional"`
	AgingCap          *int     `hcl:"aging_cap,optional"`
	FailurePenalty    *int     `hcl:"failure_penalty,optional"`
	ProfileScale      *int64   `hcl:"profile_scale,optional"`
	RandomTopK        *int     `hcl:"random_top_k,optional"`
	RetryBase         *string  `hcl:"retry_base,optional"`
	RetryFactor       *float64 `hcl:"retry_factor,optional"`
	RetryCap          *string  `hcl:"retry_cap,optional"`
	ScheduleToStart   *string  `hcl:"schedule_to_start_timeout,optional"`
	TaskRetention     *string  `hcl:"task_retention,optional"`
}

type fileRaft struct {
	HeartbeatTimeout   *string `hcl:"heartbeat_timeout,optional"`
	ElectionTimeout    *string `hcl:"election_timeout,optional"`
	LeaderLeaseTimeout *string `hcl:"leader_lease_timeout,optional"`
	CommitTimeout      *string `hcl:"commit_timeout,optional"`
	MaxAppendEntries   *int    `hcl:"max_append_entries,optional"`
	SnapshotInterval   *string `hcl:"snapshot_interval,optional"`
	SnapshotThreshold  *int64  `hcl:"snapshot_threshold,optional"`
	TrailingLogs       *int64  `hcl:"trailing_logs,optional"`
	SnapshotRetain     *int    `hcl:"snapshot_retain,optional"`
	ApplyTimeout       *string `hcl:"apply_timeout,optional"`
}

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
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return fmt.Errorf("parse config: %s", diags.Error())
	}
	var fs fileServer
	if diags := gohcl.DecodeBody(file.Body, nil, &fs); diags.HasErrors() {
		return fmt.Errorf("decode config: %s", diags.Error())
	}
	setString(&c.ID, fs.ID)
	setString(&c.DataDir, fs.DataDir)
	setString(&c.HTTPAddr, fs.HTTPAddr)
	setString(&c.RaftAddr, fs.RaftAddr)
	setString(&c.HTTPAdvertise, fs.HTTPAdvertise)
	setString(&c.RaftAdvertise, fs.RaftAdvertise)
	setString(&c.LogLevel, fs.LogLevel)
	setString(&c.GossipAddr, fs.GossipAddr)
	setString(&c.GossipAdvertise, fs.GossipAdvertise)
	setString(&c.GossipKey, fs.GossipKey)
	if fs.EnableDebug != nil {
		c.EnableDebug = *fs.EnableDebug
	}
	if fs.MemoryLimitMiB != nil {
		c.MemoryLimitMiB = *fs.MemoryLimitMiB
	}
	if l := fs.Liveness; l != nil {
		for _, d := range []struct {
			name string
			src  *string
			dst  *time.Duration
		}{
			{"heartbeat_interval", l.HeartbeatInterval, &c.Liveness.HeartbeatInterval},
			{"max_heartbeat_interval", l.MaxHeartbeatInterval, &c.Liveness.MaxHeartbeatInterval},
			{"leader_grace", l.LeaderGrace, &c.Liveness.LeaderGrace},
			{"wake_timeout", l.WakeTimeout, &c.Liveness.WakeTimeout},
		} {
			if d.src == nil {
				continue
			}
			v, err := time.ParseDuration(*d.src)
			if err != nil {
				return fmt.Errorf("%s: liveness.%s: %w", filename, d.name, err)
			}
			*d.dst = v
		}
		setInt(&c.Liveness.SuspectAfter, l.SuspectAfter)
		setInt(&c.Liveness.DownAfter, l.DownAfter)
	}
	if fs.Bootstrap != nil {
		c.Bootstrap = *fs.Bootstrap
	}
	if fs.BootstrapExpect != nil {
		c.BootstrapExpect = *fs.BootstrapExpect
	}
	if fs.Join != nil {
		c.Join = append([]string(nil), (*fs.Join)...)
	}
	if r := fs.Raft; r != nil {
		for _, d := range []struct {
			name string
			src  *string
			dst  *time.Duration
		}{
			{"heartbeat_timeout", r.HeartbeatTimeout, &c.Raft.HeartbeatTimeout},
			{"election_timeout", r.ElectionTimeout, &c.Raft.ElectionTimeout},
			{"leader_lease_timeout", r.LeaderLeaseTimeout, &c.Raft.LeaderLeaseTimeout},
			{"commit_timeout", r.CommitTimeout, &c.Raft.CommitTimeout},
			{"snapshot_interval", r.SnapshotInterval, &c.Raft.SnapshotInterval},
			{"apply_timeout", r.ApplyTimeout, &c.Raft.ApplyTimeout},
		} {
			if d.src == nil {
				continue
			}
			v, err := time.ParseDuration(*d.src)
			if err != nil {
				return fmt.Errorf("%s: raft.%s: %w", filename, d.name, err)
			}
			*d.dst = v
		}
		if r.MaxAppendEntries != nil {
			c.Raft.MaxAppendEntries = *r.MaxAppendEntries
		}
		if r.SnapshotThreshold != nil {
			if *r.SnapshotThreshold < 0 {
				return fmt.Errorf("%s: raft.snapshot_threshold must not be negative", filename)
			}
			c.Raft.SnapshotThreshold = uint64(*r.SnapshotThreshold)
		}
		if r.TrailingLogs != nil {
			if *r.TrailingLogs < 0 {
				return fmt.Errorf("%s: raft.trailing_logs must not be negative", filename)
			}
			c.Raft.TrailingLogs = uint64(*r.TrailingLogs)
		}
		if r.SnapshotRetain != nil {
			c.Raft.SnapshotRetain = *r.SnapshotRetain
		}
	}
	if sc := fs.Scheduler; sc != nil {
		for _, d := range []struct {
			name string
			src  *string
			dst  *time.Duration
		}{
			{"heartbeat_ttl", sc.HeartbeatTTL, &c.Scheduler.HeartbeatTTL},
			{"explain_interval", sc.ExplainInterval, &c.Scheduler.ExplainInterval},
			{"aging_grace", sc.AgingGrace, &c.Scheduler.AgingGrace},
			{"aging_interval", sc.AgingInterval, &c.Scheduler.AgingInterval},
			{"retry_base", sc.RetryBase, &c.Scheduler.RetryBase},
			{"retry_cap", sc.RetryCap, &c.Scheduler.RetryCap},
			{"schedule_to_start_timeout", sc.ScheduleToStart, &c.Scheduler.ScheduleToStartTimeout},
			{"task_retention", sc.TaskRetention, &c.Scheduler.TaskRetention},
		} {
			if d.src == nil {
				continue
			}
			v, err := time.ParseDuration(*d.src)
			if err != nil {
				return fmt.Errorf("%s: scheduler.%s: %w", filename, d.name, err)
			}
			*d.dst = v
		}
		setInt(&c.Scheduler.BatchSize, sc.BatchSize)
		setInt(&c.Scheduler.MaxPassPlacements, sc.MaxPassPlacements)
		setInt(&c.Scheduler.AgingCap, sc.AgingCap)
		setInt(&c.Scheduler.FailurePenalty, sc.FailurePenalty)
		setInt(&c.Scheduler.RandomTopK, sc.RandomTopK)
		if sc.ProfileScale != nil {
			c.Scheduler.ProfileScale = *sc.ProfileScale
		}
		if sc.RetryFactor != nil {
			c.Scheduler.RetryFactor = *sc.RetryFactor
		}
	}
	return nil
}

func setInt(dst *int, src *int) {
	if src != nil {
		*dst = *src
	}
}

func setString(dst *string, src *string) {
	if src != nil {
		*dst = *src
	}
}

// ApplyServerEnv applies HERD_* variables found through lookup on top of c.
func ApplyServerEnv(c *Server, lookup func(string) (string, bool)) error {
	for name, dst := range map[string]*string{
		"HERD_ID": &c.ID, "HERD_DATA_DIR": &c.DataDir, "HERD_HTTP_ADDR": &c.HTTPAddr,
		"HERD_RAFT_ADDR": &c.RaftAddr, "HERD_HTTP_ADVERTISE": &c.HTTPAdvertise,
		"HERD_RAFT_ADVERTISE": &c.RaftAdvertise, "HERD_LOG_LEVEL": &c.LogLevel,
		"HERD_GOSSIP_ADDR": &c.GossipAddr, "HERD_GOSSIP_ADVERTISE": &c.GossipAdvertise, "HERD_GOSSIP_KEY": &c.GossipKey,
	} {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	if v, ok := lookup("HERD_BOOTSTRAP"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("HERD_BOOTSTRAP: %w", err)
		}
		c.Bootstrap = b
	}
	if v, ok := lookup("HERD_BOOTSTRAP_EXPECT"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("HERD_BOOTSTRAP_EXPECT: %w", err)
		}
		c.BootstrapExpect = n
	}
	if v, ok := lookup("HERD_JOIN"); ok {
		c.Join = SplitList(v)
	}
	if v, ok := lookup("HERD_MEMORY_LIMIT_MIB"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("HERD_MEMORY_LIMIT_MIB: %w", err)
		}
		c.MemoryLimitMiB = n
	}
	return nil
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

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidID reports whether s may name a server or node.
func ValidID(s string) bool { return idPattern.MatchString(s) }

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
	if c.Bootstrap && c.BootstrapExpect > 0 {
		errs = append(errs, errors.New("bootstrap and bootstrap_expect are mutually exclusive"))
	}
	if c.MemoryLimitMiB < 0 || (c.MemoryLimitMiB > 0 && c.MemoryLimitMiB < 32) {
		errs = append(errs, fmt.Errorf("memory_limit_mib %d must be 0 (no limit) or at least 32", c.MemoryLimitMiB))
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
	r := c.Raft
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
	lv := c.Liveness
	if lv.HeartbeatInterval <= 0 || lv.MaxHeartbeatInterval < lv.HeartbeatInterval {
		errs = append(errs, errors.New("liveness.heartbeat_interval must be positive and at most liveness.max_heartbeat_interval"))
	}
	if lv.SuspectAfter < 1 || lv.DownAfter <= lv.SuspectAfter {
		errs = append(errs, errors.New("liveness.suspect_after must be at least 1 and below liveness.down_after"))
	}
	if lv.LeaderGrace < 0 || lv.WakeTimeout <= 0 {
		errs = append(errs, errors.New("liveness.leader_grace must not be negative and liveness.wake_timeout must be positive"))
	}
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
	sc := c.Scheduler
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
	if sc.RetryFactor < 1 || sc.RetryFactor > 100 {
		errs = append(errs, fmt.Errorf("scheduler.retry_factor %v is outside 1..100", sc.RetryFactor))
	}
	if sc.RetryCap < sc.RetryBase {
		errs = append(errs, errors.New("scheduler.retry_cap must be at least scheduler.retry_base"))
	}
	return joinSorted(errs)
}

// joinSorted joins errors in a stable order (some come from map loops).
func joinSorted(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	return errors.New("invalid configuration: " + strings.Join(msgs, "; "))
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
