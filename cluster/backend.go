package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
	"herd/fsm"
	"herd/scheduler"
)

// Server implements the API's view of a replica.
var _ api.Backend = (*Server)(nil)

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
func (s *Server) ReadMeta() api.ReadMeta {
	m := api.ReadMeta{Index: s.fsm.Index()}
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
		forms := s.commandForms
		if srv.ID != raft.ServerID(s.cfg.ID) {
			forms = 0
			if rec, err := s.fsm.State().Server(string(srv.ID)); err == nil {
				forms = rec.CommandForms
			}
		}
		out.Servers = append(out.Servers, api.RaftServer{
			ID: string(srv.ID), RaftAddress: string(srv.Address), HTTPAddress: http,
			Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader, CommandForms: forms,
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
	// Which command forms this replica writes when it leads, and what it
	// has applied: during an upgrade, whether the new forms are in use.
	st["command_forms_written"] = "json"
	if s.binaryForms.Load() {
		st["command_forms_written"] = "binary"
	}
	appliedJSON, appliedBinary := s.fsm.AppliedForms()
	st["fsm_commands_json"], st["fsm_commands_binary"] = fmt.Sprint(appliedJSON), fmt.Sprint(appliedBinary)
	st["go_sys_bytes"] = fmt.Sprint(ms.Sys)
	return st
}

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
	f := s.raft.Apply(buf, timeout)
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
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before the entry was appended.
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("%s on %s: %v: %w", op, s.cfg.ID, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		// The entry may still commit: the outcome is unknown. Clients
		// retry with the same idempotency key.
		return &api.CodedError{Code: api.CodeOutcomeUnknown, Err: fmt.Errorf("%s on %s: %v (outcome unknown): %w", op, s.cfg.ID, err, api.ErrNotLeader)}
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%s on %s: %v: %w", op, s.cfg.ID, err, api.ErrTimeout)
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

// SubmitTask validates a spec, applies defaults and commits it (leader-only).
func (s *Server) SubmitTask(ctx context.Context, in api.TaskSpec) (api.Task, bool, uint64, error) {
	if !s.IsLeader() {
		return api.Task{}, false, 0, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	spec := toFSMSpec(in.WithDefaults())
	if err := spec.Validate(); err != nil {
		return api.Task{}, false, 0, fmt.Errorf("invalid task spec: %v: %w", err, api.ErrBadRequest)
	}
	now := s.now().UTC()
	id := newID(now)
	if spec.Name == "" {
		spec.Name = id
	}
	resp, index, err := s.apply(ctx, fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: spec})
	if err != nil {
		return api.Task{}, false, 0, err
	}
	res, ok := resp.(*fsm.SubmitResult)
	if !ok {
		return api.Task{}, false, 0, fmt.Errorf("unexpected submit response %T", resp)
	}
	return toAPITask(res.Task, nil), res.Created, index, nil
}

// SubmitTasks validates every spec, then commits them all in one batch
// entry (leader-only). One invalid spec refuses the whole batch.
func (s *Server) SubmitTasks(ctx context.Context, in []api.TaskSpec) (api.BatchSubmitResponse, error) {
	if !s.IsLeader() {
		return api.BatchSubmitResponse{}, fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	now := s.now().UTC()
	cmds := make([][]byte, 0, len(in))
	for i, one := range in {
		spec := toFSMSpec(one.WithDefaults())
		if err := spec.Validate(); err != nil {
			return api.BatchSubmitResponse{}, fmt.Errorf("invalid task spec tasks[%d]: %v: %w", i, err, api.ErrBadRequest)
		}
		id := newID(now)
		if spec.Name == "" {
			spec.Name = id
		}
		b, err := s.encode(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: spec})
		if err != nil {
			return api.BatchSubmitResponse{}, err
		}
		cmds = append(cmds, b)
	}
	resp, index, err := s.applyRaw(ctx, fsm.EncodeBatch(cmds))
	if err != nil {
		return api.BatchSubmitResponse{}, err
	}
	results, ok := resp.(fsm.BatchResult)
	if !ok || len(results) != len(cmds) {
		return api.BatchSubmitResponse{}, fmt.Errorf("unexpected batch submit response %T", resp)
	}
	out := api.BatchSubmitResponse{Tasks: make([]api.BatchSubmitResult, len(results)), Index: index}
	for i, r := range results {
		res, ok := r.(*fsm.SubmitResult)
		if !ok {
			// Validated above, so only a state conflict gets here.
			if err, isErr := r.(error); isErr {
				return api.BatchSubmitResponse{}, fmt.Errorf("tasks[%d]: %w", i, fsmErr(err))
			}
			return api.BatchSubmitResponse{}, fmt.Errorf("tasks[%d]: unexpected submit response %T", i, r)
		}
		out.Tasks[i] = api.BatchSubmitResult{ID: res.Task.ID, State: res.Task.State.String(), Created: res.Created}
	}
	return out, nil
}

// GetTask reads one task from the local state.
func (s *Server) GetTask(id string) (api.Task, error) {
	st := s.fsm.State()
	t, err := st.Task(id)
	if errors.Is(err, fsm.ErrNotFound) {
		return api.Task{}, fmt.Errorf("task %q not found: %w", id, api.ErrNotFound)
	}
	if err != nil {
		return api.Task{}, err
	}
	attempts, err := st.AttemptsOfTask(id)
	if err != nil {
		return api.Task{}, err
	}
	return toAPITask(t, attempts), nil
}

// ListTasks lists tasks from the local state.
func (s *Server) ListTasks(q api.TaskQuery) (api.TaskList, error) {
	state, ok := fsm.ParseTaskState(strings.ToUpper(q.State))
	if !ok {
		return api.TaskList{}, fmt.Errorf("unknown task state %q: %w", q.State, api.ErrBadRequest)
	}
	tasks, err := s.fsm.State().Tasks(fsm.TaskFilter{State: state, After: q.After, Limit: q.Limit + 1})
	if err != nil {
		return api.TaskList{}, err
	}
	out := api.TaskList{Tasks: make([]api.Task, 0, len(tasks))}
	if q.Limit > 0 && len(tasks) > q.Limit {
		tasks = tasks[:q.Limit]
		out.Next = tasks[len(tasks)-1].ID
	}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, toAPITask(t, nil))
	}
	return out, nil
}

func toFSMSpec(in api.TaskSpec) fsm.TaskSpec {
	return fsm.TaskSpec{Name: in.Name, IdempotencyKey: in.IdempotencyKey, TaskShape: &fsm.TaskShape{
		Priority: *in.Priority, Command: in.Command, Env: in.Env, Capability: in.Capability, CapabilityVersion: in.CapabilityVersion,
		RequiredLabels: in.RequiredLabels, PreferredLabels: in.PreferredLabels,
		Resources: scheduler.Resources{
			CPUMillis: in.Resources.CPUMillis, MemoryMB: in.Resources.MemoryMB,
			GPU: in.Resources.GPU, DiskMB: in.Resources.DiskMB,
		},
		TimeoutSeconds: *in.TimeoutSeconds, MaxAttempts: *in.MaxAttempts, Submitter: in.Submitter,
	}}
}

func toAPISpec(in fsm.TaskSpec) api.TaskSpec {
	prio, timeout, maxAttempts := in.Priority, in.TimeoutSeconds, in.MaxAttempts
	return api.TaskSpec{
		Name: in.Name, IdempotencyKey: in.IdempotencyKey, Priority: &prio,
		Command: in.Command, Env: in.Env, Capability: in.Capability, CapabilityVersion: in.CapabilityVersion,
		RequiredLabels: in.RequiredLabels, PreferredLabels: in.PreferredLabels,
		Resources: api.Resources{
			CPUMillis: in.Resources.CPUMillis, MemoryMB: in.Resources.MemoryMB,
			GPU: in.Resources.GPU, DiskMB: in.Resources.DiskMB,
		},
		TimeoutSeconds: &timeout, MaxAttempts: &maxAttempts, Submitter: in.Submitter,
	}
}

func toAPITask(t *fsm.Task, attempts []*fsm.Attempt) api.Task {
	out := api.Task{
		ID: t.ID, Name: t.Spec.Name, State: t.State.String(), Spec: toAPISpec(t.Spec),
		SubmittedAt: t.SubmittedAt(), CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
		CurrentAttempt: t.CurrentAttempt,
		Attempts:       make([]api.Attempt, 0, len(attempts)),
		Timeline:       make([]api.TimelineEvent, 0, len(t.Timeline)),
	}
	sorted := slices.Clone(attempts)
	slices.SortFunc(sorted, func(a, b *fsm.Attempt) int { return a.Number - b.Number })
	for _, a := range sorted {
		out.Attempts = append(out.Attempts, toAPIAttempt(a))
	}
	for _, e := range t.Timeline {
		out.Timeline = append(out.Timeline, api.TimelineEvent{Index: e.Index, Time: e.Time.Time(), Kind: e.Kind.String(), Message: e.Message})
	}
	return out
}
