package httpapi

import "herd/api"
import "net/http"

// StatusBackend answers what a replica knows about itself and the cluster.
type StatusBackend interface {
	Self() api.SelfInfo
	GossipInfo() api.GossipInfo
	Leader() (api.LeaderInfo, error)
	RaftConfiguration() (api.RaftConfiguration, error)
	RaftStats() map[string]string
	// SchedulerStatus is leader-only: only the leader schedules.
	SchedulerStatus() api.SchedulerStatus
	// CheckState checks the invariants of this replica's applied state.
	CheckState() api.StateCheck
	// Metrics serves the replica's metrics in Prometheus' text format.
	Metrics() http.Handler
}

func (h *Handler) statusRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/status/leader", local, capAnyone, h.getLeader},
		{http.MethodGet, "/v1/status/self", local, capAnyone, h.getSelf},
		{http.MethodGet, "/v1/status/gossip", local, capAnyone, h.getGossip},
		{http.MethodGet, "/v1/operator/raft/configuration", local, capRead, h.getRaftConfiguration},
		{http.MethodGet, "/v1/operator/raft/stats", local, capRead, h.getRaftStats},
		{http.MethodGet, "/v1/operator/scheduler", leaderOnly, capRead, h.getScheduler},
		{http.MethodGet, "/v1/operator/debug/check-state", local, capOperator, h.getCheckState},
		{http.MethodGet, "/metrics", local, capRead, h.getMetrics},
	}
}

// getMetrics answers from this replica: each replica is scraped on its
// own (its Raft state, its process).
func (h *Handler) getMetrics(w http.ResponseWriter, r *http.Request) (any, error) {
	h.backend.Metrics().ServeHTTP(w, r)
	return written, nil
}

func (h *Handler) getLeader(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.Leader()
}

func (h *Handler) getSelf(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.Self(), nil
}

func (h *Handler) getGossip(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.GossipInfo(), nil
}

func (h *Handler) getRaftConfiguration(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.RaftConfiguration()
}

func (h *Handler) getRaftStats(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.RaftStats(), nil
}

func (h *Handler) getScheduler(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.SchedulerStatus(), nil
}

// getCheckState answers from this replica: every replica checks its own
// copy of the state, so an operator asks each of them.
func (h *Handler) getCheckState(http.ResponseWriter, *http.Request) (any, error) {
	return h.backend.CheckState(), nil
}
