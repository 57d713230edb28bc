package cluster

import (
	"fmt"

	"herd/api"
	"herd/fsm"
)

// Every server records the command forms it reads (fsm.CommandForms)
// when it starts, and the leader refuses a server that asks to join with
// older forms than its own: such a replica would refuse the entries the
// cluster writes, and its state would fall behind without a word.

// checkJoinForms refuses a server that cannot read the forms the cluster
// writes.
func checkJoinForms(req api.JoinRequest) error {
	if req.CommandForms < fsm.CommandForms {
		return fmt.Errorf("server %s reads command forms up to %d, and the cluster writes %d: run this herd version (or newer) on it: %w",
			req.ID, req.CommandForms, fsm.CommandForms, api.ErrConflict)
	}
	return nil
}

// sameServerMeta reports whether the recorded server matches the join
// request (nothing to write).
func sameServerMeta(have *fsm.Server, want api.JoinRequest) bool {
	return have.HTTPAddress == want.HTTPAddress && have.RaftAddress == want.RaftAddress &&
		have.GossipAddress == want.GossipAddress && have.CommandForms == want.CommandForms && have.Version == want.Version
}
