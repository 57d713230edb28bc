package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"herd/api"
)

// NodeBackend registers nodes, keeps their sessions alive, hands them
// their work and lets operators steer them.
type NodeBackend interface {
	// RegisterNode, Heartbeat, SetNodeConditions, DrainNode and
	// SetNodeEligibility are leader-only.
	RegisterNode(ctx context.Context, reg api.NodeRegistration) (api.RegisterResponse, error)
	Heartbeat(ctx context.Context, nodeID string, req api.HeartbeatRequest) (api.HeartbeatResponse, error)
	SetNodeConditions(ctx context.Context, nodeID string, req api.NodeConditionsRequest) (api.Node, error)
	DrainNode(ctx context.Context, nodeID string, enable bool) (api.Node, error)
	SetNodeEligibility(ctx context.Context, nodeID string, eligible bool) (api.Node, error)
	GetNode(id string) (api.Node, error)
	ListNodes() ([]api.Node, error)
	// Assignments blocks until the node's attempts changed after q.Index
	// (and, with q.Known, differ from that set), or q.Wait passed, then
	// answers from the local state.
	Assignments(ctx context.Context, nodeID string, q api.AssignmentsQuery) (api.Assignments, error)
	// NodeImages asks the node's agent about its container runtime and
	// image cache.
	NodeImages(ctx context.Context, nodeID string) (api.ImageCache, error)
	// PullImage has the node's agent pull a registry reference into its
	// cache; ImportImage streams an image archive to it.
	PullImage(ctx context.Context, nodeID, ref string) (api.ImageLoad, error)
	ImportImage(ctx context.Context, nodeID string, archive io.Reader, tags []string) (api.ImageLoad, error)
}

// MaxWait bounds a blocking query.
const MaxWait = 5 * time.Minute

func (h *Handler) nodeRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/nodes", readable, capRead, h.listNodes},
		{http.MethodPost, "/v1/nodes/register", leaderOnly, capAgent, h.postRegisterNode},
		{http.MethodGet, "/v1/nodes/{id}", readable, capAgentOrRead, h.getNode},
		{http.MethodGet, "/v1/nodes/{id}/assignments", readable, capAgentOrRead, h.getAssignments},
		{http.MethodPost, "/v1/nodes/{id}/heartbeat", leaderOnly, capAgent, h.postHeartbeat},
		{http.MethodPut, "/v1/nodes/{id}/conditions", leaderOnly, capAgent, h.putConditions},
		{http.MethodPost, "/v1/nodes/{id}/drain", leaderOnly, capOperator, h.postDrain},
		{http.MethodPost, "/v1/nodes/{id}/eligibility", leaderOnly, capOperator, h.postEligibility},
		{http.MethodGet, "/v1/nodes/{id}/images", local, capRead, h.getNodeImages},
		// A pull fetches what a task naming the reference would; an
		// import decides what a name means on the node for every task
		// after it, so it is an operator's.
		{http.MethodPost, "/v1/nodes/{id}/images/pull", local, capSubmit, h.postImagePull},
		{http.MethodPost, "/v1/nodes/{id}/images/import", local, capOperator, h.postImageImport},
	}
}

func (h *Handler) postImagePull(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.ImagePullRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if req.Ref == "" {
		return nil, badRequest("ref is required: the image reference to pull (REGISTRY/NAME:TAG)")
	}
	// The body is read: a forwarded request carries it again.
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	if h.forwardedUnknownNode(w, r, id) {
		return written, nil
	}
	return h.backend.PullImage(r.Context(), id, req.Ref)
}

// postImageImport streams the body, an image archive, to the node's
// agent; ?tag= (repeated) names the archive's one image.
func (h *Handler) postImageImport(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	if h.forwardedUnknownNode(w, r, id) {
		return written, nil
	}
	load, err := h.backend.ImportImage(r.Context(), id, r.Body, r.URL.Query()["tag"])
	var names []string
	for _, im := range load.Images {
		names = append(names, im.Names...)
	}
	h.audit(r, "image import", fmt.Sprintf("node %s: %s", id, strings.Join(names, ", ")), err)
	return load, err
}

// getNodeImages answers what the node's agent says of its runtime and
// image cache (asked by this replica, whichever it is).
func (h *Handler) getNodeImages(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	if h.forwardedUnknownNode(w, r, id) {
		return written, nil
	}
	return h.backend.NodeImages(r.Context(), id)
}

// forwardedUnknownNode sends a request for a node's agent to the leader,
// its body unread, when this replica does not know the node: one that
// registered a moment ago is known to the leader before a follower has
// applied it. It reports whether it did.
func (h *Handler) forwardedUnknownNode(w http.ResponseWriter, r *http.Request, id string) bool {
	if _, err := h.backend.GetNode(id); !errors.Is(err, api.ErrNotFound) || !h.mayForward(r) {
		return false
	}
	h.forward(w, r)
	return true
}

func (h *Handler) postRegisterNode(w http.ResponseWriter, r *http.Request) (any, error) {
	var reg api.NodeRegistration
	if err := decodeBody(w, r, &reg); err != nil {
		return nil, err
	}
	if err := h.checkNode(r, reg.ID, "register", "node"); err != nil {
		return nil, err
	}
	return h.backend.RegisterNode(r.Context(), reg)
}

func (h *Handler) postHeartbeat(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.HeartbeatRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.Heartbeat(r.Context(), id, req)
}

func (h *Handler) putConditions(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.NodeConditionsRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return h.backend.SetNodeConditions(r.Context(), id, req)
}

func (h *Handler) getAssignments(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	index, err := uintParam(q.Get("index"), "index")
	if err != nil {
		return nil, err
	}
	held, err := uintParam(q.Get("held"), "held")
	if err != nil {
		return nil, err
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxWait {
			return nil, badRequest("wait %q must be a duration from 0 to %s", v, MaxWait)
		}
		wait = d
	}
	as, err := h.backend.Assignments(r.Context(), id, api.AssignmentsQuery{Index: index, Wait: wait, Known: q.Get("known"), Held: held})
	if err != nil {
		return nil, err
	}
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(as.Index, 10))
	return as, nil
}

func (h *Handler) postDrain(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.DrainRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	n, err := h.backend.DrainNode(r.Context(), id, req.Enable)
	h.audit(r, map[bool]string{true: "node drain", false: "node drain off"}[req.Enable], id, err)
	return n, err
}

func (h *Handler) postEligibility(w http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	var req api.EligibilityRequest
	if err := decodeBody(w, r, &req); err != nil {
		return nil, err
	}
	n, err := h.backend.SetNodeEligibility(r.Context(), id, req.Eligible)
	h.audit(r, map[bool]string{true: "node eligible", false: "node ineligible"}[req.Eligible], id, err)
	return n, err
}

func (h *Handler) getNode(_ http.ResponseWriter, r *http.Request) (any, error) {
	id, err := pathID(r, "node")
	if err != nil {
		return nil, err
	}
	return h.backend.GetNode(id)
}

func (h *Handler) listNodes(http.ResponseWriter, *http.Request) (any, error) {
	nodes, err := h.backend.ListNodes()
	if err != nil {
		return nil, err
	}
	return map[string][]api.Node{"nodes": nodes}, nil
}
