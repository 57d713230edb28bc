package test

import (
	"context"
	"fmt"
	"slices"
	"time"
)

func (ch *chaos) serverNames() []string {
	var out []string
	for _, r := range ch.c.Replicas {
		out = append(out, r.Cfg.ID)
	}
	return out
}

// others lists every endpoint except the given ones.
func (ch *chaos) endpoints() []string {
	out := ch.serverNames()
	for _, a := range ch.agentCfgs {
		out = append(out, a.ID)
	}
	for i := 0; i < ch.cfg.Clients; i++ {
		out = append(out, fmt.Sprintf("c%d", i+1))
	}
	return append(out, "op", "zombie")
}

func (ch *chaos) leader() int {
	for i := range ch.c.Replicas {
		if s := ch.c.Server(i); s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

func (ch *chaos) injected(kind string, removesLeader bool) {
	ch.mu.Lock()
	ch.report.Faults[kind]++
	if removesLeader {
		ch.injections = append(ch.injections, time.Since(ch.start))
	}
	ch.mu.Unlock()
	ch.t.Logf("chaos seed %d: %v %s", ch.cfg.Seed, time.Since(ch.start).Round(time.Millisecond), kind)
}

// faults runs the seeded fault schedule until ctx ends: one fault at a
// time, held for a while, then healed.
func (ch *chaos) faults(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(300+ch.rng.IntN(700))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		kind := allFaults[ch.rng.IntN(len(allFaults))]
		if len(ch.procs) == 0 && (kind == FaultAgentSIGSTOP || kind == FaultAgentSIGKILL) {
			kind = FaultAgentKill // no agent process to stop under -short
		}
		hold := time.Duration(1000+ch.rng.IntN(2000)) * time.Millisecond
		ch.inject(kind, hold)
	}
}

func (ch *chaos) inject(kind string, hold time.Duration) {
	servers := ch.serverNames()
	leader := ch.leader()
	if leader < 0 {
		leader = ch.rng.IntN(len(servers))
	}
	follower := (leader + 1 + ch.rng.IntN(len(servers)-1)) % len(servers)
	switch kind {
	case FaultLeaderCrash, FaultFollowerCrash:
		i := leader
		if kind == FaultFollowerCrash {
			i = follower
		}
		ch.c.Crash(i)
		ch.injected(kind, kind == FaultLeaderCrash)
		time.Sleep(hold)
		ch.c.Start(i)
	case FaultRestartAll:
		for i := range servers {
			ch.c.Stop(i)
		}
		ch.injected(kind, true)
		time.Sleep(hold / 2)
		for i := range servers {
			ch.c.Start(i)
		}
	case FaultIsolateLeader:
		ch.injected(kind, true)
		ch.net.Partition([]string{servers[leader]}, ch.endpointsBut(servers[leader]))
		time.Sleep(hold)
		ch.net.Heal()
	case FaultPauseLeader:
		ch.injected(kind, true)
		ch.net.Pause(servers[leader], true)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultSplit:
		ch.injected(kind, servers[follower] != servers[leader])
		ch.net.Partition(ch.minorityWith(servers[follower]))
		time.Sleep(hold)
		ch.net.Heal()
	case FaultOneWay:
		ch.injected(kind, false)
		from, to := servers[leader], servers[follower]
		if ch.rng.IntN(2) == 0 {
			from, to = to, from
		}
		ch.net.Block(from, to, true)
		time.Sleep(hold)
		ch.net.Heal()
	case FaultAgentPause:
		// Long enough for the leader to declare the node down and reclaim
		// its attempts; when it resumes it reports stale results.
		ch.injected(kind, false)
		a := ch.agentCfgs[ch.rng.IntN(len(ch.agentCfgs))].ID
		ch.net.Pause(a, true)
		time.Sleep(hold + 3*time.Second)
		ch.net.Heal()
	case FaultAgentKill:
		ch.injected(kind, false)
		ch.restartAgent(ch.rng.IntN(len(ch.agentCfgs)), hold)
	case FaultAgentSIGSTOP:
		// Past the DOWN verdict (which waits for memberlist's suspicion to
		// end too: a few seconds at the tests' gossip timings) and the
		// re-placement after the lease: the lease guard must have stopped
		// what the frozen agent ran before its replacement started.
		ch.injected(kind, false)
		ch.procs[ch.rng.IntN(len(ch.procs))].pause(hold + 6*time.Second)
	case FaultAgentSIGKILL:
		ch.injected(kind, false)
		ch.procs[ch.rng.IntN(len(ch.procs))].killAndRestart(hold)
	case FaultLoss:
		ch.injected(kind, false)
		ch.net.SetLoss(0.1 + 0.2*ch.rng.Float64())
		time.Sleep(hold)
		ch.net.Heal()
	case FaultDelay:
		ch.injected(kind, false)
		ch.net.SetDelay(time.Duration(20+ch.rng.IntN(150)) * time.Millisecond)
		time.Sleep(hold)
		ch.net.Heal()
	}
}

// failovers measures, for each fault that took the leader away, the time
// from injection to the first acknowledged submit called after it.
func (ch *chaos) failovers() []time.Duration {
	var out []time.Duration
	for _, at := range ch.injections {
		first := int64(-1)
		for _, op := range ch.history {
			in, out := op.Input.(taskInput), op.Output.(taskOutput)
			if in.Kind != "submit" || out.Unknown || op.Call < int64(at) {
				continue
			}
			if first < 0 || op.Return < first {
				first = op.Return
			}
		}
		if first >= 0 {
			out = append(out, time.Duration(first)-at)
		}
	}
	return out
}

// --- quiescence and checks ---------------------------------------------------

// endpointsBut is every endpoint but one.
func (ch *chaos) endpointsBut(name string) []string {
	var rest []string
	for _, e := range ch.endpoints() {
		if e != name {
			rest = append(rest, e)
		}
	}
	return rest
}

// minorityWith splits the endpoints: the replica named, with a random
// share of the agents and clients, against the rest.
func (ch *chaos) minorityWith(replica string) (minority, majority []string) {
	servers := ch.serverNames()
	minority = []string{replica}
	for _, e := range ch.endpoints() {
		if slices.Contains(servers, e) {
			if e != replica {
				majority = append(majority, e)
			}
			continue
		}
		if ch.rng.IntN(3) == 0 {
			minority = append(minority, e)
		} else {
			majority = append(majority, e)
		}
	}
	return minority, majority
}

// restartAgent stops agent i, waits hold, and starts it again from its
// data directory.
func (ch *chaos) restartAgent(i int, hold time.Duration) {
	ch.agentMu.Lock()
	ch.agents[i].Stop()
	ch.agentMu.Unlock()
	time.Sleep(hold)
	ch.agentMu.Lock()
	ch.agents[i] = ch.c.StartAgent(ch.agentCfgs[i])
	ch.agentMu.Unlock()
}
