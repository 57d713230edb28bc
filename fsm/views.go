package fsm

import (
	"slices"
	"strings"
	"time"

	"herd/scheduler"
)

// View is the node as the scheduler sees it.
func (n *Node) View() scheduler.Node {
	return scheduler.Node{
		ID: n.ID, Management: n.Management, Liveness: n.Liveness, Scheduling: n.Scheduling,
		LastHeartbeat: n.LastHeartbeat.Time(), Capabilities: n.Capabilities, Labels: n.Labels,
		Resources: n.Resources, Reserved: n.Reserved, Slots: n.Slots,
		RunningAttempts: n.RunningAttempts, Weight: n.Weight, Condition: n.condition(),
		Tier: n.Tier.Tier, Quarantine: n.quarantine(), Probation: n.probation(),
		Profile: scheduler.Profile{Datasets: n.Datasets, Classes: n.History.times(), Health: 1},
	}
}

// probation is the node's probation for the scheduler (see
// scheduler.Node.Probation): "*" when two tasks or more failed fast in a
// row on it since its last success, "!" (no new work) while it does and a health check
// asked of it is unanswered; nil, with no allocation, otherwise.
func (n *Node) probation() []string {
	h := n.History
	if h == nil {
		return nil
	}
	if (h.FastStreak > 0 || h.NewStreak > 0) && n.HealthCheck.Requested > n.HealthCheck.Answered {
		return awaitingCheck
	}
	// One fast failure (a mistyped command) does not slow a node; two
	// distinct tasks failing fast in a row do.
	slow := h.FastStreak >= probationStreak
	switch {
	case len(h.Holds) == 0 && slow:
		return everyClass
	case len(h.Holds) == 0:
		// A class failing fast on a node that succeeds at others does not
		// slow the node: it would take that class again only once idle,
		// and a busy node would never show whether it is a hole for it.
		return nil
	case slow:
		return append(slices.Clone(everyClass), h.Holds...)
	}
	return h.Holds
}

// probationStreak is how many distinct tasks must fail fast in a row on
// a node before it takes one attempt at a time.
const probationStreak = 2

var (
	everyClass    = []string{"*"}
	awaitingCheck = []string{"!"}
)

// quarantine is the quarantine's reason for the scheduler, empty when the
// node is not quarantined.
func (n *Node) quarantine() string {
	if n.Quarantine == nil {
		return ""
	}
	return n.Quarantine.Level + " until " + n.Quarantine.Until.Time().UTC().Format(time.RFC3339) + ": " + n.Quarantine.Reason
}

func (h *NodeHistory) times() []scheduler.ClassTime {
	if h == nil {
		return nil
	}
	return h.Times
}

// condition is the node's conditions as one line for the scheduler's
// reasons; empty when there are none.
func (n *Node) condition() string {
	if len(n.Conditions) == 0 {
		return ""
	}
	parts := make([]string, len(n.Conditions))
	for i, c := range n.Conditions {
		parts[i] = c.Type + ": " + c.Message
	}
	return strings.Join(parts, "; ")
}

// Request is the task's placement question at now. The blacklist is
// filled by the caller (see BlacklistedOn).
func (t *Task) Request(now time.Time, ttl time.Duration) scheduler.Request {
	return scheduler.Request{
		TaskID: t.ID, Capability: t.Spec.Capability, CapabilityVersion: t.Spec.CapabilityVersion,
		RequiredLabels: t.Spec.RequiredLabels, PreferredLabels: t.Spec.PreferredLabels,
		Resources: t.Spec.Resources, Now: now, HeartbeatTTL: ttl,
		FailedOn: failedOn(t.nodeFailures()),
		Class:    t.Spec.ClassOf(), Size: t.Spec.Size, Tiers: t.Spec.Tiers, Inputs: inputs(t.Spec.Inputs),
		Seed: seedOf(t.ID, t.Attempts), Driver: t.Spec.Driver,
	}
}

// inputs names a task's inputs for the scheduler; their sizes are the
// caller's to fill in (see State.DatasetBytes).
func inputs(names []string) []scheduler.Input {
	if len(names) == 0 {
		return nil
	}
	out := make([]scheduler.Input, len(names))
	for i, n := range names {
		out[i].Name = n
	}
	return out
}

// seedOf is a placement's random seed: FNV-1a of the task id and the
// attempt number it places, so the same state draws the same.
func seedOf(id string, attempts int16) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= uint64(attempts)
	h *= 1099511628211
	return h
}

func failedOn(m map[string]NodeFailure) map[string]int {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int, len(m))
	for id, f := range m {
		out[id] = f.Count
	}
	return out
}

// BlacklistedOn reports whether the task failed twice on the node since
// the node last proved healthy (succeeded at any task).
func (t *Task) BlacklistedOn(n *Node) bool {
	f, ok := t.nodeFailures()[n.ID]
	return ok && f.Count >= 2 && n.HealthyIndex < f.LastIndex
}

// HasNodeFailures reports whether any attempt of the task failed on a
// node (and so whether its requirements depend on more than its spec).
func (t *Task) HasNodeFailures() bool { return len(t.nodeFailures()) > 0 }

// Blacklist returns the set of nodes the task must avoid.
func (t *Task) Blacklist(nodeByID func(string) *Node) map[string]bool {
	var out map[string]bool
	for id := range t.nodeFailures() {
		if n := nodeByID(id); n != nil && t.BlacklistedOn(n) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}
