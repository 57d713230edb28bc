package httpapi

import (
	"context"
	"herd/api"
	"net/http"
	"strconv"
)

// ProfileBackend takes what agents measure and check of their nodes and
// lets operators steer tiers. Every method is leader-only.
type ProfileBackend interface {
	// ReportProfile commits a node's new measurement (a rebench).
	ReportProfile(ctx context.Context, nodeID string, r api.NodeProfileReport) (api.Node, error)
	// ReportDatasets replaces the datasets a node holds.
	ReportDatasets(ctx context.Context, nodeID string, r api.NodeDatasetsReport) (api.Node, error)
	// ReportHealthCheck records a node's answer to a health check.
	ReportHealthCheck(ctx context.Context, nodeID string, r api.HealthCheckReport) (api.Node, error)
	// SetNodeTier pins a node's tier, or unpins it with "auto".
	SetNodeTier(ctx context.Context, nodeID string, r api.NodeTierRequest) (api.Node, error)
	// RequestRebench and RequestHealthCheck ask a node's agent to measure
	// its node again, or to run its health check.
	RequestRebench(ctx context.Context, nodeID string) (api.Node, error)
	RequestHealthCheck(ctx context.Context, nodeID string) (api.Node, error)
}

func (h *Handler) profileRoutes() []route {
	return []route{
		{http.MethodPut, "/v1/nodes/{id}/profile", leaderOnly, capAgent, h.putProfile},
		{http.MethodPut, "/v1/nodes/{id}/datasets", leaderOnly, capAgent, h.putDatasets},
		{http.MethodPost, "/v1/nodes/{id}/health-check", leaderOnly, capAgent, h.postHealthCheck},
		{http.MethodPost, "/v1/nodes/{id}/health-check/request", leaderOnly, capOperator, h.postHealthCheckRequest},
		{http.MethodPost, "/v1/nodes/{id}/tier", leaderOnly, capOperator, h.postTier},
		{http.MethodPost, "/v1/nodes/{id}/rebench", leaderOnly, capOperator, h.postRebench},
		{http.MethodGet, "/v1/nodes/{id}/probe", local, capAgent, h.getProbe},
	}
}

// MaxProbeBytes bounds what a network probe asks a server to send.
const MaxProbeBytes = 4 << 20

// probeZeros is what a probe answer is written from.
var probeZeros = make([]byte, 64<<10)

// getProbe answers an agent measuring its link to the servers:
// ?bytes=N (at most MaxProbeBytes) of zeros, no storage or Raft touched.
func (h *Handler) getProbe(w http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := pathID(r, "node"); err != nil {
		return nil, err
	}
	n := int64(0)
	if v := r.URL.Query().Get("bytes"); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 0 || n > MaxProbeBytes {
			return nil, badRequest("bytes %q: want 0..%d", v, MaxProbeBytes)
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	for n > 0 {
		k := min(n, int64(len(probeZeros)))
		if _, err := w.Write(probeZeros[:k]); err != nil {
			break
		}
		n -= k
	}
	return written, nil
}

func (h *Handler) putProfile(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.NodeProfileReport
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.ReportProfile(r.Context(), id, req)
}

func (h *Handler) putDatasets(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.NodeDatasetsReport
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.ReportDatasets(r.Context(), id, req)
}

func (h *Handler) postHealthCheck(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.HealthCheckReport
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.ReportHealthCheck(r.Context(), id, req)
}

func (h *Handler) postHealthCheckRequest(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	n, err := h.backend.RequestHealthCheck(r.Context(), id)
	h.audit(r, "node health check", id, err)
	return n, err
}

func (h *Handler) postTier(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.NodeTierRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	switch req.Tier {
	case "L1", "L2", "L3", "auto":
	default:
		return nil, badRequest("tier %q must be L1, L2, L3 or auto", req.Tier)
	}
	n, err := h.backend.SetNodeTier(r.Context(), id, req)
	h.audit(r, "node tier "+req.Tier, id, err)
	return n, err
}

func (h *Handler) postRebench(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	n, err := h.backend.RequestRebench(r.Context(), id)
	h.audit(r, "node rebench", id, err)
	return n, err
}
