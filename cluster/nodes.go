package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/internal/version"
	"herd/scheduler"
)

// sessionEndpoints serve an agent's session with the cluster: its
// registration, heartbeats and reported conditions, and the leader's
// DOWN verdict on it. They hold the replica as a proposer, the liveness
// monitor that hears the fleet (and gives and judges leases), the
// keyring family (whose index each answer carries, and which keeps the
// agents' reports of it), and when this replica began to lead.
type sessionEndpoints struct {
	r           proposer
	monitor     *monitor
	liveness    config.Liveness
	keyring     *keyringEndpoints
	leaderSince *atomic.Int64
	logger      hclog.Logger
}

// RegisterNode commits a node registration (leader-only); every
// registration starts a new session generation.
func (s *sessionEndpoints) RegisterNode(ctx context.Context, reg api.NodeRegistration) (api.RegisterResponse, error) {
	if !s.r.IsLeader() {
		return api.RegisterResponse{}, fmt.Errorf("%s: %w", s.r.ID(), api.ErrNotLeader)
	}
	if err := validateRegistration(reg); err != nil {
		return api.RegisterResponse{}, fmt.Errorf("invalid registration: %v: %w", err, api.ErrBadRequest)
	}
	resp, index, err := s.r.apply(ctx, fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: s.r.Now().UTC(), Node: fsm.Node{
		ID: reg.ID, Address: reg.Address, Version: reg.Version, Labels: reg.Labels, Capabilities: reg.Capabilities,
		Resources: reg.Resources, Slots: reg.Slots, Weight: reg.Weight, RegistrationToken: reg.Token,
		Profile: registeredProfile(reg.Profile), Datasets: toSchedulerDatasets(reg.Datasets), DataAddress: reg.DataAddr,
	}})
	if err != nil {
		return api.RegisterResponse{}, err
	}
	n, ok := resp.(*fsm.Node)
	if !ok {
		return api.RegisterResponse{}, fmt.Errorf("unexpected register response %T", resp)
	}
	s.logger.Info("node registered", "node", n.ID, "session", n.SessionGeneration)
	return api.RegisterResponse{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Index: index, LeaseMs: s.monitor.lease(n.ID).Milliseconds(), KeyringIndex: s.keyringIndex()}, nil
}

func registeredProfile(p *api.NodeProfile) *fsm.NodeProfile {
	if p == nil {
		return nil
	}
	fp := toFSMProfile(*p)
	return &fp
}

// validateRegistration checks the node's declaration by spec's rules and
// what the registration adds to it.
func validateRegistration(reg api.NodeRegistration) error {
	errs := []error{reg.NodeSpec.Validate()}
	if reg.Version != "" && !version.Valid(reg.Version) {
		errs = append(errs, fmt.Errorf("version: %q is not a semantic version", reg.Version))
	}
	if len(reg.Token) > 128 {
		errs = append(errs, errors.New("token: is longer than 128 bytes"))
	}
	if len(reg.Address) > 256 {
		errs = append(errs, errors.New("address: is longer than 256 bytes"))
	}
	return errors.Join(errs...)
}

// DrainNode stops or resumes new placements on a node (leader-only).
func (e *nodeEndpoints) DrainNode(ctx context.Context, nodeID string, enable bool) (api.Node, error) {
	if !e.r.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgNodeDrain, fsm.NodeDrainRequest{NodeID: nodeID, Enable: enable, Now: e.r.Now().UTC()})
	if err != nil {
		return api.Node{}, err
	}
	return toAPINode(resp.(*fsm.Node)), nil
}

// SetNodeEligibility marks a node eligible or not (leader-only).
func (e *nodeEndpoints) SetNodeEligibility(ctx context.Context, nodeID string, eligible bool) (api.Node, error) {
	if !e.r.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgNodeEligible, fsm.NodeEligibilityRequest{NodeID: nodeID, Eligible: eligible, Now: e.r.Now().UTC()})
	if err != nil {
		return api.Node{}, err
	}
	return toAPINode(resp.(*fsm.Node)), nil
}

// GetNode reads one node with its attempts from the local state.
func (e *nodeEndpoints) GetNode(id string) (api.Node, error) {
	st := e.r.State()
	n, err := st.Node(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Node{}, fmt.Errorf("node %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Node{}, err
	}
	out := e.apiNode(st, n)
	for _, e := range n.Events {
		out.Events = append(out.Events, api.TimelineEvent{Index: e.Index, Time: e.Time.Time(), Kind: e.Kind.String(), Message: e.Message})
	}
	attempts, err := st.AttemptsOnNode(id, nil)
	if err != nil {
		return api.Node{}, err
	}
	for _, a := range attempts {
		out.Attempts = append(out.Attempts, toAPIAttempt(a))
	}
	return out, nil
}

// ListNodes reads every node from the local state.
func (e *nodeEndpoints) ListNodes() ([]api.Node, error) {
	st := e.r.State()
	nodes, err := st.Nodes()
	if err != nil {
		return nil, err
	}
	out := make([]api.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, e.apiNode(st, n))
	}
	return out, nil
}

// Heartbeat confirms that a node's session is alive (leader-only) and
// tells the agent how the cluster sees it, with the lease that gives.
func (s *sessionEndpoints) Heartbeat(ctx context.Context, nodeID string, req api.HeartbeatRequest) (api.HeartbeatResponse, error) {
	if !s.r.IsLeader() {
		return api.HeartbeatResponse{}, fmt.Errorf("%s: %w", s.r.ID(), api.ErrNotLeader)
	}
	n, err := s.heartbeatNode(ctx, nodeID, req.SessionGeneration)
	if err != nil {
		return api.HeartbeatResponse{}, err
	}
	s.keyring.seen.report(nodeID, req.KeyringIndex)
	out := api.HeartbeatResponse{Liveness: string(n.Liveness), SessionGeneration: n.SessionGeneration, KeyringIndex: s.keyringIndex()}
	if n.Liveness != scheduler.LivenessDown {
		out.LeaseMs = s.monitor.lease(n.ID).Milliseconds()
	}
	return out, nil
}

// heartbeatNode is the node record a heartbeat of session answers from.
// A heartbeat is committed (the replicated last heartbeat moves) unless
// this leader hears the session's gossip: the liveness loop then commits
// those heartbeats in batches, this one among them, and the HTTP one only
// checks the session against the ready leader's state, as the gossip
// acknowledgement does, without a log write and an fsync on every replica
// for each of a fleet's heartbeats. A leader deposed without knowing it
// yet may answer so for up to its leader lease; the lease it gives is one
// its successor already assumes a predecessor gave (see replaceAfter).
func (s *sessionEndpoints) heartbeatNode(ctx context.Context, nodeID string, session uint64) (*fsm.Node, error) {
	if !s.monitor.heardFrom(nodeID, session, 2*s.liveness.HeartbeatInterval, s.r.Now()) {
		resp, _, err := s.r.apply(ctx, fsm.MsgHeartbeat, fsm.HeartbeatRequest{NodeID: nodeID, SessionGeneration: session, Now: s.r.Now().UTC()})
		if err != nil {
			return nil, err
		}
		return resp.(*fsm.Node), nil
	}
	n, err := s.r.State().Node(nodeID)
	if err != nil {
		return nil, fsmErr(&fsm.Rejection{Code: fsm.RejectNotFound, Message: err.Error()})
	}
	if n.SessionGeneration != session {
		return nil, fsmErr(&fsm.Rejection{Code: fsm.RejectSessionChanged,
			Message: fmt.Sprintf("node %s session is %d, heartbeat is for %d: register again", n.ID, n.SessionGeneration, session)})
	}
	return n, nil
}

// SetNodeConditions commits the conditions a node's agent reports
// (leader-only).
func (s *sessionEndpoints) SetNodeConditions(ctx context.Context, nodeID string, req api.NodeConditionsRequest) (api.Node, error) {
	if !s.r.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", s.r.ID(), api.ErrNotLeader)
	}
	conds := make([]fsm.NodeCondition, len(req.Conditions))
	for i, c := range req.Conditions {
		conds[i] = fsm.NodeCondition{Type: c.Type, Message: c.Message}
	}
	resp, _, err := s.r.apply(ctx, fsm.MsgNodeConditions, fsm.NodeConditionsRequest{NodeID: nodeID, SessionGeneration: req.SessionGeneration, Conditions: conds, Notes: req.Notes, Now: s.r.Now().UTC()})
	if err != nil {
		return api.Node{}, err
	}
	n := resp.(*fsm.Node)
	out := toAPINode(n)
	out.Observation = s.Observation(n)
	return out, nil
}

// replaceAfter is when the attempts of a node declared DOWN at now may
// run elsewhere: once the lease its agent may hold has run out, with a
// tenth more for clocks that run at different rates. The lease runs from
// the node's last proof of life, or from when this replica began to lead
// if later (an agent cut off from the new leader may hold a lease its
// predecessor gave).
func (s *sessionEndpoints) replaceAfter(nodeID string, now time.Time) time.Time {
	since := time.Unix(0, s.leaderSince.Load())
	from := since
	if n, err := s.r.State().Node(nodeID); err == nil {
		_, heard, _ := s.monitor.view(nodeID, n.LastHeartbeat.Time(), n.SessionStartedAt.Time(), now)
		from = latest(from, heard, n.LastHeartbeat.Time(), n.SessionStartedAt.Time())
	}
	lease := s.monitor.leaseGiven(nodeID, now.Sub(since))
	return from.Add(lease + lease/10)
}

// Observation is how this replica's liveness monitor sees a node now.
func (s *sessionEndpoints) Observation(n *fsm.Node) api.NodeObservation {
	obs, _, _ := s.monitor.view(n.ID, n.LastHeartbeat.Time(), n.SessionStartedAt.Time(), s.r.Now())
	return obs
}

// keyringIndex is the replicated keyring's index, told to agents with
// every registration and heartbeat so that they fetch a changed one.
func (s *sessionEndpoints) keyringIndex() uint64 { return s.r.State().GossipKeyring().Index }

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// DeclareNodeDown commits a node-down verdict (leader-only): its live
// attempts become LOST and their tasks are requeued.
func (s *sessionEndpoints) DeclareNodeDown(ctx context.Context, nodeID, reason string) ([]string, error) {
	if !s.r.IsLeader() {
		return nil, fmt.Errorf("%s: %w", s.r.ID(), api.ErrNotLeader)
	}
	now := s.r.Now()
	retryAt := s.replaceAfter(nodeID, now)
	resp, _, err := s.r.apply(ctx, fsm.MsgNodeDown, fsm.NodeDownRequest{NodeID: nodeID, Reason: reason, Now: now.UTC(), RetryAt: retryAt.UTC()})
	if err != nil {
		return nil, err
	}
	res := resp.(*fsm.NodeDownResult)
	s.logger.Warn("node declared down", "node", nodeID, "reason", reason, "reclaimed", len(res.Reclaimed))
	return res.Reclaimed, nil
}
