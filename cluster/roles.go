package cluster

import (
	"context"
	"time"

	"herd/api"
	"herd/config"
	"herd/fsm"
)

// proposer is what an endpoint family needs of the replica it serves:
// who the replica is and whether it leads, its clock, the state it has
// applied, and proposing commands (leader-only) and waiting for them to
// apply. Server implements it; a test builds a family over an FSM in
// memory instead.
type proposer interface {
	ID() string
	IsLeader() bool
	Now() time.Time
	// State is the state this replica has applied.
	State() *fsm.State
	// apply proposes one command and waits for its result on this
	// replica; applyRaw proposes an encoded command or batch.
	apply(ctx context.Context, t fsm.MessageType, payload any) (any, uint64, error)
	applyRaw(ctx context.Context, buf []byte) (any, uint64, error)
	// commitBatches commits encoded commands in batch entries of at most
	// batchSize, pipelined, and returns each command's result (nil for
	// one whose entry did not commit).
	commitBatches(ctx context.Context, cmds [][]byte, batchSize int) []any
}

// taskEndpoints serves the task family's submissions, reads and
// cancellations over a replica; the leader's scheduler settings resolve a
// task's size into its tiers. (Explanations, which read the fleet as the
// leader's pass does, hibernation included, stay with the Server; an
// attempt's log is the agent family's.)
type taskEndpoints struct {
	r     proposer
	sched config.Scheduler
}

// jobEndpoints serves the job family over a replica, as taskEndpoints
// does tasks.
type jobEndpoints struct {
	r     proposer
	sched config.Scheduler
}

// nodeEndpoints serves what operators read and set of nodes (drain,
// eligibility, the node views) over a replica; profiles weighs a node's
// health, and observe gives what gossip and heartbeats say of it now.
// It also commits what agents report of their nodes and operators ask of
// them: profiles, datasets, health checks, tiers (profile.go).
// (Registration, heartbeats and conditions, which feed the liveness
// monitor, are the session family's.)
type nodeEndpoints struct {
	r        proposer
	profiles config.Profiles
	observe  func(*fsm.Node) api.NodeObservation
}

// attemptEndpoints serves what agents report of their attempts (starts,
// ends, batched reports) and their assignments over a replica; the
// scheduler's settings give retry backoff and the start timeout, and the
// metrics count starts and ends.
type attemptEndpoints struct {
	r       proposer
	sched   config.Scheduler
	metrics *serverMetrics
}
