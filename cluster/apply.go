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
func (s *Server) apply(ctx context.Context, t fsm.MessageType, payload any) (any, uint64, error) {
	buf, err := s.encode(t, payload)
	if err != nil {
		return nil, 0, err
	}
	r := s.proposals.propose(ctx, s.shutdownCtx.Done(), buf)
	return s.applied(ctx, r)
}

func (s *Server) applyRaw(ctx context.Context, buf []byte) (any, uint64, error) {
	timeout := s.cfg.Raft.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	f := s.gate.apply(s.raft, buf, timeout)
	if _, refused := f.(refusedFuture); refused {
		return s.applied(ctx, commandResult{err: errShuttingDown})
	}
	if err := s.await(ctx, f); err != nil {
		return s.applied(ctx, commandResult{err: err})
	}
	return s.applied(ctx, commandResult{resp: f.Response(), index: f.Index()})
}

// applied turns a command's outcome into the API's answer: a typed FSM
// rejection becomes an API error, and a wait cut short by ctx says the
// outcome is unknown (the entry may have gone out).
func (s *Server) applied(ctx context.Context, r commandResult) (any, uint64, error) {
	if r.err != nil {
		if ctx.Err() != nil {
			return nil, 0, &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("apply on %s: %w", s.cfg.ID, ctx.Err())}
		}
		return nil, 0, s.raftErr("apply", r.err)
	}
	if err, ok := r.resp.(error); ok {
		return nil, r.index, fsmErr(err)
	}
	return r.resp, r.index, nil
}

// ApplyCommand proposes an encoded command or batch (for leader loops and
// benchmarks) and returns the FSM's response.
func (s *Server) ApplyCommand(ctx context.Context, buf []byte) (any, uint64, error) {
	return s.applyRaw(ctx, buf)
}

func (s *Server) raftErr(op string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, errShuttingDown):
		// Refused before the entry was appended.
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("%s on %s: %v: %w", op, s.cfg.ID, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		// The entry may still commit: the outcome is unknown. Clients
		// retry with the same idempotency key.
		return &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("%s on %s: %v (outcome unknown): %w", op, s.cfg.ID, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%s on %s: %v: %w", op, s.cfg.ID, err, api.ErrTimeout)
	case noSpace(err):
		// The leader could not store the entry, so it sent it nowhere
		// (raft writes its own log before replicating) and stepped down.
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("%s on %s: no space left on the data directory's disk, nothing written (%v): %w", op, s.cfg.ID, err, api.ErrUnavailable)}
	}
	return fmt.Errorf("%s on %s: %w", op, s.cfg.ID, err)
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
