package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"herd/api"
	"herd/fsm"

	"github.com/hashicorp/raft"
)

// Join adds a server as a voter (leader-only) and records its addresses.
// Joining again with the same id and address only refreshes the record.
func (s *Server) Join(ctx context.Context, req api.JoinRequest) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read raft configuration: %w", err)
	}
	if req.UpdateOnly && !slices.ContainsFunc(f.Configuration().Servers, func(srv raft.Server) bool { return srv.ID == raft.ServerID(req.ID) }) {
		return fmt.Errorf("server %s is not in the raft configuration (removed?): %w", req.ID, api.ErrNotFound)
	}
	member := false
	for _, srv := range f.Configuration().Servers {
		sameID := srv.ID == raft.ServerID(req.ID)
		sameAddr := srv.Address == raft.ServerAddress(req.RaftAddress)
		switch {
		case sameID && sameAddr:
			member = true
		case sameID || sameAddr:
			// A server came back on a new address, or a new server took an
			// old one's address: drop the stale entry first (as Consul does).
			if srv.ID == raft.ServerID(s.cfg.ID) {
				return fmt.Errorf("join of %s at %s conflicts with the leader itself: %w", req.ID, req.RaftAddress, api.ErrConflict)
			}
			s.logger.Info("removing stale raft peer before join", "id", srv.ID, "address", srv.Address)
			if err := s.raft.RemoveServer(srv.ID, 0, s.cfg.Raft.ApplyTimeout).Error(); err != nil {
				return s.raftErr("remove stale peer", err)
			}
		}
	}
	if !member {
		// A member's record is always updated (it says what the server
		// reads now, and the leader follows it); a newcomer must read
		// what the cluster writes.
		if err := s.checkJoinForms(req); err != nil {
			return err
		}
		s.logger.Info("adding voter", "id", req.ID, "address", req.RaftAddress)
		if err := s.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddress), 0, s.cfg.Raft.ApplyTimeout).Error(); err != nil {
			return s.raftErr("add voter", err)
		}
	}
	return s.upsertServerMeta(ctx, req)
}

func (s *Server) upsertServerMeta(ctx context.Context, req api.JoinRequest) error {
	if have, err := s.fsm.State().Server(req.ID); err == nil && sameServerMeta(have, req) {
		return nil
	}
	_, _, err := s.apply(ctx, fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{
		ID: req.ID, RaftAddress: req.RaftAddress, HTTPAddress: req.HTTPAddress, GossipAddress: req.GossipAddress, CommandForms: req.CommandForms,
	}})
	if err == nil && s.IsLeader() {
		s.refreshCommandForms()
	}
	return err
}

// RemovePeer removes a server from the Raft configuration (leader-only).
func (s *Server) RemovePeer(ctx context.Context, id string) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read raft configuration: %w", err)
	}
	found := false
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(id) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("server %q is not in the raft configuration: %w", id, api.ErrNotFound)
	}
	s.logger.Info("removing raft peer", "id", id)
	if err := s.raft.RemoveServer(raft.ServerID(id), 0, s.cfg.Raft.ApplyTimeout).Error(); err != nil {
		return s.raftErr("remove peer", err)
	}
	if id == s.cfg.ID {
		return nil // we stepped down; the next leader keeps the stale record harmlessly
	}
	_, _, err := s.apply(ctx, fsm.MsgRemoveServer, fsm.RemoveServerRequest{ID: id})
	return err
}

// TransferLeadership hands leadership to another voter (leader-only) and
// waits until this replica sees the new leader.
func (s *Server) TransferLeadership(ctx context.Context, targetID string) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	var fut raft.Future
	if targetID == "" {
		fut = s.raft.LeadershipTransfer()
	} else {
		if targetID == s.cfg.ID {
			return fmt.Errorf("%s already leads: %w", targetID, api.ErrBadRequest)
		}
		f := s.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return fmt.Errorf("read raft configuration: %w", err)
		}
		var addr raft.ServerAddress
		for _, srv := range f.Configuration().Servers {
			if srv.ID == raft.ServerID(targetID) && srv.Suffrage == raft.Voter {
				addr = srv.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("server %q is not a voter: %w", targetID, api.ErrNotFound)
		}
		fut = s.raft.LeadershipTransferToServer(raft.ServerID(targetID), addr)
	}
	if err := fut.Error(); err != nil {
		return s.raftErr("transfer leadership", err)
	}
	for {
		if _, id := s.raft.LeaderWithID(); id != "" && id != raft.ServerID(s.cfg.ID) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for new leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
