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
