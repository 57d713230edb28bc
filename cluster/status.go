package cluster

import (
	"context"
	"fmt"
	"herd/internal/httpapi"
	"herd/internal/version"
	"runtime"
	"time"

	"herd/api"

	"github.com/hashicorp/raft"
)

// LeaderHTTPAddress returns the leader's HTTP address from the replicated
// server table, if a leader is known and has recorded it.
func (s *Server) LeaderHTTPAddress() (string, bool) {
	_, id := s.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	if id == raft.ServerID(s.cfg.ID) {
		return s.cfg.HTTPAdvertise, s.leaderReady.Load()
	}
	srv, err := s.fsm.State().Server(string(id))
	if err != nil || srv.HTTPAddress == "" {
		return "", false
	}
	return srv.HTTPAddress, true
}

// ReadMeta reports how fresh this replica's state is.
func (s *Server) ReadMeta() httpapi.ReadMeta {
	m := httpapi.ReadMeta{Index: s.fsm.Index()}
	addr, _ := s.raft.LeaderWithID()
	m.KnownLeader = addr != ""
	if s.raft.State() != raft.Leader {
		if last := s.raft.LastContact(); last.IsZero() {
			m.LastContact = -time.Millisecond // never heard from a leader
		} else {
			m.LastContact = time.Since(last)
		}
	}
	return m
}

// ConsistentRead makes a read linearizable: this replica must have
// established its leadership (its Barrier applied all earlier terms'
// entries, and every write it acknowledged was applied before the ack),
// and a quorum must confirm it still leads now. A deposed leader that has
// not noticed yet fails the second check instead of serving stale data.
func (s *Server) ConsistentRead(ctx context.Context) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	errCh := make(chan error, 1)
	go func() { errCh <- s.raft.VerifyLeader().Error() }()
	select {
	case err := <-errCh:
		if err != nil {
			return fmt.Errorf("verify leadership: %v: %w", err, api.ErrNotLeader)
		}
	case <-ctx.Done():
		return fmt.Errorf("verify leadership: %w", ctx.Err())
	}
	if !s.leaderReady.Load() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	return nil
}

// Self describes this replica.
func (s *Server) Self() api.SelfInfo {
	addr, id := s.raft.LeaderWithID()
	_ = addr
	return api.SelfInfo{
		ID: s.cfg.ID, RaftAddress: s.cfg.RaftAdvertise, HTTPAddress: s.cfg.HTTPAdvertise,
		Bootstrapped: s.hasConfiguration(), Leader: string(id), State: s.raft.State().String(),
		TLS: s.tls != nil, ACL: s.cfg.ACL, Insecure: s.cfg.Insecure && s.cfg.Open(),
		Version: version.Get(),
	}
}

// Leader returns the current leader's identity and addresses.
func (s *Server) Leader() (api.LeaderInfo, error) {
	addr, id := s.raft.LeaderWithID()
	if id == "" {
		return api.LeaderInfo{}, fmt.Errorf("%s knows no leader: %w", s.cfg.ID, api.ErrNoLeader)
	}
	info := api.LeaderInfo{ID: string(id), RaftAddress: string(addr)}
	if http, ok := s.httpAddressOf(string(id)); ok {
		info.HTTPAddress = http
	}
	return info, nil
}

func (s *Server) httpAddressOf(id string) (string, bool) {
	if id == s.cfg.ID {
		return s.cfg.HTTPAdvertise, true
	}
	srv, err := s.fsm.State().Server(id)
	if err != nil {
		return "", false
	}
	return srv.HTTPAddress, true
}

// RaftConfiguration returns the latest Raft configuration.
func (s *Server) RaftConfiguration() (api.RaftConfiguration, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return api.RaftConfiguration{}, fmt.Errorf("read raft configuration: %w", err)
	}
	_, leader := s.raft.LeaderWithID()
	out := api.RaftConfiguration{Index: f.Index(), Servers: []api.RaftServer{}}
	for _, srv := range f.Configuration().Servers {
		http, _ := s.httpAddressOf(string(srv.ID))
		forms, ver := s.commandForms, version.Version()
		if srv.ID != raft.ServerID(s.cfg.ID) {
			forms, ver = 0, ""
			if rec, err := s.fsm.State().Server(string(srv.ID)); err == nil {
				forms, ver = rec.CommandForms, rec.Version
			}
		}
		out.Servers = append(out.Servers, api.RaftServer{
			ID: string(srv.ID), RaftAddress: string(srv.Address), HTTPAddress: http,
			Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader, CommandForms: forms, Version: ver,
		})
	}
	return out, nil
}

// SchedulerStatus returns this replica's scheduling counters; the queue
// gauges are its last pass's (the API asks the leader).
func (s *Server) SchedulerStatus() api.SchedulerStatus {
	st := &s.schedStats
	rejections := st.Rejections()
	if rejections == nil {
		rejections = map[string]uint64{}
	}
	return api.SchedulerStatus{
		ID: s.cfg.ID, Passes: st.Passes.Load(), Scanned: st.Scanned.Load(), Placements: st.Placements.Load(), Entries: st.Entries.Load(),
		Rejections: rejections, QueueDepth: st.QueueDepth.Load(), OldestWaitMs: st.OldestWaitMs.Load(),
	}
}

// RaftStats returns raft's own statistics plus this replica's id.
func (s *Server) RaftStats() map[string]string {
	st := s.raft.Stats()
	st["id"] = s.cfg.ID
	st["fsm_index"] = fmt.Sprint(s.fsm.Index())
	_, leader := s.raft.LeaderWithID()
	st["leader_id"] = string(leader)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st["go_heap_inuse_bytes"] = fmt.Sprint(ms.HeapInuse)
	// The commands this replica applied in each form since it started.
	appliedJSON, appliedBinary := s.fsm.AppliedForms()
	st["fsm_commands_json"], st["fsm_commands_binary"] = fmt.Sprint(appliedJSON), fmt.Sprint(appliedBinary)
	st["go_sys_bytes"] = fmt.Sprint(ms.Sys)
	return st
}

// CheckState checks the invariants of this replica's applied state and
// reports what it finds; it never repairs (a broken invariant is a bug
// to chase from the log, not to paper over on one replica).
func (s *Server) CheckState() api.StateCheck {
	start := time.Now()
	st := s.fsm.State()
	v := st.Violations()
	tasks, attempts, nodes := st.Sizes()
	if len(v) > 0 {
		s.logger.Error("state check found broken invariants", "index", st.Index(), "violations", len(v), "first", v[0])
	}
	return api.StateCheck{
		Server: s.cfg.ID, Index: st.Index(), Tasks: tasks, Attempts: attempts, Nodes: nodes,
		OK: len(v) == 0, Violations: v, TookMillis: time.Since(start).Milliseconds(),
	}
}
