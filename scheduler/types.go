package scheduler

import "time"

// Node is a worker node as the scheduler sees it: a plain value built by
// the caller from the replicated state (and, on the leader, live gossip).
type Node struct {
	ID         string
	Management Management
	Liveness   Liveness
	Scheduling Scheduling
	// LastHeartbeat is when the node was last heard from.
	LastHeartbeat time.Time
	// Capabilities maps a capability name to the versions the node offers.
	Capabilities map[string][]string
	// Labels are trusted labels (set at registration, not by tasks).
	Labels map[string]string
	// Resources is the node's static allocatable capacity.
	Resources Resources
	// Reserved is the sum of the live reservations on the node.
	Reserved Resources
	// Slots bounds how many attempts may be live at once.
	Slots int
	// RunningAttempts counts live (reserved or running) attempts.
	RunningAttempts int
	// Weight is the operator's preference (100 when unset).
	Weight int
	// Profile feeds the optional profile score.
	Profile Profile
	// Condition is what the node's agent reports is wrong with it (a
	// full disk), empty when nothing is: such a node takes no new attempt.
	Condition string
	// Hibernating nodes sleep until woken; they score lower (see
	// HibernatingPenalty) so awake nodes are preferred.
	Hibernating bool
}

// Profile is a node's capability profile, each part normalised to 0..1.
type Profile struct {
	Health   float64  // 1 - recent failure rate, or similar
	History  float64  // how well the node did on past tasks (speed, success)
	Datasets []string // data the node holds locally, for data locality
}

// Request is one task's placement question at a point in time.
type Request struct {
	TaskID            string
	Capability        string
	CapabilityVersion string
	RequiredLabels    map[string]string
	PreferredLabels   map[string]string
	Resources         Resources
	// DataLocality names datasets the task reads; nodes holding them are
	// preferred by the profile score.
	DataLocality []string
	// Now is the decision time; HeartbeatTTL how old a heartbeat may be.
	Now          time.Time
	HeartbeatTTL time.Duration
	// Blacklist holds the nodes this task must not be placed on again.
	Blacklist map[string]bool
	// FailedOn counts this task's failures per node: a retry prefers a
	// node it has not failed on (RetryNodePenalty per failure).
	FailedOn map[string]int
	// PassedOver holds nodes the leader gave up on for this task, with why
	// (a hibernating node that did not wake in time).
	PassedOver map[string]string
}

// ReasonCode identifies why a node cannot take a task.
type ReasonCode string

// Reason codes, in the order the filter checks them.
const (
	ReasonNotActive         ReasonCode = "not_active"
	ReasonNotReady          ReasonCode = "not_ready"
	ReasonIneligible        ReasonCode = "ineligible"
	ReasonHeartbeatExpired  ReasonCode = "heartbeat_expired"
	ReasonMissingCapability ReasonCode = "missing_capability"
	ReasonLabelMismatch     ReasonCode = "label_mismatch"
	ReasonCPUBelowMinimum   ReasonCode = "cpu_below_minimum"
	ReasonMemoryBelowMin    ReasonCode = "memory_below_minimum"
	ReasonGPUBelowMinimum   ReasonCode = "gpu_below_minimum"
	ReasonDiskBelowMinimum  ReasonCode = "disk_below_minimum"
	ReasonNoFreeSlot        ReasonCode = "no_free_slot"
	ReasonInsufficientFree  ReasonCode = "insufficient_capacity"
	ReasonBlacklisted       ReasonCode = "blacklisted"
	ReasonPassedOver        ReasonCode = "passed_over"
	ReasonAgentCondition    ReasonCode = "agent_condition"
)

// Reason is one failed rule: a code for machines, a summary phrase shared
// by every node failing the same way, and a detail for this node.
type Reason struct {
	Code    ReasonCode `json:"code"`
	Summary string     `json:"summary"`
	Detail  string     `json:"detail"`
}

// String is the human text: "CPU below minimum (4000 < 32000 millis)".
func (r Reason) String() string {
	if r.Detail == "" {
		return r.Summary
	}
	return r.Summary + " (" + r.Detail + ")"
}

// Management is the operator's intent for a node.
type Management string

// Management states.
const (
	ManagementActive   Management = "ACTIVE"
	ManagementDraining Management = "DRAINING"
	ManagementRetired  Management = "RETIRED"
)

// Liveness is the leader's committed verdict on whether a node is reachable.
type Liveness string

// Liveness states.
const (
	LivenessReady   Liveness = "READY"
	LivenessSuspect Liveness = "SUSPECT"
	LivenessDown    Liveness = "DOWN"
)

// Scheduling says whether a node may receive new attempts.
type Scheduling string

// Scheduling states.
const (
	SchedulingEligible   Scheduling = "ELIGIBLE"
	SchedulingIneligible Scheduling = "INELIGIBLE"
)
