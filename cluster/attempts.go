package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"herd/api"
	"herd/fsm"
	"herd/scheduler"
)

// StartAttempt commits that an attempt started (leader-only), fenced by
// its lease.
func (s *Server) StartAttempt(ctx context.Context, id string, req api.AttemptStartRequest) (api.AttemptReport, error) {
	if !s.IsLeader() {
		return api.AttemptReport{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	resp, _, err := s.apply(ctx, fsm.MsgAttemptStart, fsm.AttemptStartRequest{AttemptID: id, LeaseVersion: req.LeaseVersion, Now: s.now().UTC()})
	if err != nil {
		return api.AttemptReport{}, err
	}
	r := resp.(*fsm.AttemptResult)
	s.metrics.observeStart(r)
	return api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}, nil
}

// CompleteAttempt commits how an attempt ended (leader-only). A result
// whose lease is not the current attempt's is refused (409) and recorded
// in the task's timeline; the same result twice is accepted once.
func (s *Server) CompleteAttempt(ctx context.Context, id string, req api.AttemptCompleteRequest) (api.AttemptReport, error) {
	if !s.IsLeader() {
		return api.AttemptReport{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	end := s.attemptEnd(id, req)
	resp, _, err := s.apply(ctx, fsm.MsgAttemptEnd, end)
	if err != nil {
		return api.AttemptReport{}, err
	}
	r := resp.(*fsm.AttemptResult)
	s.metrics.observeEnd(r)
	return api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}, nil
}

// attemptEnd builds the command for a result report: the state defaults
// from the exit code, and a retry waits longer with each failure so far.
func (s *Server) attemptEnd(id string, req api.AttemptCompleteRequest) fsm.AttemptEndRequest {
	state := fsm.AttemptState(req.State)
	if state == "" {
		state = fsm.AttemptSucceeded
		if req.ExitCode != 0 {
			state = fsm.AttemptFailed
		}
	}
	now := s.now().UTC()
	end := fsm.AttemptEndRequest{
		AttemptID: id, LeaseVersion: req.LeaseVersion, State: state, ExitCode: req.ExitCode,
		OutputTail: req.OutputTail, Error: req.Error, Now: now, RetryAt: now,
	}
	st := s.fsm.State()
	if a, err := st.Attempt(id); err == nil {
		if t, err := st.Task(a.TaskID); err == nil {
			end.RetryAt = now.Add(s.retryDelay(int(t.Failures) + 1))
		}
	}
	return end
}

// ReportAttempts commits a batch of starts and results in one Raft entry
// (leader-only) and answers each as its single request would be.
func (s *Server) ReportAttempts(ctx context.Context, reports []api.AttemptReportItem) ([]api.ReportOutcome, error) {
	if !s.IsLeader() {
		return nil, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	cmds := make([][]byte, len(reports))
	for i, r := range reports {
		var err error
		switch {
		case r.Start != nil:
			cmds[i], err = s.encode(fsm.MsgAttemptStart, fsm.AttemptStartRequest{AttemptID: r.AttemptID, LeaseVersion: r.Start.LeaseVersion, Now: s.now().UTC()})
		case r.Complete != nil:
			cmds[i], err = s.encode(fsm.MsgAttemptEnd, s.attemptEnd(r.AttemptID, *r.Complete))
		default:
			err = fmt.Errorf("report %d has neither a start nor a result: %w", i, api.ErrBadRequest)
		}
		if err != nil {
			return nil, err
		}
	}
	resp, _, err := s.applyRaw(ctx, fsm.EncodeBatch(cmds))
	if err != nil {
		return nil, err
	}
	results, ok := resp.(fsm.BatchResult)
	if !ok || len(results) != len(reports) {
		return nil, fmt.Errorf("report batch: the FSM answered %T for %d reports", resp, len(reports))
	}
	out := make([]api.ReportOutcome, len(results))
	for i, res := range results {
		switch r := res.(type) {
		case *fsm.AttemptResult:
			if reports[i].Start != nil {
				s.metrics.observeStart(r)
			} else {
				s.metrics.observeEnd(r)
			}
			out[i].Report = api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}
		case error:
			out[i].Err = fsmErr(r)
		default:
			out[i].Err = fmt.Errorf("report %d: unexpected answer %T", i, res)
		}
	}
	return out, nil
}

// retryDelay is base * factor^(failures-1), capped.
func (s *Server) retryDelay(failures int) time.Duration {
	c := s.cfg.Scheduler
	d := float64(c.RetryBase) * math.Pow(c.RetryFactor, float64(max(failures-1, 0)))
	if d > float64(c.RetryCap) || math.IsInf(d, 0) || math.IsNaN(d) {
		return c.RetryCap
	}
	return time.Duration(d)
}

// Assignments answers a node's blocking query from the local state: it
// returns once an attempt on the node changed after q.Index (a new
// reservation, a cancel, a reclaim) and, if the node said what it knows
// (q.Known), the live set differs from that; or when q.Wait passes.
func (s *Server) Assignments(ctx context.Context, nodeID string, q api.AssignmentsQuery) (api.Assignments, error) {
	deadline := time.Now().Add(q.Wait)
	for {
		ws := fsm.NewWatchSet()
		st := s.fsm.State()
		node, err := st.Node(nodeID)
		if errors.Is(err, fsm.ErrNotFound) {
			// A follower may not have applied the registration yet: wait
			// for the node to appear rather than answer 404 at once.
			remaining := time.Until(deadline)
			if remaining <= 0 {
				return api.Assignments{}, fmt.Errorf("node %q not found: %w", nodeID, api.ErrNotFound)
			}
			if err := st.WatchNodes(ws); err != nil {
				return api.Assignments{}, err
			}
			wctx, cancel := context.WithTimeout(ctx, remaining)
			_ = ws.WatchCtx(wctx)
			cancel()
			if ctx.Err() != nil {
				return api.Assignments{}, ctx.Err()
			}
			continue
		}
		if err != nil {
			return api.Assignments{}, err
		}
		attempts, err := st.LiveAttemptsOnNode(nodeID, ws)
		if err != nil {
			return api.Assignments{}, err
		}
		// The index moves when a live attempt changes, and when one ends or
		// is added: both rewrite the node record (its reservations).
		out := api.Assignments{NodeID: node.ID, SessionGeneration: node.SessionGeneration, Liveness: string(node.Liveness), Index: max(1, node.ModifyIndex), AppliedIndex: st.Index(), Attempts: make([]api.Assignment, 0, len(attempts)),
			HealthCheck: node.HealthCheck.Requested, Rebench: node.RebenchRequested}
		for _, a := range attempts {
			out.Index = max(out.Index, a.ModifyIndex)
			// Only an attempt still to start needs its spec and times: the
			// agent running one has them, and with every slot busy the
			// running attempts would be most of each answer's encoding here
			// and decoding at the agent.
			x := api.Assignment{Attempt: api.Attempt{ID: a.ID, TaskID: a.TaskID, Number: a.Number, State: string(a.State), LeaseVersion: a.LeaseVersion}}
			if a.State == fsm.AttemptReserved {
				x.Attempt = toAPIAttempt(a)
				t, err := st.Task(a.TaskID)
				if err != nil {
					continue
				}
				x.Spec = toAPISpec(t.Spec)
				x.Inputs = inputSources(st, node.ID, t.Spec.Inputs)
			}
			out.Attempts = append(out.Attempts, x)
		}
		remaining := time.Until(deadline)
		if out.Index > q.Index && (q.Known == "" || out.Digest() != q.Known) || remaining <= 0 {
			return out, nil
		}
		wctx, cancel := context.WithTimeout(ctx, remaining)
		err = ws.WatchCtx(wctx)
		cancel()
		if ctx.Err() != nil {
			return api.Assignments{}, ctx.Err()
		}
		_ = err // timed out or changed: look again
	}
}

// inputSources says where the inputs a node does not hold are: for each,
// the first node (by id) that holds it, is not DOWN and serves datasets.
func inputSources(st *fsm.State, self string, inputs []string) []api.InputSource {
	if len(inputs) == 0 {
		return nil
	}
	nodes, err := st.Nodes()
	if err != nil {
		return nil
	}
	var out []api.InputSource
	for _, name := range inputs {
		for _, n := range nodes {
			if n.ID == self || n.DataAddress == "" || n.Liveness == scheduler.LivenessDown {
				continue
			}
			if _, held := slices.BinarySearchFunc(n.Datasets, name, func(d scheduler.Dataset, name string) int { return strings.Compare(d.Name, name) }); held {
				out = append(out, api.InputSource{Dataset: name, NodeID: n.ID, Address: n.DataAddress})
				break
			}
		}
	}
	return out
}
