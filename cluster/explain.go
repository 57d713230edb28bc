package cluster

import (
	"errors"
	"fmt"
	"time"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

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
	now := s.now().UTC()
	nodes, byID, fleet, err := nodeViews(st, now, s.cfg.Profiles)
	if err != nil {
		return api.Explanation{}, err
	}
	req := t.Request(now, s.cfg.Scheduler.HeartbeatTTL)
	fleet.fill(&req)
	req.Blacklist = t.Blacklist(byID)
	cfg := scoringConfig(s.cfg.Scheduler)
	return toAPIExplanation(scheduler.Explain(nodes, &req, &cfg)), nil
}

// ExplainSpec evaluates a spec that is not submitted: a what-if, with
// optional overrides of the scheduler settings.
func (s *Server) ExplainSpec(in api.ExplainRequest) (api.Explanation, error) {
	spec := in.TaskSpec
	if len(spec.Command) == 0 {
		spec.Command = []string{"true"} // the command does not affect placement
	}
	spec = withSizeTiers(spec.Normalize(), s.cfg.Scheduler)
	if err := spec.Validate(); err != nil {
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
	now := s.now().UTC()
	nodes, _, fleet, err := nodeViews(st, now, s.cfg.Profiles)
	if err != nil {
		return api.Explanation{}, err
	}
	t := &fsm.Task{ID: "what-if", Spec: fsm.FromSpec(spec)}
	req := t.Request(now, ttl)
	fleet.fill(&req)
	cfg := scoringConfig(s.cfg.Scheduler)
	return toAPIExplanation(scheduler.Explain(nodes, &req, &cfg)), nil
}

// nodeViews builds the scheduler's view of every node at now, with the
// profile parts that depend on the time or on the fleet (measured power
// against the strongest node's, health from the online ratio and recent
// failures), plus a lookup of the records by id and what requests need
// of the fleet. It is computed from the committed state each time: no
// score is cached, so a fact counts as soon as it commits.
func nodeViews(st *fsm.State, now time.Time, pc config.Profiles) ([]*scheduler.Node, func(string) *fsm.Node, *fleetView, error) {
	nodes, err := st.Nodes()
	if err != nil {
		return nil, nil, nil, err
	}
	fleet := &fleetView{st: st}
	var maxPower, maxCPU int64
	for _, n := range nodes {
		maxPower = max(maxPower, n.Profile.Power())
		maxCPU = max(maxCPU, n.Resources.CPUMillis)
		for _, d := range n.Datasets {
			if fleet.datasets == nil {
				fleet.datasets = map[string]int64{}
			}
			fleet.datasets[d.Name] = max(fleet.datasets[d.Name], d.Bytes)
		}
	}
	views := make([]*scheduler.Node, len(nodes))
	byID := make(map[string]*fsm.Node, len(nodes))
	for i, n := range nodes {
		v := n.View()
		switch p := n.Profile.Power(); {
		case p > 0 && maxPower > 0:
			v.Profile.Power = float64(p) / float64(maxPower)
		case maxCPU > 0:
			v.Profile.Power = float64(n.Resources.CPUMillis) / float64(maxCPU)
		}
		blamed, total := n.History.BlamedRate(now, pc.FailureWindow)
		v.Profile.Health = n.OnlineRatio(now)
		if total > 0 {
			v.Profile.Health *= 1 - float64(blamed)/float64(total)
		}
		views[i] = &v
		byID[n.ID] = n
	}
	return views, func(id string) *fsm.Node { return byID[id] }, fleet, nil
}

// fleetView answers what a request needs of the whole fleet: the size of
// each dataset (its largest copy) and each class's median run time.
type fleetView struct {
	st       *fsm.State
	datasets map[string]int64
	medians  map[string]int64
}

// fill completes a request from the fleet: its inputs' sizes and its
// class's median run time.
func (f *fleetView) fill(req *scheduler.Request) {
	for i := range req.Inputs {
		req.Inputs[i].Bytes = f.datasets[req.Inputs[i].Name]
	}
	if req.Class == "" {
		return
	}
	m, ok := f.medians[req.Class]
	if !ok {
		m = f.st.Class(req.Class).Median()
		if f.medians == nil {
			f.medians = map[string]int64{}
		}
		f.medians[req.Class] = m
	}
	req.ClassMedianMillis = m
}

// scoringConfig is the scheduler's scoring as configured. A weighted
// random choice draws from each request's seed, which Task.Request
// derives from the task and its attempt number: committed state, so any
// replica replays the same decision.
func scoringConfig(c config.Scheduler) scheduler.Config {
	w := c.ProfileWeights
	cfg := scheduler.Config{ProfileScale: c.ProfileScale, SpreadWindow: c.SpreadWindow,
		ProfileWeights: scheduler.ProfileWeights{Capacity: w.Capacity, Health: w.Health, Locality: w.Locality, History: w.History}}
	if c.RandomTopK > 1 {
		cfg.RandomTopK = c.RandomTopK
	}
	return cfg
}
