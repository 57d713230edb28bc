// Package agent runs on edge nodes: it registers through any replica,
// keeps its session alive, watches its assignments with a blocking query,
// runs each attempt as a subprocess in its own process group under
// resource limits (a cgroup when it can, rlimits otherwise), keeps local
// logs, and reports fenced results. It talks to the servers only through
// the api client and spawns nothing but the tasks themselves and, run as
// `herd agent`, one lease guard: a small process that stops the tasks
// when the agent itself is stopped, hung or killed (guard_protocol.go).
package agent

import (
	"bufio"
	"errors"
	"fmt"
	"herd/internal/check"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"herd/api"
	"herd/config"
	"herd/internal/pki"
	"herd/spec"
)

// Config configures an agent.
type Config struct {
	ID           string
	Servers      []string // HTTP addresses of any replicas
	DataDir      string
	Address      string
	Labels       map[string]string
	Capabilities map[string][]string
	Resources    api.Resources // zero fields are filled from the machine
	Slots        int           // 0: one per CPU
	Weight       int

	HeartbeatInterval time.Duration // default 5s
	AssignmentWait    time.Duration // blocking query wait, default 30s
	KillGrace         time.Duration // SIGTERM to SIGKILL, default 3s
	WatchdogGrace     time.Duration // past the run timeout before an executor counts as hung, default 30s
	LogMaxBytes       int64         // per log file before rotation, default 10 MiB
	LogMaxFiles       int           // rotated files kept per attempt, default 3
	LogRetention      time.Duration // default 7 days
	// MinFreeDiskMB is the free space the data directory must keep for
	// attempts' working directories and logs; below it the node reports
	// the disk_full condition and takes no new attempt. Default 32.
	MinFreeDiskMB int64
	// Limits picks how resource limits are enforced: "auto" (cgroup v2,
	// then cgroup v1, then rlimits), "cgroup-v2", "cgroup-v1", "rlimit"
	// or "none".
	Limits string

	// GossipAddr is where the agent gossips (host:port); default: the
	// local address it uses to reach the servers, on a free port that is
	// kept across restarts.
	GossipAddr string
	// GossipKey is the pool's AES key, if it is encrypted.
	GossipKey []byte
	// HibernateAfter puts an idle agent to sleep: it stops polling for
	// assignments and keeps only gossip until the leader wakes it. 0 never.
	HibernateAfter time.Duration

	// GossipTune and GossipTransport let tests shrink memberlist's timings
	// and inject faults into its transport.
	GossipTune      func(*memberlist.Config)
	GossipTransport func(memberlist.Transport) memberlist.Transport

	// OnRun, when set, is told of every attempt's process once it and its
	// group are gone: when it was launched and when it was reaped (tests
	// check from these that no task ever ran on two nodes at once).
	OnRun func(RunRecord)

	// Clock is the agent's wall clock (nil: the machine's); tests set one
	// that is off. Nothing the agent sends the cluster carries its time:
	// the leader stamps every event with its own. Durations the agent
	// measures (run timeouts, heartbeat intervals) use monotonic time, and
	// it ages its logs and working directories by a clock that follows
	// this one but not its steps (internal/steady), so a clock set forward
	// on a board without a real-time clock does not delete them early.
	Clock func() time.Time

	// GuardPath is the herd binary the agent runs as its lease guard
	// (`herd agent-guard`, see guard_protocol.go), which stops the
	// attempts when the agent itself is stopped, hung or killed; empty:
	// none runs (an agent inside a test's process).
	GuardPath string

	Logger hclog.Logger
	// Transport, when set, carries every request to the servers (tests
	// cut it to simulate a partition).
	Transport http.RoundTripper
	// TLS names the agent's CA, certificate and key: the servers are
	// reached over HTTPS with the agent's certificate, whose identity
	// (agent/ID) lets it act for this node alone. Reloaded by ReloadTLS.
	TLS pki.Files
	// Insecure lets the agent talk to servers, or gossip, off loopback
	// without TLS.
	Insecure bool
	// Token is the node's ACL token secret, when the cluster enforces
	// ACLs and the agent has no certificate (or both are required).
	Token string

	// NoBench skips the benchmark: the node's profile then holds only
	// what the agent detects (cores, memory, free disk). RebenchInterval
	// is how often the node is measured again (default 6 h; negative:
	// only at registration and on request).
	NoBench         bool
	RebenchInterval time.Duration
	// Profile, when set, is reported as the node's measurements instead
	// of measuring it (herd dev's fleet of pretend machines on one
	// computer): the cluster judges the node by it as by a measured one.
	Profile *api.NodeProfile
	// Datasets are the data the node holds, by name: a file or a
	// directory, whose size is measured and re-measured every
	// DatasetRefresh (default a minute).
	Datasets       map[string]string
	DatasetRefresh time.Duration
	// DataAddr is where the agent serves the outputs it keeps to other
	// agents (host:port); default: the local address towards the
	// servers, on a free port.
	DataAddr string
	// HealthCheck is the site's health check, run through /bin/sh -c when
	// the cluster asks (a quarantine); empty: the built-in check.
	HealthCheck string

	// OCIRuntime picks the runtime of oci tasks: "auto" (crun, then runc:
	// the first that runs a probe container), "crun", "runc" or "none".
	// A node with one advertises the capability oci@1.
	OCIRuntime string
	// ImageCacheMB caps the unpacked images kept (default 4096);
	// InsecureRegistries are registry hosts reached over plain HTTP
	// (loopback ones always are).
	ImageCacheMB       int64
	InsecureRegistries []string
	// RegistryAuthFile is a Docker-style config.json whose "auths" give
	// the credentials presented to the registries it names (read at each
	// pull; credential helpers are not run); empty: anonymous pulls.
	RegistryAuthFile string
}

// DefaultImageCacheMB is the image cache's default cap.
const DefaultImageCacheMB = 4096

// RunRecord is one attempt's process as the agent ran it.
type RunRecord struct {
	Node, Task, Attempt string
	Started, Ended      time.Time // launched, and reaped with its group killed
}

// Defaults applied by WithDefaults.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultAssignmentWait    = 30 * time.Second
	DefaultLogRetention      = 7 * 24 * time.Hour
	DefaultMinFreeDiskMB     = 32
	DefaultRebenchInterval   = 6 * time.Hour
	DefaultDatasetRefresh    = time.Minute
)

// WithDefaults fills unset fields, reading the machine for resources.
func (c Config) WithDefaults() Config {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.AssignmentWait <= 0 {
		c.AssignmentWait = DefaultAssignmentWait
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 3 * time.Second
	}
	if c.WatchdogGrace <= 0 {
		c.WatchdogGrace = 30 * time.Second
	}
	if c.LogMaxBytes <= 0 {
		c.LogMaxBytes = 10 << 20
	}
	if c.LogMaxFiles <= 0 {
		c.LogMaxFiles = 3
	}
	if c.LogRetention <= 0 {
		c.LogRetention = DefaultLogRetention
	}
	if c.MinFreeDiskMB <= 0 {
		c.MinFreeDiskMB = DefaultMinFreeDiskMB
	}
	if c.Limits == "" {
		c.Limits = "auto"
	}
	if c.RebenchInterval == 0 {
		c.RebenchInterval = DefaultRebenchInterval
	}
	if c.DatasetRefresh <= 0 {
		c.DatasetRefresh = DefaultDatasetRefresh
	}
	if c.Capabilities == nil {
		c.Capabilities = map[string][]string{"exec": {"1"}}
	}
	if c.OCIRuntime == "" {
		c.OCIRuntime = "auto"
	}
	if c.ImageCacheMB == 0 {
		c.ImageCacheMB = DefaultImageCacheMB
	}
	if c.Resources.CPUMillis == 0 {
		c.Resources.CPUMillis = int64(runtime.NumCPU()) * 1000
	}
	if c.Resources.MemoryMB == 0 {
		c.Resources.MemoryMB = machineMemoryMB()
	}
	if c.Resources.DiskMB == 0 && c.DataDir != "" {
		c.Resources.DiskMB = freeDiskMB(c.DataDir)
	}
	if c.Slots == 0 {
		c.Slots = runtime.NumCPU()
	}
	if c.Address == "" {
		c.Address, _ = os.Hostname()
	}
	return c
}

// Validate reports every problem in the configuration.
func (c Config) Validate() error {
	var errs []error
	// What the agent declares of its node obeys the rules the cluster
	// checks its registration by.
	node := spec.Node{ID: c.ID, Labels: c.Labels, Capabilities: c.Capabilities, Resources: c.Resources, Slots: c.Slots, Weight: c.Weight}
	if err := node.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("at least one server address is required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	for name, path := range c.Datasets {
		if err := check.DatasetName(name); err != nil || path == "" {
			errs = append(errs, fmt.Errorf("dataset %q=%q: want NAME=PATH with a path, the name a dataset's (%v)", name, path, err))
		}
	}
	if err := c.TLS.Check(); err != nil {
		errs = append(errs, err)
	}
	if !c.TLS.Enabled() && !c.Insecure {
		for _, s := range c.Servers {
			if u, err := url.Parse(s); err == nil && u.Host != "" {
				s = u.Host
			}
			if !config.Loopback(s) {
				errs = append(errs, fmt.Errorf("server %s is off loopback, but the agent has no TLS certificate: give -tls-ca-file, -tls-cert-file and -tls-key-file, or -insecure to talk in the clear anyway", s))
				break
			}
		}
		if c.GossipAddr != "" && !config.Loopback(c.GossipAddr) {
			errs = append(errs, fmt.Errorf("gossip address %s is off loopback, but the agent has no TLS certificate: give the TLS files, or -insecure", c.GossipAddr))
		}
	}
	switch c.OCIRuntime {
	case "auto", "crun", "runc", "none":
	default:
		errs = append(errs, fmt.Errorf("oci runtime %q must be auto, crun, runc or none", c.OCIRuntime))
	}
	if c.ImageCacheMB < 0 {
		errs = append(errs, errors.New("image cache size must not be negative"))
	}
	if !slices.Contains(LimitMethods, c.Limits) {
		errs = append(errs, fmt.Errorf("limits %q must be one of %s", c.Limits, strings.Join(LimitMethods, ", ")))
	}
	return errors.Join(errs...)
}

// LimitMethods are the values of Config.Limits.
var LimitMethods = []string{"auto", "cgroup-v2", "cgroup-v1", "rlimit", "none"}

// machineMemoryMB reads MemTotal from /proc/meminfo (0 if unknown).
func machineMemoryMB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
