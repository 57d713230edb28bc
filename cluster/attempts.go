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
func (e *attemptEndpoints) StartAttempt(ctx context.Context, id string, req api.AttemptStartRequest) (api.AttemptReport, error) {
	if !e.r.IsLeader() {
		return api.AttemptReport{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	resp, _, err := e.r.apply(ctx, fsm.MsgAttemptStart, e.attemptStart(id, req.LeaseVersion, e.r.Now().UTC(), req.RunningMs))
	if err != nil {
		return api.AttemptReport{}, err
	}
	r := resp.(*fsm.AttemptResult)
	e.metrics.observeStart(r)
	return api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}, nil
}

// CompleteAttempt commits how an attempt ended (leader-only). A result
// whose lease is not the current attempt's is refused (409) and recorded
// in the task's timeline; the same result twice is accepted once.
func (e *attemptEndpoints) CompleteAttempt(ctx context.Context, id string, req api.AttemptCompleteRequest) (api.AttemptReport, error) {
	if !e.r.IsLeader() {
		return api.AttemptReport{}, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	if req.StartUnreported {
		// The start and the end in one entry, as in a batch.
		out, err := e.ReportAttempts(ctx, []api.AttemptReportItem{{AttemptID: id, Complete: &req}})
		if err != nil {
			return api.AttemptReport{}, err
		}
		return out[0].Report, out[0].Err
	}
	end := e.attemptEnd(id, req)
	resp, _, err := e.r.apply(ctx, fsm.MsgAttemptEnd, end)
	if err != nil {
		return api.AttemptReport{}, err
	}
	r := resp.(*fsm.AttemptResult)
	e.metrics.observeEnd(r)
	return api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}, nil
}

// attemptEnd builds the command for a result report: the state defaults
// from the exit code, and a retry waits longer with each failure so far.
//
// The end is dated when the process ended, as far as the cluster can
// tell: ran_ms after the committed start, never later than now. A result
// that waited on a broken link, a batch or a slow commit then records how
// long the task ran on its node, which is what the node's profile and
// tier are judged by, not how long the report took.
func (e *attemptEndpoints) attemptEnd(id string, req api.AttemptCompleteRequest) fsm.AttemptEndRequest {
	state := fsm.AttemptState(req.State)
	if state == "" {
		state = fsm.AttemptSucceeded
		if req.ExitCode != 0 {
			state = fsm.AttemptFailed
		}
	}
	now := e.r.Now().UTC()
	end := fsm.AttemptEndRequest{
		AttemptID: id, LeaseVersion: req.LeaseVersion, State: state, ExitCode: req.ExitCode,
		OutputTail: req.OutputTail, Error: req.Error, Now: now, RetryAt: now,
	}
	st := e.r.State()
	if a, err := st.Attempt(id); err == nil {
		if ran, ok := agentMillis(req.RanMs); ok && !req.StartUnreported && !a.StartedAt.IsZero() {
			if at := a.StartedAt.Time().Add(ran); at.Before(now) {
				end.Now = at.UTC()
			}
		}
		if t, err := st.Task(a.TaskID); err == nil {
			end.RetryAt = end.Now.Add(e.retryDelay(int(t.Failures) + 1))
		}
	}
	if req.InputUnavailable && state == fsm.AttemptLost {
		// The task waits for its input's holder: it tries again after a
		// while, at no cost, until the holder is back or declared down
		// (then the stage that made the input runs again).
		end.InputUnavailable = true
		end.RetryAt = end.Now.Add(inputRetryDelay)
	}
	return end
}

// inputRetryDelay is how long a task whose input could not be fetched
// waits before it is placed again.
const inputRetryDelay = 5 * time.Second

// ReportAttempts commits a batch of starts and results in one Raft entry
// (leader-only) and answers each as its single request would be.
func (e *attemptEndpoints) ReportAttempts(ctx context.Context, reports []api.AttemptReportItem) ([]api.ReportOutcome, error) {
	if !e.r.IsLeader() {
		return nil, fmt.Errorf("%s: %w", e.r.ID(), api.ErrNotLeader)
	}
	cmds := make([][]byte, 0, len(reports))
	// at[i] is the command that answers report i: a result whose start
	// was never reported is one attempt-run command where every server
	// reads it, else two, its start and then its end.
	at := make([]int, len(reports))
	fold := e.r.State().EveryServerReads(fsm.FormsAttemptRun)
	for i, r := range reports {
		var err error
		switch {
		case r.Start != nil:
			cmds, err = e.appendEncoded(cmds, fsm.MsgAttemptStart, e.attemptStart(r.AttemptID, r.Start.LeaseVersion, e.r.Now().UTC(), r.Start.RunningMs))
		case r.Complete != nil:
			end := e.attemptEnd(r.AttemptID, *r.Complete)
			switch {
			case r.Complete.StartUnreported && fold:
				start := e.attemptStart(end.AttemptID, end.LeaseVersion, end.Now, r.Complete.RanMs)
				cmds, err = e.appendEncoded(cmds, fsm.MsgAttemptRun, fsm.AttemptRunRequest{End: end, StartedAt: start.Now})
			case r.Complete.StartUnreported:
				cmds, err = e.appendEncoded(cmds, fsm.MsgAttemptStart, e.attemptStart(end.AttemptID, end.LeaseVersion, end.Now, r.Complete.RanMs))
				if err == nil {
					cmds, err = e.appendEncoded(cmds, fsm.MsgAttemptEnd, end)
				}
			default:
				cmds, err = e.appendEncoded(cmds, fsm.MsgAttemptEnd, end)
			}
		default:
			err = fmt.Errorf("report %d has neither a start nor a result: %w", i, api.ErrBadRequest)
		}
		if err != nil {
			return nil, err
		}
		at[i] = len(cmds) - 1
	}
	resp, _, err := e.r.applyRaw(ctx, fsm.EncodeBatch(cmds))
	if err != nil {
		return nil, err
	}
	results, ok := resp.(fsm.BatchResult)
	if !ok || len(results) != len(cmds) {
		return nil, fmt.Errorf("report batch: the FSM answered %T for %d commands", resp, len(cmds))
	}
	out := make([]api.ReportOutcome, len(reports))
	for i := range reports {
		if reports[i].Complete != nil && reports[i].Complete.StartUnreported && !fold {
			if r, ok := results[at[i]-1].(*fsm.AttemptResult); ok {
				e.metrics.observeStart(r)
			}
		}
		result := results[at[i]]
		if run, ok := result.(*fsm.AttemptRunResult); ok {
			if run.Start != nil {
				e.metrics.observeStart(run.Start)
			}
			result = run.End
			if run.End == nil {
				result = fmt.Errorf("report %d: the attempt's run has no end result", i)
			}
		}
		switch r := result.(type) {
		case *fsm.AttemptResult:
			if reports[i].Start != nil {
				e.metrics.observeStart(r)
			} else {
				e.metrics.observeEnd(r)
			}
			out[i].Report = api.AttemptReport{Attempt: toAPIAttempt(r.Attempt), Duplicate: r.Duplicate}
		case error:
			out[i].Err = fsmErr(r)
		default:
			out[i].Err = fmt.Errorf("report %d: unexpected answer %T", i, results[at[i]])
		}
	}
	return out, nil
}

// appendEncoded appends a command in the form every server reads.
func (e *attemptEndpoints) appendEncoded(cmds [][]byte, t fsm.MessageType, payload any) ([][]byte, error) {
	b, err := fsm.Encode(t, payload)
	if err != nil {
		return cmds, err
	}
	return append(cmds, b), nil
}

// attemptStart is the command for an attempt's start reported at now,
// the attempt having run for ranMs by then (0 unless its agent started it
// before reporting it): the start is dated that long before now, by the
// agent's measure of the run (a duration, never its clock), kept within
// what the cluster knows (after the reservation, not after now).
func (e *attemptEndpoints) attemptStart(id string, lease uint64, now time.Time, ranMs int64) fsm.AttemptStartRequest {
	at := now
	if ran, ok := agentMillis(ranMs); ok {
		at = now.Add(-ran)
		if a, err := e.r.State().Attempt(id); err == nil {
			if reserved := a.ReservedAt.Time(); at.Before(reserved) {
				at = reserved
			}
		}
	}
	return fsm.AttemptStartRequest{AttemptID: id, LeaseVersion: lease, Now: at.UTC()}
}

// agentMillis reads a duration an agent reports in milliseconds: ok for
// one above zero and short enough not to overflow; other values are
// ignored, as if not reported.
func agentMillis(ms int64) (time.Duration, bool) {
	if ms <= 0 || ms > int64(math.MaxInt64/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// retryDelay is base * factor^(failures-1), capped.
func (e *attemptEndpoints) retryDelay(failures int) time.Duration {
	c := e.sched
	d := float64(c.RetryBase) * math.Pow(c.RetryFactor, float64(max(failures-1, 0)))
	if d > float64(c.RetryCap) || math.IsInf(d, 0) || math.IsNaN(d) {
		return c.RetryCap
	}
	return time.Duration(d)
}

// startWithin is how long from now an agent may run an attempt reserved
// at reservedAt before its start must be committed: what is left of the
// schedule-to-start timeout after which the leader reclaims it (see
// reclaimLoop), less a quarter of the timeout (at least a second) for
// this replica's clock against the leader's and for the answer's way to
// the agent. 0 when too little is left: the agent then runs the attempt
// only once its start is committed.
func (e *attemptEndpoints) startWithin(reservedAt time.Time) time.Duration {
	timeout := e.sched.ScheduleToStartTimeout
	left := timeout - e.r.Now().Sub(reservedAt) - max(timeout/4, time.Second)
	if left < minStartWithin {
		return 0
	}
	return left
}

// minStartWithin is the least time to run an attempt before its start is
// committed that is worth giving an agent: less would be used up by the
// start report's own way.
const minStartWithin = 500 * time.Millisecond

// Assignments answers a node's blocking query from the local state: it
// returns once an attempt on the node changed after q.Index (a new
// reservation, a cancel, a reclaim) and, if the node said what it knows
// (q.Known), the live set differs from that; or when q.Wait passes.
func (e *attemptEndpoints) Assignments(ctx context.Context, nodeID string, q api.AssignmentsQuery) (api.Assignments, error) {
	deadline := time.Now().Add(q.Wait)
	for {
		ws := fsm.NewWatchSet()
		st := e.r.State()
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
				t, err := st.Task(a.TaskID)
				if err != nil {
					continue
				}
				x.StartWithinMs = e.startWithin(a.ReservedAt.Time()).Milliseconds()
				x.EarlierSession = a.LeaseVersion < node.SessionIndex
				// One reserved at or before the list the agent holds was in
				// that list, whole (it lists every live attempt of the node):
				// its spec is not sent again. Inputs are, as their sources
				// may have changed since.
				if a.CreateIndex <= q.Held && len(t.Spec.Inputs) == 0 {
					x.Held = true
				} else {
					x.Attempt = toAPIAttempt(a)
					x.Spec = t.Spec.Spec()
					x.Inputs = inputSources(st, node.ID, t.Spec.Inputs)
				}
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
