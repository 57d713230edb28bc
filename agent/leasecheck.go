package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"herd/api"
)

// A task can ask its agent whether its attempt is still the current one
// before it writes anything outside herd: a fencing token check, done
// with the attempt id and lease version (HERD_ATTEMPT_ID, HERD_LEASE)
// instead of a lock's timeout. The agent answers over a Unix socket in
// its data directory (HERD_AGENT_ADDR, "unix:" and the path), which only
// processes on the node that may open the file can reach. The attempt is
// current when this agent runs it under that lease, holds a lease from
// the cluster, and the leader confirms the attempt RUNNING under that
// lease version (a consistent read): a task that checks after its node
// was declared DOWN, or after its attempt was replaced, is told it is
// not. When the agent cannot ask the leader it says so (503): a write
// that must not happen twice must not happen then either.

// leaseSocket is the socket's name in the data directory.
const leaseSocket = "agent.sock"

// LeaseAddr is the address tasks find in HERD_AGENT_ADDR; empty when the
// socket could not be made (a data directory whose path is too long for
// a socket's).
func (a *Agent) LeaseAddr() string {
	if p := a.leaseAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// serveLeaseChecks answers lease checks until ctx ends.
func (a *Agent) serveLeaseChecks(ctx context.Context) error {
	path := filepath.Join(a.cfg.DataDir, leaseSocket)
	_ = os.Remove(path) // a previous run's
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("lease check socket: %w", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return fmt.Errorf("lease check socket: %w", err)
	}
	addr := "unix:" + path
	a.leaseAddr.Store(&addr)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/lease", a.handleLeaseCheck)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

func (a *Agent) handleLeaseCheck(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	attempt := q.Get("attempt")
	lease, err := strconv.ParseUint(q.Get("lease"), 10, 64)
	if attempt == "" || err != nil {
		writeLease(w, http.StatusBadRequest, api.LeaseCheck{Reason: "attempt and a numeric lease are required"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	status, answer := a.checkLease(ctx, attempt, lease)
	writeLease(w, status, answer)
}

func writeLease(w http.ResponseWriter, status int, answer api.LeaseCheck) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(answer)
}

// checkLease decides: 200 current, 409 not current, 503 cannot tell.
func (a *Agent) checkLease(ctx context.Context, attempt string, lease uint64) (int, api.LeaseCheck) {
	notCurrent := func(why string) (int, api.LeaseCheck) {
		return http.StatusConflict, api.LeaseCheck{Attempt: attempt, Lease: lease, Reason: why}
	}
	a.mu.Lock()
	ex := a.running[attempt]
	var taskID string
	var fenced bool
	var held uint64
	if ex != nil {
		taskID, fenced, held = ex.assignment.Attempt.TaskID, ex.fenced, ex.assignment.Attempt.LeaseVersion
	}
	a.mu.Unlock()
	switch {
	case ex == nil:
		return notCurrent("the attempt does not run on this node")
	case held != lease:
		return notCurrent(fmt.Sprintf("the attempt runs under lease %d, not %d", held, lease))
	case fenced:
		return notCurrent("the agent stopped the attempt: its lease from the cluster ran out")
	}
	if ttl, left, _ := a.lease.state(time.Now()); ttl > 0 && left <= 0 {
		return notCurrent("the agent has no lease from the cluster")
	}
	task, _, err := a.client.GetTask(ctx, taskID, api.ReadOptions{Consistent: true})
	var se *api.StatusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
		return notCurrent("the cluster no longer knows the task")
	case err != nil:
		return http.StatusServiceUnavailable, api.LeaseCheck{Attempt: attempt, Lease: lease, Reason: "cannot reach the cluster's leader to confirm: " + err.Error()}
	}
	for _, at := range task.Attempts {
		if at.ID != attempt {
			continue
		}
		if at.State != api.AttemptRunning || at.LeaseVersion != lease {
			return notCurrent(fmt.Sprintf("the cluster has the attempt %s under lease %d", at.State, at.LeaseVersion))
		}
		return http.StatusOK, api.LeaseCheck{Current: true, Attempt: attempt, Lease: lease}
	}
	return notCurrent("the cluster does not list the attempt")
}
