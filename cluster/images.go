package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"herd/api"
	"herd/fsm"
	"herd/internal/pki"
	"herd/scheduler"
)

// agentEndpoints serve what a replica asks of a node's agent for a
// client: its image cache, pulls and imports into it, an attempt's log.
// They need the applied state (a node's liveness and the address its
// agent serves at) and this server's certificate, to reach the agent
// over mutual TLS when the cluster has one.
type agentEndpoints struct {
	r   interface{ State() *fsm.State }
	tls *pki.Material
}

// NodeImages asks a node's agent about its container runtime and image
// cache; a node that is DOWN or cannot be reached is a conflict saying so.
func (e *agentEndpoints) NodeImages(ctx context.Context, nodeID string) (api.ImageCache, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out api.ImageCache
	err := e.askAgent(ctx, nodeID, http.MethodGet, "/v1/images", nil, "", &out)
	return out, err
}

// PullImage has a node's agent pull ref from its registry into its
// cache, even when the cache holds the reference already (a moved tag is
// followed). It takes as long as the pull: the caller's context bounds it.
func (e *agentEndpoints) PullImage(ctx context.Context, nodeID, ref string) (api.ImageLoad, error) {
	body, err := json.Marshal(api.ImagePullRequest{Ref: ref})
	if err != nil {
		return api.ImageLoad{}, err
	}
	var out api.ImageLoad
	err = e.askAgent(ctx, nodeID, http.MethodPost, "/v1/images/pull", bytes.NewReader(body), "application/json", &out)
	return out, err
}

// ImportImage streams an image archive to a node's agent, which stores
// its images under their names and tags.
func (e *agentEndpoints) ImportImage(ctx context.Context, nodeID string, archive io.Reader, tags []string) (api.ImageLoad, error) {
	q := url.Values{"tag": tags}
	path := "/v1/images/import"
	if len(tags) > 0 {
		path += "?" + q.Encode()
	}
	var out api.ImageLoad
	err := e.askAgent(ctx, nodeID, http.MethodPost, path, archive, "application/x-tar", &out)
	return out, err
}

// askAgent sends a request to a node's agent at its data address and
// decodes its JSON answer into out. The agent's refusal of the request
// itself (4xx) is the caller's bad request; a node unknown is not found;
// a node DOWN, unreachable or failing otherwise is a conflict, each
// saying which node and why.
func (e *agentEndpoints) askAgent(ctx context.Context, nodeID, method, path string, body io.Reader, contentType string, out any) error {
	node, err := e.r.State().Node(nodeID)
	switch {
	case errors.Is(err, fsm.ErrNotFound):
		return fmt.Errorf("node %q not found: %w", nodeID, api.ErrNotFound)
	case err != nil:
		return err
	case node.Liveness == scheduler.LivenessDown:
		return fmt.Errorf("node %s is DOWN: its agent cannot be asked now: %w", node.ID, api.ErrConflict)
	case node.DataAddress == "":
		return fmt.Errorf("node %s serves no data port (an agent older than this build): %w", node.ID, api.ErrConflict)
	}
	scheme, client, done := e.agentClient(node.ID)
	defer done()
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+node.DataAddress+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("node %s cannot be reached (%v): %w", node.ID, err, api.ErrConflict)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, api.MaxErrorText))
		msg := trimNL(string(raw))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		sentinel := api.ErrConflict
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge {
			sentinel = api.ErrBadRequest
		}
		return fmt.Errorf("node %s: %s: %w", node.ID, msg, sentinel)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out); err != nil {
		return fmt.Errorf("node %s: its answer: %v: %w", node.ID, err, api.ErrConflict)
	}
	return nil
}
