package cluster

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/api"
	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// monitor keeps what this replica observes of each node's liveness. Every
// replica receives agents' gossip heartbeats, so a new leader starts with
// current observations; only the leader turns them into verdicts.
type monitor struct {
	cfg config.Liveness

	mu    sync.Mutex
	nodes map[string]*observation
	// kick wakes the scheduling loop when a node wakes up.
	kick chan struct{}
}

type observation struct {
	lastHeard   time.Time
	session     uint64
	seq         uint64
	loss        float64 // moving average of the heartbeat loss rate
	gossipState string  // memberlist's view: alive, suspect, dead, left
	hibernating bool
	// maxLease is the longest lease this replica gave the node's current
	// session (see config.Liveness.Lease).
	maxLease time.Duration
}

// lossWeight is the weight of each expected heartbeat in the loss average:
// about the last 10 heartbeats count, so the interval adapts within a
// minute at 5 s heartbeats.
const lossWeight = 0.1

func newMonitor(cfg config.Liveness) *monitor {
	return &monitor{cfg: cfg, nodes: map[string]*observation{}, kick: make(chan struct{}, 1)}
}

func (m *monitor) get(id string) *observation {
	o := m.nodes[id]
	if o == nil {
		o = &observation{gossipState: "unknown"}
		m.nodes[id] = o
	}
	return o
}

// heartbeat records an agent's heartbeat and returns the lease an
// acknowledgement of it gives. Sequence gaps are heartbeats lost on the
// way: they raise the loss estimate, arrivals lower it.
func (m *monitor) heartbeat(msg api.GossipHeartbeatMsg, now time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.get(msg.Node)
	if now.After(o.lastHeard) {
		o.lastHeard = now
	}
	switch {
	case msg.Session != o.session:
		o.session, o.seq, o.maxLease = msg.Session, msg.Seq, 0 // a new session starts a new count
	case msg.Seq <= o.seq:
		// Late, duplicated or sent again: alive, but says nothing about loss.
	default:
		for lost := msg.Seq - o.seq - 1; lost > 0 && lost < 1000; lost-- {
			o.loss = o.loss*(1-lossWeight) + lossWeight
		}
		o.loss *= 1 - lossWeight
		o.seq = msg.Seq
	}
	return m.leaseLocked(o)
}

// heardFrom records a proof of life of the node's session that came
// another way than gossip (an HTTP heartbeat answered without a commit),
// if this replica received a gossip heartbeat of that session within the
// last period; it reports whether it did. The liveness loop's sync then
// commits it with the gossip heartbeats.
func (m *monitor) heardFrom(id string, session uint64, period time.Duration, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.nodes[id]
	if o == nil || o.session != session || o.lastHeard.IsZero() || now.Sub(o.lastHeard) >= period {
		return false
	}
	if now.After(o.lastHeard) {
		o.lastHeard = now
	}
	return true
}

// lease is the lease an acknowledgement gives the node now.
func (m *monitor) lease(id string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leaseLocked(m.get(id))
}

func (m *monitor) leaseLocked(o *observation) time.Duration {
	l := m.cfg.Lease(m.interval(o.loss))
	o.maxLease = max(o.maxLease, l)
	return l
}

// leaseGiven is the longest lease this replica may have given the node:
// what it gave the current session, or, when it has not watched the node
// for the longest lease (a new leader: its predecessor's grants are not
// its own), the longest there is.
func (m *monitor) leaseGiven(id string, watchedFor time.Duration) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	longest := m.cfg.MaxLease()
	o := m.nodes[id]
	if o == nil || watchedFor < longest {
		return longest
	}
	return max(o.maxLease, m.cfg.Lease(m.cfg.HeartbeatInterval))
}

// gossipUpdate records memberlist's view of a node and its metadata.
func (m *monitor) gossipUpdate(id, state string, meta *api.GossipMeta) {
	m.mu.Lock()
	o := m.get(id)
	o.gossipState = state
	woke := false
	if meta != nil {
		woke = o.hibernating && !meta.Hibernating
		o.hibernating = meta.Hibernating
	}
	m.mu.Unlock()
	if woke {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// interval is the heartbeat interval in force for a loss estimate: the
// base interval, stretched linearly up to the maximum at 30% loss.
func (m *monitor) interval(loss float64) time.Duration {
	stretch := math.Min(loss/0.3, 1)
	return m.cfg.HeartbeatInterval + time.Duration(stretch*float64(m.cfg.MaxHeartbeatInterval-m.cfg.HeartbeatInterval))
}

// view is the monitor's verdict inputs for one node at now. A node that
// gossips is judged by its gossip heartbeats (and the start of its current
// session: registering proves life); one that never did (no gossip in the
// cluster, or an agent without it) by its committed last heartbeat (HTTP
// heartbeats, registration).
func (m *monitor) view(id string, lastCommitted, sessionStart, now time.Time) (api.NodeObservation, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.nodes[id]
	if o == nil {
		o = &observation{gossipState: "unknown"}
	}
	// Any proof of life counts: a gossip heartbeat, a committed HTTP
	// heartbeat (the agent's lease is renewed by either), the session's
	// start.
	last := o.lastHeard
	if lastCommitted.After(last) {
		last = lastCommitted
	}
	if sessionStart.After(last) {
		last = sessionStart
	}
	iv := m.interval(o.loss)
	misses := 0
	// A heartbeat up to half an interval late is not a miss: weak boxes
	// and busy schedulers jitter.
	if silent := now.Sub(last) - iv/2; !last.IsZero() && silent > 0 {
		misses = int(silent / iv)
	}
	obs := api.NodeObservation{
		IntervalMs: iv.Milliseconds(), Misses: misses, Loss: math.Round(o.loss*1000) / 1000,
		GossipState: o.gossipState, Hibernating: o.hibernating,
	}
	if !last.IsZero() {
		obs.LastHeard = last.UTC().Format(time.RFC3339Nano)
	}
	return obs, o.lastHeard, o.hibernating
}

// livenessLoop, made when leadership starts, turns observations into committed node
// states: SUSPECT after SuspectAfter missed intervals, back to READY when
// heard again (no reclaim), DOWN after DownAfter once memberlist no longer
// sees the node alive (live attempts reclaimed).
// A new leader first observes for LeaderGrace without judging anyone.
// It also commits, every few intervals, the latest gossip heartbeat of
// each node so the replicated last-heartbeat (the scheduler's TTL rule)
// stays current without a Raft write per heartbeat. It reads the
// leader's observations and declares nodes DOWN through the session
// family (sessions), over the same replica.
type livenessLoop struct {
	r         proposer
	sessions  *sessionEndpoints
	cfg       config.Liveness
	batchSize int
	logger    hclog.Logger
}

func (l *livenessLoop) run(ctx context.Context) {
	cfg := l.cfg
	graceUntil := l.r.Now().Add(cfg.LeaderGrace)
	tick := time.NewTicker(max(cfg.HeartbeatInterval/5, 10*time.Millisecond))
	defer tick.Stop()
	lastSync := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := l.r.Now()
		nodes, err := l.r.State().Nodes()
		if err != nil {
			continue
		}
		var beats [][]byte
		sync := now.Sub(lastSync) >= 2*cfg.HeartbeatInterval
		for _, n := range nodes {
			if n.Management == scheduler.ManagementRetired || n.Liveness == scheduler.LivenessDown {
				continue
			}
			obs, heard, _ := l.sessions.monitor.view(n.ID, n.LastHeartbeat.Time(), n.SessionStartedAt.Time(), now)
			switch {
			case obs.Misses >= cfg.DownAfter && now.After(graceUntil) && (obs.GossipState != "alive" || obs.Misses >= 3*cfg.DownAfter):
				// DOWN takes memberlist's agreement too: its probes (direct,
				// indirect through other members, TCP fallback) and Lifeguard
				// suspicion survive loss that eats several heartbeats in a
				// row. Only a node that gossips as alive yet sends no
				// heartbeat for three times the bound (a hung agent) is
				// declared down on heartbeats alone.
				if n.Liveness == scheduler.LivenessReady {
					// Record the suspicion the misses passed through first.
					l.setLiveness(ctx, n, scheduler.LivenessSuspect, fmt.Sprintf("%d heartbeat intervals of %s missed (loss %.0f%%, gossip %s)", obs.Misses, time.Duration(obs.IntervalMs)*time.Millisecond, obs.Loss*100, obs.GossipState))
				}
				reason := fmt.Sprintf("%d heartbeat intervals of %s missed (loss %.0f%%, gossip %s)", obs.Misses, time.Duration(obs.IntervalMs)*time.Millisecond, obs.Loss*100, obs.GossipState)
				if _, err := l.sessions.DeclareNodeDown(ctx, n.ID, reason); err != nil && ctx.Err() == nil {
					l.logger.Warn("could not declare node down", "node", n.ID, "error", err)
				}
			case obs.Misses >= cfg.SuspectAfter && n.Liveness == scheduler.LivenessReady && now.After(graceUntil):
				l.setLiveness(ctx, n, scheduler.LivenessSuspect, fmt.Sprintf("%d heartbeat intervals of %s missed (loss %.0f%%, gossip %s)", obs.Misses, time.Duration(obs.IntervalMs)*time.Millisecond, obs.Loss*100, obs.GossipState))
			case obs.Misses < cfg.SuspectAfter && n.Liveness == scheduler.LivenessSuspect:
				l.setLiveness(ctx, n, scheduler.LivenessReady, "heard again: suspicion refuted, nothing reclaimed")
			}
			if sync && heard.After(n.LastHeartbeat.Time()) {
				if b, err := fsm.Encode(fsm.MsgHeartbeat, fsm.HeartbeatRequest{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Now: heard.UTC()}); err == nil {
					beats = append(beats, b)
				}
			}
		}
		if sync {
			lastSync = now
			if len(beats) > 0 {
				l.r.commitBatches(ctx, beats, l.batchSize)
			}
		}
	}
}

func (l *livenessLoop) setLiveness(ctx context.Context, n *fsm.Node, to scheduler.Liveness, reason string) {
	_, _, err := l.r.apply(ctx, fsm.MsgNodeLiveness, fsm.NodeLivenessRequest{
		NodeID: n.ID, SessionGeneration: n.SessionGeneration, Liveness: string(to), Reason: reason, Now: l.r.Now().UTC(),
	})
	if err != nil && ctx.Err() == nil {
		l.logger.Warn("could not change node liveness", "node", n.ID, "to", to, "error", err)
		return
	}
	l.logger.Info("node liveness", "node", n.ID, "to", to, "reason", reason)
}
