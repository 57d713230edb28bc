package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// Limits on what a node may register.
const (
	maxNodeLabels       = 64
	maxNodeCapabilities = 64
	maxNodeSlots        = 1024
)

// RegisterNode commits a node registration (leader-only); every
// registration starts a new session generation.
func (s *Server) RegisterNode(ctx context.Context, reg api.NodeRegistration) (api.RegisterResponse, error) {
	if !s.IsLeader() {
		return api.RegisterResponse{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	if err := validateRegistration(reg); err != nil {
		return api.RegisterResponse{}, fmt.Errorf("invalid registration: %v: %w", err, api.ErrBadRequest)
	}
	res := scheduler.Resources{CPUMillis: reg.Resources.CPUMillis, MemoryMB: reg.Resources.MemoryMB, GPU: reg.Resources.GPU, DiskMB: reg.Resources.DiskMB}
	resp, index, err := s.apply(ctx, fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: s.now().UTC(), Node: fsm.Node{
		ID: reg.ID, Address: reg.Address, Labels: reg.Labels, Capabilities: reg.Capabilities,
		Resources: res, Slots: reg.Slots, Weight: reg.Weight, RegistrationToken: reg.Token,
	}})
	if err != nil {
		return api.RegisterResponse{}, err
	}
	n, ok := resp.(*fsm.Node)
	if !ok {
		return api.RegisterResponse{}, fmt.Errorf("unexpected register response %T", resp)
	}
	s.logger.Info("node registered", "node", n.ID, "session", n.SessionGeneration)
	return api.RegisterResponse{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Index: index}, nil
}

func validateRegistration(reg api.NodeRegistration) error {
	var errs []error
	if !api.ValidID(reg.ID) {
		errs = append(errs, fmt.Errorf("id %q must be 1-64 letters, digits, '.', '_' or '-'", reg.ID))
	}
	r := reg.Resources
	if r.CPUMillis < 0 || r.MemoryMB < 0 || r.GPU < 0 || r.DiskMB < 0 {
		errs = append(errs, errors.New("resources must not be negative"))
	}
	if reg.Slots < 0 || reg.Slots > maxNodeSlots {
		errs = append(errs, fmt.Errorf("slots %d is outside 0..%d", reg.Slots, maxNodeSlots))
	}
	if reg.Weight < 0 || reg.Weight > 1_000_000 {
		errs = append(errs, fmt.Errorf("weight %d is outside 0..1000000", reg.Weight))
	}
	if len(reg.Labels) > maxNodeLabels || len(reg.Capabilities) > maxNodeCapabilities {
		errs = append(errs, fmt.Errorf("at most %d labels and %d capabilities", maxNodeLabels, maxNodeCapabilities))
	}
	for name, versions := range reg.Capabilities {
		if name == "" || len(versions) == 0 || slices.Contains(versions, "") {
			errs = append(errs, fmt.Errorf("capability %q needs at least one non-empty version", name))
		}
	}
	if len(reg.Token) > 128 {
		errs = append(errs, errors.New("token is longer than 128 bytes"))
	}
	if len(reg.Address) > 256 {
		errs = append(errs, errors.New("address is longer than 256 bytes"))
	}
	return errors.Join(errs...)
}

// DrainNode stops or resumes new placements on a node (leader-only).
func (s *Server) DrainNode(ctx context.Context, nodeID string, enable bool) (api.Node, error) {
	if !s.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	resp, _, err := s.apply(ctx, fsm.MsgNodeDrain, fsm.NodeDrainRequest{NodeID: nodeID, Enable: enable, Now: s.now().UTC()})
	if err != nil {
		return api.Node{}, err
	}
	return toAPINode(resp.(*fsm.Node)), nil
}

// SetNodeEligibility marks a node eligible or not (leader-only).
func (s *Server) SetNodeEligibility(ctx context.Context, nodeID string, eligible bool) (api.Node, error) {
	if !s.IsLeader() {
		return api.Node{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	resp, _, err := s.apply(ctx, fsm.MsgNodeEligible, fsm.NodeEligibilityRequest{NodeID: nodeID, Eligible: eligible, Now: s.now().UTC()})
	if err != nil {
		return api.Node{}, err
	}
	return toAPINode(resp.(*fsm.Node)), nil
}

// GetNode reads one node with its attempts from the local state.
func (s *Server) GetNode(id string) (api.Node, error) {
	st := s.fsm.State()
	n, err := st.Node(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Node{}, fmt.Errorf("node %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Node{}, err
	}
	out := toAPINode(n)
	out.Observation = s.Observation(n)
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
func (s *Server) ListNodes() ([]api.Node, error) {
	nodes, err := s.fsm.State().Nodes()
	if err != nil {
		return nil, err
	}
	out := make([]api.Node, 0, len(nodes))
	for _, n := range nodes {
		an := toAPINode(n)
		an.Observation = s.Observation(n)
		out = append(out, an)
	}
	return out, nil
}

// ExplainTask evaluates a task against every node now, from the local
// state, as the leader's filter would.
func (s *Server) ExplainTask(id string) (api.Explanation, error) {
	st := s.fsm.State()
	t, err := st.Task(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Explanation{}, fmt.Errorf("task %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Explanation{}, err
	}
	nodes, byID, err := nodeViews(st)
	if err != nil {
		return api.Explanation{}, err
	}
	req := t.Request(s.now().UTC(), s.cfg.Scheduler.HeartbeatTTL)
	req.Blacklist = t.Blacklist(byID)
	cfg := scoringConfig(s.cfg.Scheduler, nil)
	return toAPIExplanation(scheduler.Explain(nodes, &req, &cfg)), nil
}

// ExplainSpec evaluates a spec that is not submitted: a what-if, with
// optional overrides of the scheduler settings.
func (s *Server) ExplainSpec(in api.ExplainRequest) (api.Explanation, error) {
	spec := in.TaskSpec
	if len(spec.Command) == 0 {
		spec.Command = []string{"true"} // the command does not affect placement
	}
	fspec := toFSMSpec(spec.WithDefaults())
	if err := fspec.Validate(); err != nil {
		return api.Explanation{}, fmt.Errorf("invalid task spec: %v: %w", err, api.ErrBadRequest)
	}
	ttl := s.cfg.Scheduler.HeartbeatTTL
	if in.HeartbeatTTLSeconds != nil {
		if *in.HeartbeatTTLSeconds < 1 || *in.HeartbeatTTLSeconds > 7*24*3600 {
			return api.Explanation{}, fmt.Errorf("heartbeat_ttl_seconds must be 1..604800: %w", api.ErrBadRequest)
		}
		ttl = time.Duration(*in.HeartbeatTTLSeconds) * time.Second
	}
	st := s.fsm.State()
	nodes, _, err := nodeViews(st)
	if err != nil {
		return api.Explanation{}, err
	}
	t := &fsm.Task{ID: "what-if", Spec: fspec}
	req := t.Request(s.now().UTC(), ttl)
	cfg := scoringConfig(s.cfg.Scheduler, nil)
	return toAPIExplanation(scheduler.Explain(nodes, &req, &cfg)), nil
}

// nodeViews builds the scheduler's view of every node, plus a lookup of
// the records by id.
func nodeViews(st *fsm.State) ([]*scheduler.Node, func(string) *fsm.Node, error) {
	nodes, err := st.Nodes()
	if err != nil {
		return nil, nil, err
	}
	views := make([]*scheduler.Node, len(nodes))
	byID := make(map[string]*fsm.Node, len(nodes))
	for i, n := range nodes {
		v := n.View()
		views[i] = &v
		byID[n.ID] = n
	}
	return views, func(id string) *fsm.Node { return byID[id] }, nil
}

func scoringConfig(c config.Scheduler, rng randSource) scheduler.Config {
	cfg := scheduler.Config{ProfileScale: c.ProfileScale, ProfileWeights: scheduler.DefaultProfileWeights()}
	if c.RandomTopK > 1 && rng != nil {
		cfg.RandomTopK = c.RandomTopK
		cfg.Rand = rng.rand()
	}
	return cfg
}

func toAPIExplanation(ex scheduler.Explanation) api.Explanation {
	out := api.Explanation{Total: ex.Total, Eligible: ex.Eligible, Summary: ex.Summary, Nodes: make([]api.NodeExplanation, 0, len(ex.Nodes))}
	for _, n := range ex.Nodes {
		ne := api.NodeExplanation{NodeID: n.NodeID, Eligible: n.Eligible, Score: n.Score, Reasons: []string{}, Codes: []string{}}
		for _, r := range n.Reasons {
			ne.Reasons = append(ne.Reasons, r.String())
			ne.Codes = append(ne.Codes, string(r.Code))
		}
		out.Nodes = append(out.Nodes, ne)
	}
	return out
}

func toAPIResources(r scheduler.Resources) api.Resources {
	return api.Resources{CPUMillis: r.CPUMillis, MemoryMB: r.MemoryMB, GPU: r.GPU, DiskMB: r.DiskMB}
}

func toAPINode(n *fsm.Node) api.Node {
	weight := n.Weight
	if weight <= 0 {
		weight = scheduler.DefaultWeight
	}
	labels := maps.Clone(n.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	capabilities := maps.Clone(n.Capabilities)
	if capabilities == nil {
		capabilities = map[string][]string{}
	}
	return api.Node{
		ID: n.ID, Address: n.Address, Labels: labels, Capabilities: capabilities,
		Management: string(n.Management), Liveness: string(n.Liveness), Scheduling: string(n.Scheduling),
		Resources: toAPIResources(n.Resources), Reserved: toAPIResources(n.Reserved),
		Free:  toAPIResources(n.Resources.Sub(n.Reserved)),
		Slots: n.Slots, RunningAttempts: n.RunningAttempts, Weight: weight,
		SessionGeneration: n.SessionGeneration, RegisteredAt: n.RegisteredAt.Time(), LastHeartbeat: n.LastHeartbeat.Time(),
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex,
	}
}

func toAPIAttempt(a *fsm.Attempt) api.Attempt {
	return api.Attempt{
		ID: a.ID, TaskID: a.TaskID, Number: a.Number, NodeID: a.NodeID, State: string(a.State), LeaseVersion: a.LeaseVersion,
		ReservedAt: a.ReservedAt.Time(), StartedAt: a.StartedAt.Time(), FinishedAt: a.FinishedAt.Time(),
		ExitCode: a.ExitCode, OutputTail: a.OutputTail,
	}
}
