package cluster

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/api"
	"herd/config"
	"herd/internal/httpapi"
	"herd/internal/version"
)

// statusEndpoints answers what a replica is and how it is doing: its
// identity and addresses, the leader, freshness and linearizable reads,
// the raft configuration and statistics, the scheduler's counters and the
// applied state's invariants. It reads the replica and this server's
// configured identity (self); tls says whether it serves TLS, forms the
// command forms it reads.
type statusEndpoints struct {
	r      *replica
	self   config.Server
	tls    bool
	forms  int
	stats  *SchedulerStats
	logger hclog.Logger
}

// LeaderHTTPAddress returns the leader's HTTP address from the replicated
// server table, if a leader is known and has recorded it.
func (e *statusEndpoints) LeaderHTTPAddress() (string, bool) {
	_, id := e.r.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	if id == raft.ServerID(e.self.ID) {
		return e.self.HTTPAdvertise, e.r.leaderReady.Load()
	}
	srv, err := e.r.fsm.State().Server(string(id))
	if err != nil || srv.HTTPAddress == "" {
		return "", false
	}
	return srv.HTTPAddress, true
}

// ReadMeta reports how fresh this replica's state is.
func (e *statusEndpoints) ReadMeta() httpapi.ReadMeta {
	m := httpapi.ReadMeta{Index: e.r.fsm.Index()}
	addr, _ := e.r.raft.LeaderWithID()
	m.KnownLeader = addr != ""
	if e.r.raft.State() != raft.Leader {
		if last := e.r.raft.LastContact(); last.IsZero() {
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
func (e *statusEndpoints) ConsistentRead(ctx context.Context) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.self.ID, api.ErrNotLeader)
	}
	errCh := make(chan error, 1)
	go func() { errCh <- e.r.raft.VerifyLeader().Error() }()
	select {
	case err := <-errCh:
		if err != nil {
			return fmt.Errorf("verify leadership: %v: %w", err, api.ErrNotLeader)
		}
	case <-ctx.Done():
		return fmt.Errorf("verify leadership: %w", ctx.Err())
	}
	if !e.r.leaderReady.Load() {
		return fmt.Errorf("%s: %w", e.self.ID, api.ErrNotLeader)
	}
	return nil
}

// Self describes this replica.
func (e *statusEndpoints) Self() api.SelfInfo {
	addr, id := e.r.raft.LeaderWithID()
	_ = addr
	return api.SelfInfo{
		ID: e.self.ID, RaftAddress: e.self.RaftAdvertise, HTTPAddress: e.self.HTTPAdvertise,
		Bootstrapped: e.r.hasConfiguration(), Leader: string(id), State: e.r.raft.State().String(),
		TLS: e.tls, ACL: e.self.ACL, Insecure: e.self.Insecure && e.self.Open(),
		Version: version.Get(),
	}
}

// Leader returns the current leader's identity and addresses.
func (e *statusEndpoints) Leader() (api.LeaderInfo, error) {
	addr, id := e.r.raft.LeaderWithID()
	if id == "" {
		return api.LeaderInfo{}, fmt.Errorf("%s knows no leader: %w", e.self.ID, api.ErrNoLeader)
	}
	info := api.LeaderInfo{ID: string(id), RaftAddress: string(addr)}
	if http, ok := e.httpAddressOf(string(id)); ok {
		info.HTTPAddress = http
	}
	return info, nil
}

func (e *statusEndpoints) httpAddressOf(id string) (string, bool) {
	if id == e.self.ID {
		return e.self.HTTPAdvertise, true
	}
	srv, err := e.r.fsm.State().Server(id)
	if err != nil {
		return "", false
	}
	return srv.HTTPAddress, true
}

// RaftConfiguration returns the latest Raft configuration.
func (e *statusEndpoints) RaftConfiguration() (api.RaftConfiguration, error) {
	f := e.r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return api.RaftConfiguration{}, fmt.Errorf("read raft configuration: %w", err)
	}
	_, leader := e.r.raft.LeaderWithID()
	out := api.RaftConfiguration{Index: f.Index(), Servers: []api.RaftServer{}}
	for _, srv := range f.Configuration().Servers {
		http, _ := e.httpAddressOf(string(srv.ID))
		forms, ver := e.forms, version.Version()
		if srv.ID != raft.ServerID(e.self.ID) {
			forms, ver = 0, ""
			if rec, err := e.r.fsm.State().Server(string(srv.ID)); err == nil {
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
func (e *statusEndpoints) SchedulerStatus() api.SchedulerStatus {
	st := e.stats
	rejections := st.Rejections()
	if rejections == nil {
		rejections = map[string]uint64{}
	}
	return api.SchedulerStatus{
		ID: e.self.ID, Passes: st.Passes.Load(), Scanned: st.Scanned.Load(), Placements: st.Placements.Load(), Entries: st.Entries.Load(),
		Rejections: rejections, QueueDepth: st.QueueDepth.Load(), OldestWaitMs: st.OldestWaitMs.Load(),
	}
}

// RaftStats returns raft's own statistics plus this replica's id.
func (e *statusEndpoints) RaftStats() map[string]string {
	st := e.r.raft.Stats()
	st["id"] = e.self.ID
	st["fsm_index"] = fmt.Sprint(e.r.fsm.Index())
	_, leader := e.r.raft.LeaderWithID()
	st["leader_id"] = string(leader)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st["go_heap_inuse_bytes"] = fmt.Sprint(ms.HeapInuse)
	// The commands this replica applied in each form since it started.
	appliedJSON, appliedBinary := e.r.fsm.AppliedForms()
	st["fsm_commands_json"], st["fsm_commands_binary"] = fmt.Sprint(appliedJSON), fmt.Sprint(appliedBinary)
	st["go_sys_bytes"] = fmt.Sprint(ms.Sys)
	return st
}

// CheckState checks the invariants of this replica's applied state and
// reports what it finds; it never repairs (a broken invariant is a bug
// to chase from the log, not to paper over on one replica).
func (e *statusEndpoints) CheckState() api.StateCheck {
	start := time.Now()
	st := e.r.fsm.State()
	v := st.Violations()
	tasks, attempts, nodes := st.Sizes()
	if len(v) > 0 {
		e.logger.Error("state check found broken invariants", "index", st.Index(), "violations", len(v), "first", v[0])
	}
	return api.StateCheck{
		Server: e.self.ID, Index: st.Index(), Tasks: tasks, Attempts: attempts, Nodes: nodes,
		OK: len(v) == 0, Violations: v, TookMillis: time.Since(start).Milliseconds(),
	}
}
