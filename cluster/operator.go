package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/fsm"
	"herd/internal/pki"

	"github.com/hashicorp/raft"
)

// membershipEndpoints changes who the voters are and who leads: joins
// (checked against the command forms the cluster writes and probed at the
// joiner's address), removals that keep a majority answering, leadership
// transfers, and the servers' records. It works over the replica; status
// finds the recorded addresses, and tls and dial reach the other servers
// as this one is (only a server's certificate is believed for it).
type membershipEndpoints struct {
	r      *replica
	status *statusEndpoints
	tls    *pki.Material
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	logger hclog.Logger
}

// Join adds a server as a voter (leader-only) and records its addresses.
// Joining again with the same id and address only refreshes the record.
func (e *membershipEndpoints) Join(ctx context.Context, req api.JoinRequest) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.r.id, api.ErrNotLeader)
	}
	f := e.r.raft.GetConfiguration()
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
			if srv.ID == raft.ServerID(e.r.id) {
				return fmt.Errorf("join of %s at %s conflicts with the leader itself: %w", req.ID, req.RaftAddress, api.ErrConflict)
			}
			e.logger.Info("removing stale raft peer before join", "id", srv.ID, "address", srv.Address)
			if err := e.r.raft.RemoveServer(srv.ID, 0, e.r.applyTimeout).Error(); err != nil {
				return e.r.raftErr("remove stale peer", err)
			}
		}
	}
	if !member {
		// A member's record is always updated (it says what the server
		// reads now, and the leader follows it); a newcomer must read
		// what the cluster writes, and answer as itself.
		if err := checkJoinForms(req); err != nil {
			return err
		}
		if err := e.probeJoiner(ctx, req); err != nil {
			return err
		}
		e.logger.Info("adding voter", "id", req.ID, "address", req.RaftAddress)
		if err := e.r.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddress), 0, e.r.applyTimeout).Error(); err != nil {
			return e.r.raftErr("add voter", err)
		}
	}
	return e.upsertServerMeta(ctx, req)
}

func (e *membershipEndpoints) upsertServerMeta(ctx context.Context, req api.JoinRequest) error {
	if have, err := e.r.fsm.State().Server(req.ID); err == nil && sameServerMeta(have, req) {
		return nil
	}
	_, _, err := e.r.apply(ctx, fsm.MsgUpsertServer, fsm.UpsertServerRequest{Server: fsm.Server{
		ID: req.ID, RaftAddress: req.RaftAddress, HTTPAddress: req.HTTPAddress, GossipAddress: req.GossipAddress, CommandForms: req.CommandForms,
		Version: req.Version,
	}})
	return err
}

// joinProbeTimeout bounds the leader's question to a server that asks to
// join, and to the voters before a removal.
const joinProbeTimeout = 5 * time.Second

// probeJoiner asks the server that would be added, at the HTTP address it
// gave, who it is: a voter that does not answer would only move the
// quorum (three voters need two, four need three). With TLS the answer
// must come from the holder of that server's certificate.
func (e *membershipEndpoints) probeJoiner(ctx context.Context, req api.JoinRequest) error {
	self, err := e.askSelf(ctx, req.HTTPAddress, req.ID)
	switch {
	case err != nil:
		return fmt.Errorf("server %s does not answer at %s (%v): a voter is added only once it answers there: %w", req.ID, req.HTTPAddress, err, api.ErrConflict)
	case self.ID != req.ID || self.RaftAddress != req.RaftAddress:
		return fmt.Errorf("the server at %s is %s with raft address %s, not %s at %s: %w", req.HTTPAddress, self.ID, self.RaftAddress, req.ID, req.RaftAddress, api.ErrConflict)
	}
	return nil
}

// askSelf asks the server at httpAddr who it is, within joinProbeTimeout;
// with TLS only the holder of server id's certificate is believed.
func (e *membershipEndpoints) askSelf(ctx context.Context, httpAddr, id string) (api.SelfInfo, error) {
	tr := api.NewTransport()
	tr.DialContext = e.dial
	addr := httpAddr
	if e.tls != nil {
		addr = "https://" + httpAddr
		tr.DialTLSContext = func(ctx context.Context, _, a string) (net.Conn, error) {
			return pki.Dial(ctx, e.dial, a, e.tls.ClientConfigFor(pki.Identity{Role: pki.RoleServer, ID: id}))
		}
	}
	defer tr.CloseIdleConnections()
	c, err := api.NewClient(addr)
	if err != nil {
		return api.SelfInfo{}, err
	}
	c.SetHTTPClient(&http.Client{Transport: tr, Timeout: joinProbeTimeout})
	c.Retries = 0
	ctx, cancel := context.WithTimeout(ctx, joinProbeTimeout)
	defer cancel()
	return c.Self(ctx)
}

// answering counts the voters of servers that answer now: this replica,
// and each other one that says who it is at its recorded address.
func (e *membershipEndpoints) answering(ctx context.Context, voters []raft.Server) (n int, silent []string) {
	type answer struct {
		id string
		ok bool
	}
	answers := make(chan answer, len(voters))
	for _, v := range voters {
		id := string(v.ID)
		if id == e.r.id {
			answers <- answer{id, true}
			continue
		}
		go func() {
			addr, ok := e.status.httpAddressOf(id)
			if !ok {
				answers <- answer{id + " (its address not recorded yet)", false}
				return
			}
			self, err := e.askSelf(ctx, addr, id)
			answers <- answer{id, err == nil && self.ID == id}
		}()
	}
	for range voters {
		a := <-answers
		if a.ok {
			n++
		} else {
			silent = append(silent, a.id)
		}
	}
	slices.Sort(silent)
	return n, silent
}

// RemovePeer removes a server from the Raft configuration (leader-only).
// Unless forced, it refuses a removal after which the voters that answer
// would not be a majority of those left: the cluster could then commit
// nothing until a silent one came back.
func (e *membershipEndpoints) RemovePeer(ctx context.Context, id string, force bool) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.r.id, api.ErrNotLeader)
	}
	f := e.r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read raft configuration: %w", err)
	}
	found := false
	var left []raft.Server // the voters after the removal
	for _, srv := range f.Configuration().Servers {
		switch {
		case srv.ID == raft.ServerID(id):
			found = true
		case srv.Suffrage == raft.Voter:
			left = append(left, srv)
		}
	}
	if !found {
		return fmt.Errorf("server %q is not in the raft configuration: %w", id, api.ErrNotFound)
	}
	if !force {
		if n, silent := e.answering(ctx, left); n <= len(left)/2 {
			return fmt.Errorf("removing %s would leave %d voters of which %d answer (%s silent): %d are needed to commit anything. Remove a server that does not answer instead, or force the removal if %s is gone for good and the silent ones will come back: %w",
				id, len(left), n, strings.Join(silent, ", "), len(left)/2+1, id, api.ErrConflict)
		}
	}
	e.logger.Info("removing raft peer", "id", id)
	if err := e.r.raft.RemoveServer(raft.ServerID(id), 0, e.r.applyTimeout).Error(); err != nil {
		return e.r.raftErr("remove peer", err)
	}
	if id == e.r.id {
		return nil // we stepped down; the next leader keeps the stale record harmlessly
	}
	_, _, err := e.r.apply(ctx, fsm.MsgRemoveServer, fsm.RemoveServerRequest{ID: id})
	return err
}

// TransferLeadership hands leadership to another voter (leader-only) and
// waits until this replica sees the new leader.
func (e *membershipEndpoints) TransferLeadership(ctx context.Context, targetID string) error {
	if !e.r.IsLeader() {
		return fmt.Errorf("%s: %w", e.r.id, api.ErrNotLeader)
	}
	var fut raft.Future
	if targetID == "" {
		fut = e.r.raft.LeadershipTransfer()
	} else {
		if targetID == e.r.id {
			return fmt.Errorf("%s already leads: %w", targetID, api.ErrBadRequest)
		}
		f := e.r.raft.GetConfiguration()
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
		fut = e.r.raft.LeadershipTransferToServer(raft.ServerID(targetID), addr)
	}
	if err := fut.Error(); err != nil {
		return e.r.raftErr("transfer leadership", err)
	}
	for {
		if _, id := e.r.raft.LeaderWithID(); id != "" && id != raft.ServerID(e.r.id) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for new leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
