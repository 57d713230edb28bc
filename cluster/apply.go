package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"herd/api"
	"herd/fsm"

	"github.com/hashicorp/raft"
)

// apply proposes one command, in an entry shared with the commands
// proposed at the same time (see coalescer), and waits for it to be
// committed and applied on this (leader) replica. A typed FSM rejection
// becomes an API error.
func (r *replica) apply(ctx context.Context, t fsm.MessageType, payload any) (any, uint64, error) {
	buf, err := fsm.Encode(t, payload)
	if err != nil {
		return nil, 0, err
	}
	return r.applied(ctx, r.proposals.propose(ctx, r.stop, buf))
}

func (r *replica) applyRaw(ctx context.Context, buf []byte) (any, uint64, error) {
	timeout := r.applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	f := r.gate.apply(r.raft, buf, timeout)
	if _, refused := f.(refusedFuture); refused {
		return r.applied(ctx, commandResult{err: errShuttingDown})
	}
	if err := r.await(ctx, f); err != nil {
		return r.applied(ctx, commandResult{err: err})
	}
	return r.applied(ctx, commandResult{resp: f.Response(), index: f.Index()})
}

// applied turns a command's outcome into the API's answer: a typed FSM
// rejection becomes an API error, and a wait cut short by ctx says the
// outcome is unknown (the entry may have gone out).
func (r *replica) applied(ctx context.Context, res commandResult) (any, uint64, error) {
	if res.err != nil {
		if ctx.Err() != nil {
			return nil, 0, &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("apply on %s: %w", r.id, ctx.Err())}
		}
		return nil, 0, r.raftErr("apply", res.err)
	}
	if err, ok := res.resp.(error); ok {
		return nil, res.index, fsmErr(err)
	}
	return res.resp, res.index, nil
}

// ApplyCommand proposes an encoded command or batch (for leader loops and
// benchmarks) and returns the FSM's response.
func (r *replica) ApplyCommand(ctx context.Context, buf []byte) (any, uint64, error) {
	return r.applyRaw(ctx, buf)
}

func (r *replica) raftErr(op string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, errShuttingDown):
		// Refused before the entry was appended.
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("%s on %s: %v: %w", op, r.id, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		// The entry may still commit: the outcome is unknown. Clients
		// retry with the same idempotency key.
		return &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("%s on %s: %v (outcome unknown): %w", op, r.id, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%s on %s: %v: %w", op, r.id, err, api.ErrTimeout)
	case noSpace(err):
		// The leader could not store the entry, so it sent it nowhere
		// (raft writes its own log before replicating) and stepped down.
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("%s on %s: no space left on the data directory's disk, nothing written (%v): %w", op, r.id, err, api.ErrUnavailable)}
	}
	return fmt.Errorf("%s on %s: %w", op, r.id, err)
}

// fsmErr turns an FSM rejection into an API error carrying the
// rejection's code: invalid → 400, not found → 404, every other refusal
// (stale result, session changed, conflict, …) → 409.
func fsmErr(err error) error {
	var rej *fsm.Rejection
	if errors.As(err, &rej) {
		sentinel := api.ErrConflict
		switch rej.Code {
		case fsm.RejectInvalid:
			sentinel = api.ErrBadRequest
		case fsm.RejectNotFound:
			sentinel = api.ErrNotFound
		}
		return &api.CodedError{Code: rej.Code, Err: fmt.Errorf("%s: %w", rej.Message, sentinel)}
	}
	return fmt.Errorf("state machine refused the command: %w", err)
}

// noSpace reports whether err is the disk being full. raft reports a log
// store's failure as text, not as a wrapped error, so the text is read
// too.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device")
}
