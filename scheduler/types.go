package scheduler

import (
	"fmt"
	"time"
)

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
	// Profile feeds the profile score.
	Profile Profile
	// Tier is the node's tier (L1 best); TierUnknown takes any size.
	Tier Tier
	// Quarantine says why the node takes no new work for now (a black
	// hole suspected or confirmed), empty when it is not quarantined.
	Quarantine string
	// Probation names the classes whose attempts failed fast on the node
	// since it last succeeded at them ("*": every class): while it holds
	// any attempt it takes no other of them, so a black hole in the
	// making eats one attempt at a time until it is judged. "!": it
	// failed fast and its health check is awaited: no new work until the
	// agent answers, in seconds. "=NAME": suspected of failing class NAME;
	// "+new": the same for every class its history does not hold. A node
	// held so is chosen only when no other node fits (Select), never
	// refused outright: the tasks that settle the suspicion, which may
	// take long, must always find a node.
	Probation []string
	// Condition is what the node's agent reports is wrong with it (a
	// full disk), empty when nothing is: such a node takes no new attempt.
	Condition string
	// Hibernating nodes sleep until woken; they score lower (see
	// HibernatingPenalty) so awake nodes are preferred.
	Hibernating bool
}

// Profile is what the cluster knows of how a node performs, derived from
// committed facts by the caller.
type Profile struct {
	// Power is the node's measured compute (single-core score times
	// cores) as a share of the strongest node's, 0..1; 0 when unmeasured.
	Power float64
	// Health is the node's online ratio over the last day times one less
	// its recent failure rate (failures of work that succeeds elsewhere),
	// 0..1.
	Health float64
	// Classes holds the node's recent run time per task class (an EWMA),
	// sorted by class.
	Classes []ClassTime
	// Datasets is the data the node holds, sorted by name.
	Datasets []Dataset
}

// ClassTime is a node's typical run time of one task class.
type ClassTime struct {
	Class      string `json:"class"`
	EWMAMillis int64  `json:"ewma_ms"`
}

// Dataset is named data held on a node.
type Dataset struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Input is data a task reads, with its size as the cluster knows it (the
// largest copy any node holds; 0 when no node holds it).
type Input struct {
	Name  string
	Bytes int64
}

// Tier ranks nodes by what they can be trusted with: L1 the strong ones
// (inference, batch work), L2 containers and light scripts, L3 the
// weakest (heartbeats, health reports, archiving).
type Tier uint8

// Tiers; TierUnknown is a node the cluster has not ranked.
const (
	TierUnknown Tier = 0
	TierL1      Tier = 1
	TierL2      Tier = 2
	TierL3      Tier = 3
)

// String is the tier's name: "L1", "L2", "L3", or "" when unknown.
func (t Tier) String() string {
	switch t {
	case TierL1:
		return "L1"
	case TierL2:
		return "L2"
	case TierL3:
		return "L3"
	}
	return ""
}

// ParseTier reads "L1", "L2" or "L3".
func ParseTier(s string) (Tier, bool) {
	switch s {
	case "L1", "l1":
		return TierL1, true
	case "L2", "l2":
		return TierL2, true
	case "L3", "l3":
		return TierL3, true
	}
	return TierUnknown, false
}

// DriverCapabilityVersion is the capability version a node advertises for
// a task driver it runs (oci@1).
const DriverCapabilityVersion = "1"

// Request is one task's placement question at a point in time.
type Request struct {
	TaskID            string
	Capability        string
	CapabilityVersion string
	// Driver, when set, is a driver the task runs under besides a plain
	// process: the node needs the capability Driver@1 too.
	Driver          string
	RequiredLabels  map[string]string
	PreferredLabels map[string]string
	Resources       Resources
	// Class is the task's class (its history is kept per class); its
	// fleet median run time, when known, is ClassMedianMillis.
	Class             string
	ClassMedianMillis int64
	// Size is the task's declared size and Tiers the tiers it may run on
	// (empty: any).
	Size  string
	Tiers []Tier
	// Inputs names datasets the task reads; nodes holding them are
	// preferred by the locality part of the profile score.
	Inputs []Input
	// Now is the decision time; HeartbeatTTL how old a heartbeat may be.
	Now          time.Time
	HeartbeatTTL time.Duration
	// Blacklist holds the nodes this task must not be placed on again.
	Blacklist map[string]bool
	// FailedOn counts this task's failures per node: a retry goes to a
	// node it has not failed on whenever one fits, whatever the
	// preferences (RetryNodePenalty per failure).
	FailedOn map[string]int
	// PassedOver holds nodes the leader gave up on for this task, with why
	// (a hibernating node that did not wake in time).
	PassedOver map[string]string
	// Seed drives a weighted-random choice (Config.RandomTopK): the
	// caller derives it from committed state (the task and its attempt
	// number), so the same state makes the same choice.
	Seed uint64
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
	ReasonQuarantined       ReasonCode = "quarantined"
	ReasonTierBelowSize     ReasonCode = "tier_below_size"
	ReasonProbation         ReasonCode = "probation"
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

// MarshalText writes the tier's name ("" when unknown).
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads a tier's name; "" is TierUnknown.
func (t *Tier) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*t = TierUnknown
		return nil
	}
	v, ok := ParseTier(string(b))
	if !ok {
		return fmt.Errorf("unknown tier %q: want L1, L2 or L3", b)
	}
	*t = v
	return nil
}
