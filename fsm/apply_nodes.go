package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"herd/scheduler"
	"herd/spec"
)

func getNode(db *store, id string) (*Node, error) {
	if n, ok := db.node(id); ok {
		return n, nil
	}
	return nil, reject(RejectNotFound, "node %q not found", id)
}

// getNodeRecord is getNode without bringing the record's usage up to
// date, for the commands that change the usage themselves.
func getNodeRecord(db *store, id string) (*Node, error) {
	if n, ok := db.nodeRecord(id); ok {
		return n, nil
	}
	return nil, reject(RejectNotFound, "node %q not found", id)
}

func applyNodeDrain(db *store, index uint64, r *NodeDrainRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.Management == scheduler.ManagementRetired {
		return nil, reject(RejectConflict, "node %s is retired", node.ID)
	}
	n := node.clone()
	n.Management = scheduler.ManagementActive
	if r.Enable {
		n.Management = scheduler.ManagementDraining
	}
	if n.Management != node.Management {
		n.addEvent(index, r.Now, EventManagement, fmt.Sprintf("%s → %s", node.Management, n.Management))
	}
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyNodeEligibility(db *store, index uint64, r *NodeEligibilityRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.Scheduling = scheduler.SchedulingIneligible
	if r.Eligible {
		n.Scheduling = scheduler.SchedulingEligible
	}
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyHeartbeat(db *store, index uint64, r *HeartbeatRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session is %d, heartbeat is for %d: register again", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	if !StampOf(r.Now).After(node.LastHeartbeat) {
		return node, nil
	}
	n := node.clone()
	n.LastHeartbeat = StampOf(r.Now)
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

// NodeDownResult lists the attempts a node-down reclaimed.
type NodeDownResult struct {
	Node      *Node
	Reclaimed []string
}

func applyNodeDown(db *store, index uint64, r *NodeDownRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	// Collect first: ending an attempt rewrites the index being scanned.
	var live []*Attempt
	db.attemptsOnNode(true, node.ID, func(a *Attempt) bool { live = append(live, a); return true })
	out := &NodeDownResult{}
	for _, a := range live {
		task, err := getTask(db, a.TaskID)
		if err != nil {
			return nil, err
		}
		why, retryAt := "reclaimed: node down: "+r.Reason, latestTime(r.Now, r.RetryAt)
		if wait := retryAt.Sub(r.Now); wait > 0 {
			why += fmt.Sprintf("; re-placed in %s, once its agent has stopped it (its lease has run out)", wait.Round(time.Millisecond))
		}
		if task.Spec.OnDisconnect == spec.OnDisconnectKeepRunning {
			// Its agent does not stop it when cut off: waiting for the
			// lease would prevent no overlap.
			why = fmt.Sprintf("reclaimed: node down: %s; re-placed at once: the task keeps running when its node is cut off (on_disconnect %s), so this attempt may still be running there",
				r.Reason, spec.OnDisconnectKeepRunning)
			retryAt = r.Now
		}
		if _, err := finishAttempt(db, index, a, task, &AttemptEndRequest{
			AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptLost, ExitCode: -1,
			Error: why, Now: r.Now, RetryAt: retryAt,
		}); err != nil {
			return nil, err
		}
		out.Reclaimed = append(out.Reclaimed, a.ID)
	}
	// Re-read: endAttempt released the reservations on the node record.
	node, err = getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.Liveness = scheduler.LivenessDown
	n.ModifyIndex = index
	n.addEvent(index, r.Now, EventDown, fmt.Sprintf("declared DOWN: %s; %d attempts reclaimed", r.Reason, len(out.Reclaimed)))
	n.markUptime(r.Now, false)
	out.Node = n
	db.putNode(n)
	return out, nil
}

func applyNodeLiveness(db *store, index uint64, r *NodeLivenessRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	want := scheduler.Liveness(r.Liveness)
	if want != scheduler.LivenessReady && want != scheduler.LivenessSuspect {
		return nil, reject(RejectInvalid, "liveness %q: only READY and SUSPECT are set this way", r.Liveness)
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session %d, verdict was for %d", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	if node.Liveness == scheduler.LivenessDown {
		return nil, reject(RejectConflict, "node %s is DOWN: it must register again", node.ID)
	}
	if node.Liveness == want {
		return node, nil
	}
	n := node.clone()
	n.addEvent(index, r.Now, livenessEvent(want), fmt.Sprintf("%s → %s: %s", n.Liveness, want, r.Reason))
	n.Liveness = want
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyRegisterNode(db *store, index uint64, r *RegisterNodeRequest) (any, error) {
	n := r.Node
	if n.ID == "" {
		return nil, reject(RejectInvalid, "node id is required")
	}
	if n.Resources.Negative() || n.Slots < 0 {
		return nil, reject(RejectInvalid, "node %q: resources and slots must not be negative", n.ID)
	}
	old, exists := db.node(n.ID)
	n.SessionGeneration = 1
	n.CreateIndex = index
	n.Management = scheduler.ManagementActive
	n.Scheduling = scheduler.SchedulingEligible
	if exists && n.RegistrationToken != "" && old.RegistrationToken == n.RegistrationToken {
		// The same registration again (a client retry whose first try
		// committed): answer it without starting another session.
		return old, nil
	}
	if exists {
		// A re-registration keeps what the cluster decided about the node;
		// only the agent-reported facts are replaced. What it holds lives
		// in its usage record, which putNode stamps onto the new record.
		n.SessionGeneration = old.SessionGeneration + 1
		n.CreateIndex = old.CreateIndex
		n.Management = old.Management
		n.Scheduling = old.Scheduling
		n.RegisteredAt = old.RegisteredAt
		n.HealthyIndex = old.HealthyIndex
		n.Events = append([]TimelineEvent(nil), old.Events...)
		// What the cluster learnt of the node outlives its sessions; a
		// registration without a profile keeps the last one measured.
		n.Tier, n.Quarantine, n.HealthCheck, n.RebenchRequested = old.Tier, old.Quarantine, old.HealthCheck, old.RebenchRequested
		n.History, n.Uptime = old.History, old.Uptime
		if n.Profile == nil {
			n.Profile = old.Profile
		}
	} else {
		n.RegisteredAt = StampOf(r.Now)
		n.Events = nil
		n.Tier, n.Quarantine, n.HealthCheck, n.RebenchRequested, n.History, n.Uptime = TierState{}, nil, HealthCheckState{}, 0, nil, nil
	}
	if exists && n.Profile != nil && n.Profile != old.Profile || !exists && n.Profile != nil {
		if err := checkProfile(n.Profile); err != nil {
			return nil, err
		}
		p := *n.Profile
		p.MeasuredAt = StampOf(r.Now)
		n.Profile = &p
	}
	ds, err := normalDatasets(n.Datasets)
	if err != nil {
		return nil, err
	}
	n.Datasets = ds
	n.SessionIndex = index
	n.addEvent(index, r.Now, EventRegistered, fmt.Sprintf("registered, session %d", n.SessionGeneration))
	if n.Profile != nil && (!exists || n.Profile != old.Profile) {
		n.addEvent(index, r.Now, EventProfile, profileSummary(n.Profile))
	}
	n.markUptime(r.Now, true)
	retier(&n, db.profileSettings(), index, r.Now, "profile at registration")
	n.Liveness = scheduler.LivenessReady
	n.LastHeartbeat = StampOf(r.Now)
	n.SessionStartedAt = StampOf(r.Now)
	n.ModifyIndex = index
	db.putNode(&n)
	return &n, nil
}

// applyNodeConditions replaces a node's reported conditions. A condition
// that stands keeps the time it was first reported; each one that
// appears or clears is a node event. A report from an older session is
// refused, as its heartbeats are.
func applyNodeConditions(db *store, index uint64, r *NodeConditionsRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session is %d, conditions are for %d: register again", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	want, err := normalConditions(r.Conditions)
	if err != nil {
		return nil, err
	}
	if len(r.Notes) > MaxNodeConditions {
		return nil, reject(RejectInvalid, "%d notes reported, at most %d", len(r.Notes), MaxNodeConditions)
	}
	for _, note := range r.Notes {
		if note == "" || len(note) > MaxConditionMessageSize {
			return nil, reject(RejectInvalid, "a note of %d bytes: want 1 to %d", len(note), MaxConditionMessageSize)
		}
	}
	n := node.clone()
	changed := false
	next := make([]NodeCondition, 0, len(want))
	for _, c := range want {
		c.Since = StampOf(r.Now)
		if i := slices.IndexFunc(node.Conditions, func(o NodeCondition) bool { return o.Type == c.Type }); i >= 0 {
			c.Since = node.Conditions[i].Since
			if node.Conditions[i].Message == c.Message {
				next = append(next, c)
				continue
			}
		}
		n.addEvent(index, r.Now, EventCondition, c.Type+": "+c.Message)
		next = append(next, c)
		changed = true
	}
	for _, o := range node.Conditions {
		if !slices.ContainsFunc(want, func(c NodeCondition) bool { return c.Type == o.Type }) {
			n.addEvent(index, r.Now, EventCondition, o.Type+" cleared")
			changed = true
		}
	}
	for _, note := range r.Notes {
		if slices.ContainsFunc(n.Events, func(e TimelineEvent) bool { return e.Kind == EventAgent && e.Message == note }) {
			continue
		}
		n.addEvent(index, r.Now, EventAgent, note)
		changed = true
	}
	if !changed {
		return node, nil
	}
	if len(next) == 0 {
		next = nil
	}
	n.Conditions = next
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

// normalConditions checks reported conditions and sorts them by type.
func normalConditions(in []NodeCondition) ([]NodeCondition, error) {
	if len(in) > MaxNodeConditions {
		return nil, reject(RejectInvalid, "%d conditions reported, at most %d", len(in), MaxNodeConditions)
	}
	out := slices.Clone(in)
	for i := range out {
		out[i].Since = 0
		c := out[i]
		if c.Type == "" || len(c.Type) > MaxConditionTypeBytes || strings.ContainsFunc(c.Type, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
		}) {
			return nil, reject(RejectInvalid, "condition type %q: want 1 to %d of a-z, 0-9 and _", c.Type, MaxConditionTypeBytes)
		}
		if len(c.Message) > MaxConditionMessageSize {
			return nil, reject(RejectInvalid, "condition %s: message of %d bytes, at most %d", c.Type, len(c.Message), MaxConditionMessageSize)
		}
	}
	slices.SortFunc(out, func(a, b NodeCondition) int { return strings.Compare(a.Type, b.Type) })
	for i := 1; i < len(out); i++ {
		if out[i].Type == out[i-1].Type {
			return nil, reject(RejectInvalid, "condition %s reported twice", out[i].Type)
		}
	}
	return out, nil
}

func latestTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
