package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"herd/api"
	"herd/fsm"
	"herd/internal/pki"
	"herd/scheduler"
)

// TaskLog streams an attempt's log (attempt 0: the latest) from the agent
// of the node that ran it, which keeps it on its disk: the last tail
// bytes when tail > 0, and, with follow, what the attempt writes until it
// ends. A node that is DOWN, serves no logs or cannot be reached is a
// conflict that says so; the last 64 KiB of the output stay in the
// attempt's record either way.
func (e *agentEndpoints) TaskLog(ctx context.Context, w http.ResponseWriter, taskID string, number int, tail int64, follow bool) error {
	st := e.r.State()
	attempts, err := st.AttemptsOfTask(taskID)
	if err != nil {
		return err
	}
	if _, err := st.Task(taskID); errors.Is(err, fsm.ErrNotFound) {
		return fmt.Errorf("task %q not found: %w", taskID, api.ErrNotFound)
	}
	var a *fsm.Attempt
	for _, x := range attempts {
		if (number == 0 && (a == nil || x.Number > a.Number)) || x.Number == number {
			a = x
		}
	}
	if a == nil {
		if number == 0 {
			return fmt.Errorf("task %s has no attempt yet: %w", taskID, api.ErrConflict)
		}
		return fmt.Errorf("task %s has no attempt %d: %w", taskID, number, api.ErrNotFound)
	}
	node, err := st.Node(a.NodeID)
	switch {
	case err != nil:
		return fmt.Errorf("node %s of attempt %d is gone; its last 64 KiB of output are in the task's record: %w", a.NodeID, a.Number, api.ErrConflict)
	case node.Liveness == scheduler.LivenessDown:
		return fmt.Errorf("node %s, which ran attempt %d, is DOWN: its log cannot be read now; the last 64 KiB of output are in the task's record (herd task status): %w", node.ID, a.Number, api.ErrConflict)
	case node.DataAddress == "":
		return fmt.Errorf("node %s serves no logs (an agent older than this build); the last 64 KiB of output are in the task's record: %w", node.ID, api.ErrConflict)
	}
	q := url.Values{}
	if tail > 0 {
		q.Set("tail", strconv.FormatInt(tail, 10))
	}
	if follow {
		q.Set("follow", "true")
	}
	scheme, client, done := e.agentClient(node.ID)
	defer done()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+node.DataAddress+"/v1/logs/"+url.PathEscape(a.ID)+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("node %s cannot be reached for the log of attempt %d (%v); the last 64 KiB of output are in the task's record: %w", node.ID, a.Number, err, api.ErrConflict)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		sentinel := api.ErrConflict
		if resp.StatusCode == http.StatusNotFound {
			sentinel = api.ErrNotFound
		}
		return fmt.Errorf("node %s: %s: %w", node.ID, trimNL(string(msg)), sentinel)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Herd-Attempt", strconv.Itoa(a.Number))
	w.Header().Set("X-Herd-Node", node.ID)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return nil
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// agentClient reaches node nodeID's data address: over TLS with this
// server's certificate when the cluster has one, to the holder of that
// node's agent certificate only.
func (e *agentEndpoints) agentClient(nodeID string) (scheme string, client *http.Client, done func()) {
	if e.tls == nil {
		return "http", &http.Client{}, func() {}
	}
	tr := &http.Transport{DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return pki.Dial(ctx, (&net.Dialer{Timeout: 10 * time.Second}).DialContext, addr, e.tls.ClientConfigFor(pki.Identity{Role: pki.RoleAgent, ID: nodeID}))
	}}
	return "https", &http.Client{Transport: tr}, tr.CloseIdleConnections
}

func trimNL(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
