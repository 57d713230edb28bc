package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
	"herd/fsm"
)

// The leader writes the compact binary command forms only while every
// server in the Raft configuration has recorded that it reads them, and
// JSON otherwise: a replica of an older build refuses a form it does not
// know, and its state would fall behind the others' without a word. So a
// rolling upgrade runs on JSON until the last server is upgraded (each
// records its forms when it starts), and a server that cannot read the
// forms in use is refused when it asks to join.

// commandFormsRefresh is how often a leader re-reads which forms every
// server reads (besides right after a server's record changes).
const commandFormsRefresh = time.Second

// formsWait bounds how long a command that needs newer forms waits for a
// server that has not recorded its forms yet.
const formsWait = 5 * time.Second

// encode builds a command in the newest form every server reads.
func (s *Server) encode(t fsm.MessageType, payload any) ([]byte, error) {
	if s.binaryForms.Load() {
		return fsm.Encode(t, payload)
	}
	return fsm.EncodeJSON(t, payload)
}

// encodeReserve is encode for the reservations a pass makes by the
// thousand (EncodeReserve takes the request without boxing it).
func (s *Server) encodeReserve(r fsm.ReserveRequest) ([]byte, error) {
	if s.binaryForms.Load() {
		return fsm.EncodeReserve(r), nil
	}
	return fsm.EncodeJSON(fsm.MsgReserve, r)
}

// refreshCommandForms decides, on the leader, whether every server in the
// Raft configuration reads the binary forms, and says so in the log when
// that changes.
func (s *Server) refreshCommandForms() {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return // not leader any more, or shutting down: keep the last answer
	}
	st := s.fsm.State()
	lagging, least, unknown := "", fsm.CommandForms, false
	for _, srv := range f.Configuration().Servers {
		forms := 0
		if srv.ID == raft.ServerID(s.cfg.ID) {
			forms = s.commandForms
		} else if rec, err := st.Server(string(srv.ID)); err == nil {
			forms = rec.CommandForms
		} else {
			unknown = true
		}
		if forms < least {
			lagging, least = fmt.Sprintf("%s reads %d", srv.ID, forms), forms
		}
	}
	s.leastForms.Store(int64(least))
	s.formsUnknown.Store(unknown)
	binary := lagging == ""
	if s.binaryForms.Swap(binary) != binary {
		if binary {
			s.logger.Info("every server reads the binary command forms: writing them", "forms", fsm.CommandForms)
		} else {
			s.logger.Warn("writing JSON commands: a server does not read the binary forms (yet)", "server", lagging, "forms", fsm.CommandForms)
		}
	}
}

// checkFormsFor refuses a command some server's build would not apply:
// it would refuse the entry and its state would fall behind. The answer
// is re-read before a refusal, and while a server has not recorded its
// forms yet (a cluster just formed records them within seconds) it is
// awaited for up to formsWait, so that a leader just elected does not
// refuse what every server reads.
func (s *Server) checkFormsFor(ctx context.Context, t fsm.MessageType) error {
	need := fsm.FormsNeeded(t)
	if need == 0 || s.leastForms.Load() >= int64(need) {
		return nil
	}
	s.refreshCommandForms()
	for deadline := time.Now().Add(formsWait); s.leastForms.Load() < int64(need) && s.formsUnknown.Load() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf("wait for every server to record its command forms: %w", ctx.Err())}
		case <-time.After(50 * time.Millisecond):
		}
		s.refreshCommandForms()
	}
	if least := s.leastForms.Load(); least < int64(need) {
		return &api.CodedError{Code: api.CodeNotApplied, Err: fmt.Errorf(
			"%s needs every server to read command forms %d, and one reads %d: finish upgrading the servers (herd operator raft list-peers): %w",
			t, need, least, api.ErrUnavailable)}
	}
	return nil
}

// commandFormsLoop keeps the leader's choice of forms current.
func (s *Server) commandFormsLoop(ctx context.Context) {
	for {
		s.refreshCommandForms()
		select {
		case <-ctx.Done():
			return
		case <-time.After(commandFormsRefresh):
		}
	}
}

// checkJoinForms refuses a server that cannot read the forms the cluster
// writes now.
func (s *Server) checkJoinForms(req api.JoinRequest) error {
	if req.CommandForms < fsm.CommandForms && s.binaryForms.Load() {
		return fmt.Errorf("server %s reads command forms up to %d, and the cluster writes %d: run this herd version (or newer) on it: %w",
			req.ID, req.CommandForms, fsm.CommandForms, api.ErrConflict)
	}
	return nil
}

// sameServerMeta reports whether the recorded server matches the join
// request (nothing to write).
func sameServerMeta(have *fsm.Server, want api.JoinRequest) bool {
	return have.HTTPAddress == want.HTTPAddress && have.RaftAddress == want.RaftAddress &&
		have.GossipAddress == want.GossipAddress && have.CommandForms == want.CommandForms
}
