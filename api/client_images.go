package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// PullImage has a node's agent pull ref from its registry into its cache
// (even when cached: a moved tag is followed), through whichever replica
// answers. It waits as long as the pull takes; ctx bounds it.
func (c *Client) PullImage(ctx context.Context, nodeID, ref string) (ImageLoad, error) {
	body, err := json.Marshal(ImagePullRequest{Ref: ref})
	if err != nil {
		return ImageLoad{}, err
	}
	var out ImageLoad
	err = c.eachReplica(ctx, func(base string) error {
		_, err := c.onceWith(c.untimed(), ctx, http.MethodPost, base+"/v1/nodes/"+url.PathEscape(nodeID)+"/images/pull", body, &out)
		return err
	})
	return out, err
}

// ImportImage uploads an image archive (a docker/podman save tarball or
// an OCI archive) into a node's cache through whichever replica answers;
// tags name an archive's one image. open gives the archive from its
// start, once per replica tried.
func (c *Client) ImportImage(ctx context.Context, nodeID string, open func() (io.ReadCloser, error), tags []string) (ImageLoad, error) {
	path := "/v1/nodes/" + url.PathEscape(nodeID) + "/images/import"
	if len(tags) > 0 {
		path += "?" + url.Values{"tag": tags}.Encode()
	}
	var out ImageLoad
	err := c.eachReplica(ctx, func(base string) error {
		rc, err := open()
		if err != nil {
			return fmt.Errorf("read the archive: %w", err)
		}
		defer rc.Close()
		_, err = c.onceReader(c.untimed(), ctx, http.MethodPost, base+path, rc, "application/x-tar", &out)
		return err
	})
	return out, err
}

// untimed is the client's HTTP client without its overall timeout, for
// requests that last as long as their work (ctx bounds them).
func (c *Client) untimed() *http.Client {
	h := *c.http
	h.Timeout = 0
	return &h
}

// eachReplica calls try with each replica's base address until one
// answers: another is asked only when the last was unreachable or
// unavailable (503), never after a real answer.
func (c *Client) eachReplica(ctx context.Context, try func(base string) error) error {
	var lastErr error
	for _, base := range c.addrs {
		err := try(base)
		if err == nil {
			return nil
		}
		lastErr = err
		var se *StatusError
		if errors.As(err, &se) && se.Code != http.StatusServiceUnavailable {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return lastErr
}
