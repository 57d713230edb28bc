package api

import (
	"errors"
	"fmt"
	"hash/fnv"
	"herd/internal/version"
	"io"
	"net/http"
	"strconv"
	"time"

	"herd/internal/check"
	"herd/spec"
)

// Resources, TaskSpec, JobSpec, StageSpec, Schedule and NodeSpec are what
// users and agents declare; package spec owns them with their defaults
// and rules.
type (
	Resources = spec.Resources
	TaskSpec  = spec.Task
	JobSpec   = spec.Job
	StageSpec = spec.Stage
	Schedule  = spec.Schedule
	NodeSpec  = spec.Node
)

// ImageCache is what a node's agent tells of its container runtime and
// image cache (GET /v1/nodes/{id}/images).
type ImageCache struct {
	// Runtime is the OCI runtime the agent found working ("runc 1.1.5"),
	// or empty with RuntimeProblem saying why there is none.
	Runtime        string        `json:"runtime,omitempty"`
	RuntimeProblem string        `json:"runtime_problem,omitempty"`
	UsedBytes      int64         `json:"used_bytes"`
	MaxBytes       int64         `json:"max_bytes"`
	Pulls          int64         `json:"pulls"`
	Hits           int64         `json:"hits"`
	Failures       int64         `json:"failures"`
	Images         []CachedImage `json:"images"`
}

// CachedImage is one image in a node's cache.
type CachedImage struct {
	// Ref is the name the image was pulled or imported by; empty when
	// that name now points at another image.
	Ref string `json:"ref"`
	// Names are every reference that finds the image in the cache.
	Names    []string  `json:"names,omitempty"`
	Digest   string    `json:"digest"`
	Bytes    int64     `json:"bytes"`
	Layers   int       `json:"layers"`
	LastUsed time.Time `json:"last_used"`
	InUse    int       `json:"in_use"`
}

// ImagePullRequest asks a node's agent to pull an image from its
// registry into its cache (POST /v1/nodes/{id}/images/pull).
type ImagePullRequest struct {
	Ref string `json:"ref"`
}

// ImageLoaded is one image a pull or an import put into a node's cache.
type ImageLoaded struct {
	Node string `json:"node"`
	// Names are the references that now find the image on the node.
	Names  []string `json:"names"`
	Digest string   `json:"digest"`
	// Pinned is the reference with its digest (NAME@sha256:…), the form
	// a task names to run exactly this image.
	Pinned string `json:"pinned,omitempty"`
	Bytes  int64  `json:"bytes"`
	Layers int    `json:"layers"`
}

// ImageLoad answers a pull or an import: the images the node now holds.
type ImageLoad struct {
	Images []ImageLoaded `json:"images"`
}

// InputSource says where an attempt's input is held: the dataset, its
// node, and the address the node's agent serves datasets at.
type InputSource struct {
	Dataset string `json:"dataset"`
	NodeID  string `json:"node_id"`
	Address string `json:"address"`
}

// Task is a task as the API shows it.
type Task struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	State          string          `json:"state"`
	Spec           TaskSpec        `json:"spec"`
	SubmittedAt    time.Time       `json:"submitted_at"`
	CreateIndex    uint64          `json:"create_index"`
	ModifyIndex    uint64          `json:"modify_index"`
	CurrentAttempt string          `json:"current_attempt,omitempty"`
	Attempts       []Attempt       `json:"attempts"`
	Timeline       []TimelineEvent `json:"timeline"`
}

// Attempt is one try of a task on one node.
type Attempt struct {
	ID           string    `json:"id"`
	TaskID       string    `json:"task_id"`
	Number       int       `json:"number"`
	NodeID       string    `json:"node_id,omitempty"`
	State        string    `json:"state"`
	LeaseVersion uint64    `json:"lease_version"`
	ReservedAt   time.Time `json:"reserved_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	ExitCode     int       `json:"exit_code"`
	OutputTail   string    `json:"output_tail,omitempty"`
	// Error is why the attempt ended as it did, the reason its task's
	// timeline gives ("killed: memory limit 32 MB reached"); empty for a
	// success and a plain non-zero exit.
	Error string `json:"error,omitempty"`
}

// TimelineEvent is one milestone of a task with its reason.
type TimelineEvent struct {
	Index   uint64    `json:"index"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

// SubmitResponse acknowledges a committed submit.
type SubmitResponse struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Index uint64 `json:"index"`
}

// MaxBatchTasks bounds the tasks of one batch submit (and so of one Raft
// entry); a larger set is sent as several batches.
const MaxBatchTasks = 1000

// BatchSubmitRequest submits several tasks at once: they are validated
// together (one invalid spec refuses the whole request, nothing is
// submitted) and committed in one Raft entry.
type BatchSubmitRequest struct {
	Tasks []TaskSpec `json:"tasks"`
}

// BatchSubmitResponse answers a batch in request order. Created is false
// for a task whose idempotency key matched an existing task (its id and
// state are that task's).
type BatchSubmitResponse struct {
	Tasks []BatchSubmitResult `json:"tasks"`
	Index uint64              `json:"index"`
}

// BatchSubmitResult is one task of a batch submit.
type BatchSubmitResult struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Created bool   `json:"created"`
}

// TaskList is one page of tasks; Next is the cursor for the following page.
type TaskList struct {
	Tasks []Task `json:"tasks"`
	Next  string `json:"next,omitempty"`
}

// TaskQuery selects tasks to list.
type TaskQuery struct {
	State string
	After string
	Limit int
}

// LeaderInfo identifies the current leader.
type LeaderInfo struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
}

// RaftServer is one member of the Raft configuration.
type RaftServer struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	Voter       bool   `json:"voter"`
	Leader      bool   `json:"leader"`
	// CommandForms is the command forms the server recorded that it
	// reads (0: not recorded yet).
	CommandForms int `json:"command_forms"`
	// Version is the server's build, as it recorded it ("" until it has).
	Version string `json:"version,omitempty"`
}

// SchedulerStatus is the leader's scheduling loop as its process counted
// it (counters span every leadership of that process): passes, the
// waiting tasks they looked at, placements committed and the Raft
// entries that carried them, placements the FSM refused by reason code,
// and the pending queue as of the last pass.
type SchedulerStatus struct {
	ID           string            `json:"id"`
	Passes       uint64            `json:"passes"`
	Scanned      uint64            `json:"scanned"`
	Placements   uint64            `json:"placements"`
	Entries      uint64            `json:"entries"`
	Rejections   map[string]uint64 `json:"rejections"`
	QueueDepth   int64             `json:"queue_depth"`
	OldestWaitMs int64             `json:"oldest_wait_ms"`
}

// StateCheck is one replica's answer to the state's invariant check
// (GET /v1/operator/debug/check-state): the FSM invariants checked over
// the replica's applied state at Index. It reports and never repairs.
type StateCheck struct {
	Server     string   `json:"server"`
	Index      uint64   `json:"index"`
	Tasks      int      `json:"tasks"`
	Attempts   int      `json:"attempts"`
	Nodes      int      `json:"nodes"`
	OK         bool     `json:"ok"`
	Violations []string `json:"violations,omitempty"`
	// TookMillis is how long the check took, in milliseconds.
	TookMillis int64 `json:"took_ms"`
}

// RaftConfiguration is the cluster membership as Raft holds it.
type RaftConfiguration struct {
	Index   uint64       `json:"index"`
	Servers []RaftServer `json:"servers"`
}

// JoinRequest asks the leader to add a server as a voter.
type JoinRequest struct {
	ID            string `json:"id"`
	RaftAddress   string `json:"raft_address"`
	HTTPAddress   string `json:"http_address"`
	GossipAddress string `json:"gossip_address,omitempty"`
	// CommandForms is the Raft command forms the server reads; the
	// leader refuses a server that reads older forms than the cluster's.
	CommandForms int `json:"command_forms,omitempty"`
	// Version is the server's build.
	Version string `json:"version,omitempty"`
	// UpdateOnly asks only that a member's record be brought up to date:
	// a server the Raft configuration does not hold (an operator removed
	// it) is refused with 404 rather than added back.
	UpdateOnly bool `json:"update_only,omitempty"`
}

// SelfInfo describes the replica answering; servers use it to discover
// each other before bootstrapping.
type SelfInfo struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	HTTPAddress string `json:"http_address"`
	// Bootstrapped: this replica already has Raft state (it is or was part
	// of a cluster) and must not take part in a new bootstrap.
	Bootstrapped bool   `json:"bootstrapped"`
	Leader       string `json:"leader,omitempty"`
	State        string `json:"state"`
	// TLS and ACL say how the replica is secured; Insecure, that it runs
	// open off loopback because it was told to.
	TLS      bool `json:"tls"`
	ACL      bool `json:"acl"`
	Insecure bool `json:"insecure,omitempty"`
	// Version is the replica's build: version, commit, build date, Go.
	Version version.Info `json:"version"`
}

// ErrorResponse is the body of every error answer. Code, when present,
// is a stable machine-readable reason (e.g. "stale_result").
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// CodedError attaches a machine-readable code to an error; the HTTP layer
// puts it in the answer's "code" field.
type CodedError struct {
	Code string
	Err  error
}

func (e *CodedError) Error() string { return e.Err.Error() }
func (e *CodedError) Unwrap() error { return e.Err }

// Codes on 503 answers tell a client whether its write may have happened:
// CodeNotApplied means the request was refused before anything was
// proposed (safe to retry without an idempotency key); CodeOutcomeUnknown
// means leadership was lost after the entry went out, so it may still
// commit (retry with the same idempotency key).
const (
	CodeNotApplied     = "not_applied"
	CodeOutcomeUnknown = "outcome_unknown"
)

// Sentinel errors a Backend wraps so the HTTP layer can pick a status.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNotFound   = errors.New("not found")
	ErrConflict   = errors.New("conflict")
	ErrNoLeader   = errors.New("no cluster leader")
	ErrNotLeader  = errors.New("not the leader")
	ErrTimeout    = errors.New("timed out")
	// ErrUnavailable: the replica cannot serve the request now (its disk
	// is full, say); another replica, or the same one later, may.
	ErrUnavailable = errors.New("unavailable")
)

// StatusError is an error answer from the API, as the client sees it.
type StatusError struct {
	Code    int
	Message string
	Reason  string // the answer's "code" field, if any
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Code)
}

// Is lets callers match a StatusError against the sentinel errors.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == http.StatusBadRequest
	case ErrNotFound:
		return e.Code == http.StatusNotFound
	case ErrConflict:
		return e.Code == http.StatusConflict
	case ErrNoLeader, ErrNotLeader:
		return e.Code == http.StatusServiceUnavailable
	case ErrTimeout:
		return e.Code == http.StatusGatewayTimeout
	}
	return false
}

// ValidID reports whether s is acceptable as a task, node or server id.
func ValidID(s string) bool { return check.ID(s) }

// ValidRef reports whether s may name a job or a task: an id, a periodic
// run's id (job@slot), or a stage instance's task id made from either.
func ValidRef(s string) bool { return check.Ref(s) }

// NodeRegistration is what an agent (or an operator) registers.
type NodeRegistration struct {
	// NodeSpec is what the agent declares of its node (its fields are
	// the registration's own in JSON).
	NodeSpec
	Address string `json:"address,omitempty"`
	// Version is the agent's build.
	Version string `json:"version,omitempty"`
	// Token, when set, makes the registration idempotent: the same token
	// again returns the session it started instead of a new one.
	Token string `json:"token,omitempty"`
	// Profile is what the agent measured of its node (nil: keep the last
	// one the cluster has); Datasets the data it holds, and DataAddr
	// where it serves them to other agents.
	Profile  *NodeProfile `json:"profile,omitempty"`
	Datasets []Dataset    `json:"datasets,omitempty"`
	DataAddr string       `json:"data_addr,omitempty"`
}

// NodeProfile is what an agent measured of its node: single-core compute
// (MB/s of SHA-256), memory bandwidth, the fsync latency of its data
// directory, and what it detected. MeasuredAt is the cluster's time.
type NodeProfile struct {
	CPUScore    int64     `json:"cpu_score"`
	MemoryMBps  int64     `json:"memory_mbps"`
	FsyncMicros int64     `json:"fsync_us"`
	Cores       int       `json:"cores"`
	MemoryMB    int64     `json:"memory_mb"`
	DiskFreeMB  int64     `json:"disk_free_mb"`
	Benchmarked bool      `json:"benchmarked"`
	BenchMillis int64     `json:"bench_ms,omitempty"`
	MeasuredAt  time.Time `json:"measured_at,omitzero"`
	// Rounds is how many rounds of samples were taken: each figure is the
	// median of its last round's samples, and its spread their (max - min)
	// / median in percent; a round whose spread is high is measured again.
	Rounds          int   `json:"rounds,omitempty"`
	CPUSpreadPct    int64 `json:"cpu_spread_pct,omitempty"`
	MemorySpreadPct int64 `json:"memory_spread_pct,omitempty"`
	// The link to the servers: the median round trip of an empty probe,
	// and the throughput of a 1 MiB one (0: not measured).
	RTTMicros   int64 `json:"rtt_us,omitempty"`
	NetworkMBps int64 `json:"network_mbps,omitempty"`
}

// Dataset is named data a node holds.
type Dataset struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// NodeProfileReport carries a node's new measurement (a rebench).
type NodeProfileReport struct {
	SessionGeneration uint64      `json:"session_generation"`
	Profile           NodeProfile `json:"profile"`
}

// NodeDatasetsReport replaces the datasets a node holds.
type NodeDatasetsReport struct {
	SessionGeneration uint64    `json:"session_generation"`
	Datasets          []Dataset `json:"datasets"`
}

// NodeTierRequest pins a node's tier ("L1", "L2", "L3") or lets it follow
// profile and history again ("auto").
type NodeTierRequest struct {
	Tier string `json:"tier"`
}

// HealthCheckReport is a node's answer to health check Seq.
type HealthCheckReport struct {
	Seq    uint64 `json:"seq"`
	Passed bool   `json:"passed"`
	Output string `json:"output,omitempty"`
}

// NodeTier is a node's tier and how it got there.
type NodeTier struct {
	Tier      string    `json:"tier"`
	Base      string    `json:"base"`
	Pinned    bool      `json:"pinned,omitempty"`
	Demotions int       `json:"demotions,omitempty"`
	ChangedAt time.Time `json:"changed_at,omitzero"`
}

// Quarantine is why a node takes no new work for now, and until when.
type Quarantine struct {
	Level       string    `json:"level"`
	Class       string    `json:"class"`
	Reason      string    `json:"reason"`
	Since       time.Time `json:"since"`
	Until       time.Time `json:"until"`
	CheckFailed bool      `json:"check_failed,omitempty"`
	Tasks       []string  `json:"tasks,omitempty"`
	Confirmed   int       `json:"confirmed,omitempty"`
}

// HealthCheck is the check asked of a node and its last answer.
type HealthCheck struct {
	Requested uint64    `json:"requested,omitempty"`
	Answered  uint64    `json:"answered,omitempty"`
	Passed    bool      `json:"passed"`
	Output    string    `json:"output,omitempty"`
	At        time.Time `json:"at,omitzero"`
	Why       string    `json:"why,omitempty"`
}

// ClassHistory is a node's record for one task class.
type ClassHistory struct {
	Class               string  `json:"class"`
	Runs                int64   `json:"runs"`
	Failures            int64   `json:"failures"`
	EWMAMillis          int64   `json:"ewma_ms"`
	FleetMedianMillis   int64   `json:"fleet_median_ms,omitempty"`
	RecentMillis        []int64 `json:"recent_ms,omitempty"`
	ConsecutiveFailures int     `json:"consecutive_failures,omitempty"`
	FastStreak          int     `json:"fast_streak,omitempty"`
}

// NodeHealth is the health the scheduler weighs: the online ratio over
// the last day and the failures, within the failure window, of work that
// succeeds elsewhere.
type NodeHealth struct {
	Score       float64 `json:"score"`
	OnlineRatio float64 `json:"online_ratio"`
	Failures    int     `json:"failures"`
	Results     int     `json:"results"`
}

// RegisterResponse carries the node's new session generation: every
// registration starts a new session, and older sessions' reports are
// refused.
type RegisterResponse struct {
	NodeID            string `json:"node_id"`
	SessionGeneration uint64 `json:"session_generation"`
	Index             uint64 `json:"index"`
	// LeaseMs is how long the node's attempts are its from the moment the
	// agent sent the request (see GossipLeaseAckMsg).
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// KeyringIndex is the gossip keyring's index: an agent running
	// another fetches it.
	KeyringIndex uint64 `json:"keyring_index,omitempty"`
}

// Node is a worker node as the API shows it.
type Node struct {
	// What the cluster knows of how the node performs (see NodeProfile,
	// NodeTier, Quarantine, HealthCheck, ClassHistory).
	Profile     *NodeProfile   `json:"profile,omitempty"`
	Datasets    []Dataset      `json:"datasets,omitempty"`
	Tier        NodeTier       `json:"tier"`
	Health      NodeHealth     `json:"health"`
	Quarantine  *Quarantine    `json:"quarantine,omitempty"`
	HealthCheck *HealthCheck   `json:"health_check,omitempty"`
	History     []ClassHistory `json:"history,omitempty"`

	ID                string              `json:"id"`
	Address           string              `json:"address,omitempty"`
	Version           string              `json:"version,omitempty"` // the agent's build, as it registered
	Labels            map[string]string   `json:"labels"`
	Capabilities      map[string][]string `json:"capabilities"`
	Management        string              `json:"management"`
	Liveness          string              `json:"liveness"`
	Scheduling        string              `json:"scheduling"`
	Resources         Resources           `json:"resources"`
	Reserved          Resources           `json:"reserved"`
	Free              Resources           `json:"free"`
	Slots             int                 `json:"slots"`
	RunningAttempts   int                 `json:"running_attempts"`
	Weight            int                 `json:"weight"`
	SessionGeneration uint64              `json:"session_generation"`
	RegisteredAt      time.Time           `json:"registered_at"`
	LastHeartbeat     time.Time           `json:"last_heartbeat"`
	CreateIndex       uint64              `json:"create_index"`
	ModifyIndex       uint64              `json:"modify_index"`
	// Conditions are the problems the node's agent reports (a full
	// disk); while any stands, nothing new is placed on the node.
	Conditions []NodeCondition `json:"conditions,omitempty"`
	// Observation is the answering replica's live view of the node.
	Observation NodeObservation `json:"observation"`
	// Events is the node's recent history (registrations, verdicts with
	// the observation behind each, drains).
	Events   []TimelineEvent `json:"events,omitempty"`
	Attempts []Attempt       `json:"attempts,omitempty"`
}

// LeaseCheck is an agent's answer to a task asking whether its attempt
// is still current (GET /v1/lease on the agent's socket): 200 and
// Current, 409 and why not, or 503 when the agent cannot tell.
type LeaseCheck struct {
	Current bool   `json:"current"`
	Attempt string `json:"attempt,omitempty"`
	Lease   uint64 `json:"lease,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// NodeCondition is one problem a node's agent reports.
type NodeCondition struct {
	Type    string    `json:"type"` // e.g. ConditionDiskFull
	Message string    `json:"message"`
	Since   time.Time `json:"since,omitzero"` // when the cluster first heard of it (set by the cluster)
}

// ConditionDiskFull: the agent's data directory has too little space (or
// too few inodes) left for attempts' working directories and logs.
const ConditionDiskFull = "disk_full"

// NodeConditionsRequest replaces the conditions a node's agent reports,
// for its current session; an empty list says nothing is wrong.
type NodeConditionsRequest struct {
	SessionGeneration uint64          `json:"session_generation"`
	Conditions        []NodeCondition `json:"conditions"`
	// Notes are what the agent did on its own that operators should see
	// in the node's events (it stopped attempts when its lease ran out).
	Notes []string `json:"notes,omitempty"`
}

// DrainRequest turns draining on or off.
type DrainRequest struct {
	Enable bool `json:"enable"`
}

// EligibilityRequest marks a node eligible or ineligible for new work.
type EligibilityRequest struct {
	Eligible bool `json:"eligible"`
}

// HeartbeatRequest keeps a node's session alive.
type HeartbeatRequest struct {
	SessionGeneration uint64 `json:"session_generation"`
	// KeyringIndex is the gossip keyring the agent runs (0: its
	// configured key).
	KeyringIndex uint64 `json:"keyring_index,omitempty"`
}

// ExplainRequest is a what-if: a task spec that is not submitted, plus
// optional overrides of the scheduler's settings.
type ExplainRequest struct {
	TaskSpec
	HeartbeatTTLSeconds *int64 `json:"heartbeat_ttl_seconds,omitempty"`
}

// Explanation answers "why is this task waiting", node by node.
type Explanation struct {
	Total    int               `json:"total"`
	Eligible int               `json:"eligible"`
	Summary  string            `json:"summary"`
	Nodes    []NodeExplanation `json:"nodes"`
}

// NodeExplanation is one node's verdict for a task.
type NodeExplanation struct {
	NodeID   string   `json:"node_id"`
	Eligible bool     `json:"eligible"`
	Reasons  []string `json:"reasons"`
	Codes    []string `json:"codes"`
	Score    *int64   `json:"score"`
	// Tier is the node's tier; Parts, for an eligible node, its score
	// taken apart.
	Tier  string      `json:"tier,omitempty"`
	Parts *ScoreParts `json:"parts,omitempty"`
}

// ScoreParts is a node's score taken apart: the reference formula's
// points, the profile's, and the profile's parts (each 0..1). Locality
// applies only to a task with inputs: Inputs is empty, and Locality 0
// and not weighed, for one without.
type ScoreParts struct {
	Reference int64   `json:"reference"`
	Profile   int64   `json:"profile"`
	Capacity  float64 `json:"capacity"`
	Health    float64 `json:"health"`
	Locality  float64 `json:"locality"`
	History   float64 `json:"history"`
	Inputs    string  `json:"inputs,omitempty"`
}

// Limits on what an attempt report may carry: Raft never stores full logs.
const (
	MaxOutputTail = 64 << 10
	MaxErrorText  = 4 << 10
)

// AttemptStartRequest reports that an attempt's process is starting.
type AttemptStartRequest struct {
	LeaseVersion uint64 `json:"lease_version"`
	// RunningMs, for an attempt its agent started before reporting it
	// (see Assignment.StartWithinMs), is how long it has run: the cluster
	// dates the start that long before it commits it.
	RunningMs int64 `json:"running_ms,omitempty"`
}

// AttemptCompleteRequest reports how an attempt ended. State defaults to
// SUCCEEDED for exit code 0 and FAILED otherwise; TIMED_OUT says the run
// timeout killed it; LOST says the agent lost the process (it restarted
// or is stopping), which does not count against the node.
type AttemptCompleteRequest struct {
	LeaseVersion uint64 `json:"lease_version"`
	ExitCode     int    `json:"exit_code"`
	OutputTail   string `json:"output_tail,omitempty"`
	Error        string `json:"error,omitempty"`
	State        string `json:"state,omitempty"`
	// RanMs is how long the attempt ran on its node, as the agent measured
	// it. The cluster dates the end RanMs after the committed start (never
	// later than it commits the end), so a report delayed on its way
	// records the task's run time, not the report's.
	RanMs int64 `json:"ran_ms,omitempty"`
	// StartUnreported says the attempt ran and ended before its start was
	// reported (see Assignment.StartWithinMs): the cluster commits its
	// start, RanMs before the end, in the same entry as the end.
	StartUnreported bool `json:"start_unreported,omitempty"`
	// InputUnavailable says the attempt could not fetch an input from any
	// live node (State LOST): it counts against neither the task's
	// attempts nor the node, and the task waits for the input's holder.
	InputUnavailable bool `json:"input_unavailable,omitempty"`
}

// AttemptReport answers an attempt report; Duplicate marks a report that
// was already applied (accepted again, without effect).
type AttemptReport struct {
	Attempt   Attempt `json:"attempt"`
	Duplicate bool    `json:"duplicate"`
}

// MaxReportBatch bounds the reports of one batch (one Raft entry).
const MaxReportBatch = 256

// AttemptReportBatch carries several attempts' starts and results at
// once: an agent sends together what accumulated while its previous
// batch was in flight. They commit in one Raft entry; each is answered on
// its own, as its single request would have been.
type AttemptReportBatch struct {
	Reports []AttemptReportItem `json:"reports"`
}

// AttemptReportItem is one attempt's start (Start set) or result
// (Complete set).
type AttemptReportItem struct {
	AttemptID string                  `json:"attempt_id"`
	Start     *AttemptStartRequest    `json:"start,omitempty"`
	Complete  *AttemptCompleteRequest `json:"complete,omitempty"`
}

// AttemptReportBatchResponse answers a batch in request order.
type AttemptReportBatchResponse struct {
	Results []AttemptReportResult `json:"results"`
}

// AttemptReportResult answers one report: Report when it was accepted,
// otherwise the HTTP status and error its single request would have got.
type AttemptReportResult struct {
	Report *AttemptReport `json:"report,omitempty"`
	Status int            `json:"status,omitempty"`
	Error  string         `json:"error,omitempty"`
	Code   string         `json:"code,omitempty"`
}

// ReportOutcome is how the backend answers one report of a batch.
type ReportOutcome struct {
	Report AttemptReport
	Err    error
}

// Err is the result as the single request's error (nil when accepted).
func (r AttemptReportResult) Err() error {
	if r.Report != nil {
		return nil
	}
	return &StatusError{Code: r.Status, Message: r.Error, Reason: r.Code}
}

// CancelRequest optionally says why a task is cancelled.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// HeartbeatResponse tells the agent how the cluster sees it: a node that
// is DOWN, or whose session is no longer current, registers again.
type HeartbeatResponse struct {
	Liveness          string `json:"liveness"`
	SessionGeneration uint64 `json:"session_generation"`
	// LeaseMs renews the node's lease on its attempts, as a gossip lease
	// acknowledgement does; 0 when the node is DOWN (its attempts were
	// reclaimed).
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// KeyringIndex is the gossip keyring's index: an agent running
	// another fetches it.
	KeyringIndex uint64 `json:"keyring_index,omitempty"`
}

// Assignment is one live attempt for a node, with what it needs to run:
// Spec is set for an attempt still to start (RESERVED) and left out for a
// running one, whose agent has it.
type Assignment struct {
	Attempt Attempt  `json:"attempt"`
	Spec    TaskSpec `json:"spec,omitzero"`
	// Inputs, for an attempt still to start, are where the inputs its node
	// does not hold are.
	Inputs []InputSource `json:"inputs,omitempty"`
	// StartWithinMs, for an attempt still to start, is how long from this
	// answer its agent may run it before the start is committed: the
	// cluster reclaims an attempt not started within the schedule-to-start
	// timeout, and this is what is left of it, less a margin for clocks
	// and the answer's way. An agent that cannot have the start (or the
	// end) committed within it stops the attempt and reports it LOST. 0:
	// the agent runs the attempt only once its start is committed.
	StartWithinMs int64 `json:"start_within_ms,omitempty"`
	// EarlierSession marks an attempt still to start that was reserved
	// under an earlier session of the node: an earlier run of its agent
	// may have started it without the start reaching the cluster, so the
	// agent does not start it again but reports it LOST.
	EarlierSession bool `json:"earlier_session,omitempty"`
	// Held marks an attempt still to start that comes as its identity
	// alone (id, task id, number, state, lease version) with
	// StartWithinMs and EarlierSession: it was in the list the query said
	// the agent holds (AssignmentsQuery.Held), whole, and the agent takes
	// its spec from there.
	Held bool `json:"held,omitempty"`
}

// Assignments is a node's live attempts at Index. Attempts that vanish
// from the list were cancelled or reclaimed: the agent stops them. An
// attempt still to start comes whole, with its spec; one already started
// comes as its identity alone (id, task id, number, state, lease
// version): the agent running it knows the rest, and with every slot busy
// those attempts are most of every answer.
// AppliedIndex is how far the answering replica's state had got (0 from a
// server older than the field): an answer from a replica behind one the
// agent already heard from is older than what it knows, not news.
type Assignments struct {
	// HealthCheck and Rebench are the latest health check and
	// measurement asked of the node: an agent that has not done that one
	// does it.
	HealthCheck       uint64       `json:"health_check,omitempty"`
	Rebench           uint64       `json:"rebench,omitempty"`
	NodeID            string       `json:"node_id"`
	SessionGeneration uint64       `json:"session_generation"`
	Liveness          string       `json:"liveness"`
	Index             uint64       `json:"index"`
	AppliedIndex      uint64       `json:"applied_index,omitempty"`
	Attempts          []Assignment `json:"attempts"`
}

// AssignmentsQuery is a node's blocking query for its assignments: answer
// once they changed after Index, or when Wait passed. With Known (see
// AssignmentsDigest) a change answers only if it leaves the live set
// different from the one the agent already knows: a node's own start and
// end reports then do not send it a list it has no use for.
//
// Held is the Index of the last list the agent keeps whole: every
// attempt still to start that was in it (reserved at or before that
// index) is answered as its identity alone, marked Assignment.Held. Such
// an attempt is listed in every answer until it ends, and most of each
// answer of a busy node would otherwise be the same specs again. 0: every
// attempt still to start comes whole.
type AssignmentsQuery struct {
	Index uint64
	Wait  time.Duration
	Known string
	Held  uint64
}

// AssignmentsDigest names a live set as a node sees it: its session, its
// liveness and the ids of its live attempts, in the order they are listed.
func AssignmentsDigest(session uint64, liveness string, attemptIDs []string) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, strconv.FormatUint(session, 10)+"\x00"+liveness)
	for _, id := range attemptIDs {
		_, _ = io.WriteString(h, "\x00"+id)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// Digest is AssignmentsDigest of this answer.
func (as *Assignments) Digest() string {
	ids := make([]string, len(as.Attempts))
	for i, x := range as.Attempts {
		ids[i] = x.Attempt.ID
	}
	return AssignmentsDigest(as.SessionGeneration, as.State(), ids)
}

// State is what the digest names besides the attempts: the liveness, and
// the health check and measurement asked of the node (a new request
// answers a blocking query, as a new attempt does).
func (as *Assignments) State() string {
	if as.HealthCheck == 0 && as.Rebench == 0 {
		return as.Liveness
	}
	return as.Liveness + "\x00" + strconv.FormatUint(as.HealthCheck, 10) + "\x00" + strconv.FormatUint(as.Rebench, 10)
}
