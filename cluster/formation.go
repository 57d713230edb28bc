package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
)

// formCluster brings a server without Raft state into a cluster:
//   - bootstrap: a one-server cluster of itself;
//   - bootstrap_expect N with join: ask the join addresses who they are
//     until N servers without state are known, then every one of them
//     bootstraps the same configuration (identical configurations are safe
//     to bootstrap concurrently); if one of them already belongs to a
//     cluster, join that cluster instead;
//   - join only: ask the join addresses to add it until one succeeds.
//
// A server restarted with state does none of this: it resumes from disk.
func (s *Server) formCluster() {
	hasState, err := raft.HasExistingState(s.store, s.store, s.snaps)
	if err != nil {
		s.logger.Error("cannot inspect raft state", "error", err)
		return
	}
	if hasState {
		s.logger.Info("resuming from existing raft state")
		return
	}
	switch {
	case s.cfg.Bootstrap:
		s.bootstrap([]api.SelfInfo{s.Self()})
	case s.cfg.BootstrapExpect > 0:
		s.bootstrapExpect()
	case len(s.cfg.Join) > 0:
		s.joinLoop()
	default:
		s.logger.Warn("no raft state and neither bootstrap nor join configured: waiting to be added by a cluster")
	}
}

func (s *Server) bootstrap(servers []api.SelfInfo) {
	cfg := raft.Configuration{}
	for _, srv := range servers {
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(srv.ID), Address: raft.ServerAddress(srv.RaftAddress)})
	}
	err := s.raft.BootstrapCluster(cfg).Error()
	switch {
	case errors.Is(err, raft.ErrCantBootstrap):
		s.logger.Info("cluster already bootstrapped")
	case err != nil:
		s.logger.Error("bootstrap failed", "error", err)
	default:
		ids := make([]string, len(servers))
		for i, srv := range servers {
			ids[i] = srv.ID
		}
		s.logger.Info("bootstrapped cluster", "servers", strings.Join(ids, ","))
	}
}

// pause waits d, or returns false when the server shuts down.
func (s *Server) pause(d time.Duration) bool {
	select {
	case <-s.shutdownCtx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (s *Server) bootstrapExpect() {
	self := s.Self()
	for attempt := 0; ; attempt++ {
		if s.hasConfiguration() {
			return // someone added us meanwhile
		}
		found := map[string]api.SelfInfo{self.ID: self}
		var clustered []string
		for _, addr := range s.cfg.Join {
			info, err := s.peerInfo(addr)
			if err != nil {
				if attempt%10 == 0 {
					s.logger.Info("waiting for server", "address", addr, "error", err)
				}
				continue
			}
			if info.ID == self.ID && info.RaftAddress != self.RaftAddress {
				s.logger.Error("another server uses this server's id", "id", info.ID, "address", addr)
				continue
			}
			if info.Bootstrapped {
				clustered = append(clustered, addr)
				continue
			}
			found[info.ID] = info
		}
		if len(clustered) > 0 {
			s.logger.Info("a cluster already exists; joining it", "via", clustered)
			s.joinLoop()
			return
		}
		if len(found) >= s.cfg.BootstrapExpect {
			servers := make([]api.SelfInfo, 0, len(found))
			for _, info := range found {
				servers = append(servers, info)
			}
			slices.SortFunc(servers, func(a, b api.SelfInfo) int { return strings.Compare(a.ID, b.ID) })
			s.bootstrap(servers)
			return
		}
		if attempt%10 == 0 {
			s.logger.Info("waiting for servers before bootstrapping", "expect", s.cfg.BootstrapExpect, "found", len(found))
		}
		if !s.pause(500 * time.Millisecond) {
			return
		}
	}
}

func (s *Server) peerInfo(addr string) (api.SelfInfo, error) {
	c, err := s.peerClient(addr)
	if err != nil {
		return api.SelfInfo{}, err
	}
	ctx, cancel := context.WithTimeout(s.shutdownCtx, 2*time.Second)
	defer cancel()
	return c.Self(ctx)
}

// hasConfiguration reports whether raft holds a configuration: the
// replica was bootstrapped or joined.
func (r *replica) hasConfiguration() bool {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return len(f.Configuration().Servers) > 0
}

func (s *Server) joinLoop() {
	req := s.selfJoinRequest()
	wait := 500 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if s.inConfiguration() {
			s.logger.Info("joined cluster")
			return
		}
		for _, addr := range s.cfg.Join {
			if addr == s.cfg.HTTPAdvertise {
				continue
			}
			if err := s.askToJoin(addr, req); err != nil {
				s.logger.Info("join attempt failed", "via", addr, "error", err)
				continue
			}
			s.logger.Info("joined cluster", "via", addr)
			return
		}
		if !s.pause(wait) {
			return
		}
		wait = min(wait*2, 10*time.Second)
	}
}

func (s *Server) askToJoin(addr string, req api.JoinRequest) error {
	c, err := s.peerClient(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.shutdownCtx, 30*time.Second)
	defer cancel()
	if err := c.Join(ctx, req); err != nil {
		return fmt.Errorf("join via %s: %w", addr, err)
	}
	return nil
}

func (s *Server) inConfiguration() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.ID) {
			return true
		}
	}
	return false
}

// serverMetaCheck is how often a replica compares its entry in the
// server table with its real addresses; serverMetaRetry how soon it looks
// again while it is not in the Raft configuration yet, or knows no
// leader to record a difference with (a forming cluster).
const (
	serverMetaCheck = time.Second
	serverMetaRetry = 100 * time.Millisecond
)

// reconcileServerMeta keeps this replica's entry in the replicated server
// table (its HTTP address, used for forwarding, and the command forms it
// reads) equal to its real addresses: after a join, a restart on new
// addresses, or a snapshot restored from another cluster.
func (s *Server) reconcileServerMeta() {
	for wait := serverMetaRetry; s.pause(wait); {
		wait = serverMetaCheck
		if !s.inConfiguration() {
			wait = serverMetaRetry
			continue
		}
		want := s.selfJoinRequest()
		if have, err := s.fsm.State().Server(s.cfg.ID); err == nil && sameServerMeta(have, want) {
			continue
		}
		// Only a record to update: a server removed a moment ago, which
		// has not heard of it yet, is not added back by its own loop.
		want.UpdateOnly = true
		if s.IsLeader() {
			if err := s.upsertServerMeta(s.shutdownCtx, want); err != nil {
				s.logger.Warn("could not record own address", "error", err)
			}
			continue
		}
		addr, ok := s.LeaderHTTPAddress()
		if !ok {
			wait = serverMetaRetry // an election: a leader is known soon
			continue
		}
		if err := s.askToJoin(addr, want); err != nil {
			s.logger.Warn("could not record own address with the leader", "error", err)
		}
	}
}

// peerClient talks to one other replica over the replica's own dialer.
func (s *Server) peerClient(addr string) (*api.Client, error) {
	if s.tls != nil && !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	c, err := api.NewClient(addr)
	if err != nil {
		return nil, err
	}
	c.SetHTTPClient(s.peerHTTP)
	return c, nil
}
