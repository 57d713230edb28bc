package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"herd/api"
	"herd/spec"
)

// assignmentLoop watches this node's assignments and reconciles.
func (a *Agent) assignmentLoop(ctx context.Context) {
	// index is the last list's (what the next watch waits past); applied
	// the most advanced replica state a list acted on came from.
	var index, applied uint64
	lastBusy := time.Now()
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		q := api.AssignmentsQuery{Index: index, Wait: a.cfg.AssignmentWait}
		if index > 0 {
			q.Known, q.Held = a.knownAssignments()
		}
		as, err := a.client.Assignments(ctx, a.cfg.ID, q)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// A 404 here may only mean the replica asked has not applied the
			// registration yet; the heartbeat, answered by the leader,
			// decides whether to register again.
			a.logger.Warn("assignment watch failed, retrying", "in", backoff, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		if as.AppliedIndex != 0 && as.AppliedIndex < applied {
			// A replica behind one this agent already heard from (it failed
			// over to a lagging or partitioned one): its list is older than
			// what the agent acts on, and an attempt missing from it was not
			// taken back. Wait for the replica to catch up.
			continue
		}
		if as.SessionGeneration < a.session.Load() {
			// The replica asked has not applied this agent's registration
			// yet: its list predates the session, and an attempt the agent's
			// previous run started may still read RESERVED there (starting
			// it would run it twice). Wait until the registration reaches it.
			index = max(index, as.Index)
			continue
		}
		if !a.fillHeld(&as) {
			// The answer names as held an attempt the kept list lacks,
			// which a consistent cluster never does: ask at once for a
			// whole list rather than act on a partial one.
			a.logger.Warn("assignments named an attempt as held that the agent does not hold, asking for the whole list", "index", as.Index)
			index = 0
			continue
		}
		index, applied = as.Index, max(applied, as.AppliedIndex)
		if as.Liveness == api.LivenessDown {
			a.requestReregister()
		}
		a.reconcile(ctx, &as)
		a.profile.handle(ctx, &as)
		if len(as.Attempts) > 0 || len(a.Running()) > 0 {
			lastBusy = time.Now()
		}
		if a.cfg.HibernateAfter > 0 && a.gossip != nil && time.Since(lastBusy) >= a.cfg.HibernateAfter {
			if !a.hibernate(ctx) {
				return
			}
			index, lastBusy = 0, time.Now()
		}
	}
}

// knownAssignments is the digest of the live set this agent expects: the
// last list it got without the attempts it has ended since. The cluster
// then answers only changes the agent did not make itself (a reservation,
// a cancel, a reclaim, a new session or liveness), not its own starts and
// results committing. held is that list's index: the agent keeps it
// whole, so the attempts still to start in it need not come whole again
// (see api.AssignmentsQuery).
func (a *Agent) knownAssignments() (known string, held uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return "", 0
	}
	ids := make([]string, 0, len(a.last.Attempts))
	for _, x := range a.last.Attempts {
		if !a.finished[x.Attempt.ID] {
			ids = append(ids, x.Attempt.ID)
		}
	}
	return api.AssignmentsDigest(a.last.SessionGeneration, a.last.State(), ids), a.last.Index
}

// fillHeld completes the attempts as names as held with what the kept
// list has of them (spec, inputs, the attempt whole), keeping the
// answer's own StartWithinMs and EarlierSession. It reports false, leaving
// as partial, when the kept list lacks one.
func (a *Agent) fillHeld(as *api.Assignments) bool {
	if !slices.ContainsFunc(as.Attempts, func(x api.Assignment) bool { return x.Held }) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return false
	}
	kept := make(map[string]*api.Assignment, len(a.last.Attempts))
	for i := range a.last.Attempts {
		if k := &a.last.Attempts[i]; k.Attempt.State == api.AttemptReserved {
			kept[k.Attempt.ID] = k
		}
	}
	for i := range as.Attempts {
		x := &as.Attempts[i]
		if !x.Held {
			continue
		}
		k := kept[x.Attempt.ID]
		if k == nil || k.Attempt.LeaseVersion != x.Attempt.LeaseVersion {
			return false
		}
		whole := *k
		whole.StartWithinMs, whole.EarlierSession = x.StartWithinMs, x.EarlierSession
		*x = whole
	}
	return true
}

// hibernate stops polling and advertises it, keeping only gossip (the
// node stays alive) until the leader wakes it. It returns false when the
// agent stops meanwhile.
func (a *Agent) hibernate(ctx context.Context) bool {
	a.hibernating.Store(true)
	a.gossip.publish()
	a.logger.Info("idle: hibernating until woken", "idle_for", a.cfg.HibernateAfter)
	select {
	case <-ctx.Done():
		return false
	case <-a.wakeCh:
	}
	a.hibernating.Store(false)
	a.gossip.publish()
	a.logger.Info("woken up: polling for assignments again")
	return true
}

// wakeUp ends hibernation (a wake message from the leader).
func (a *Agent) wakeUp() {
	select {
	case a.wakeCh <- struct{}{}:
	default:
	}
}

// Hibernating reports whether the agent sleeps.
func (a *Agent) Hibernating() bool { return a.hibernating.Load() }

// reconcile makes what runs here match the cluster's assignments: stop
// what was taken back, start what is new, up to the slots.
func (a *Agent) reconcile(ctx context.Context, as *api.Assignments) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if as != nil {
		a.last, a.lastAt = as, time.Now()
	}
	if a.last == nil {
		return
	}
	if a.leftovers == nil {
		// The first list since the agent started, before it starts
		// anything: what an earlier run left running goes first.
		listed := map[string]bool{}
		for _, x := range a.last.Attempts {
			if x.Attempt.State == api.AttemptRunning || x.EarlierSession {
				listed[x.Attempt.ID] = true
			}
		}
		a.leftovers = killLeftovers(a.cfg.ID, a.workDirs.root, listed)
		if a.leftovers == nil {
			a.leftovers = map[string]int{}
		}
		for id, n := range a.leftovers {
			a.logger.Warn("killed what an earlier run of the agent left running", "attempt", id, "processes", n)
		}
	}
	live := make(map[string]struct{}, len(a.last.Attempts))
	for _, x := range a.last.Attempts {
		live[x.Attempt.ID] = struct{}{}
	}
	for id, ex := range a.running {
		if _, ok := live[id]; !ok && !ex.ended {
			a.logger.Info("attempt taken back by the cluster (cancelled or reclaimed), stopping it", "attempt", id)
			ex.cancel(nil)
		}
	}
	for id := range a.finished {
		if _, ok := live[id]; !ok {
			delete(a.finished, id) // the cluster has recorded its end
		}
	}
	// By index: ranging by value would copy every element to the heap
	// (the goroutines below capture it) on every call; the copy is made
	// only for an attempt started.
	for i := range a.last.Attempts {
		id := a.last.Attempts[i].Attempt.ID
		if a.running[id] != nil || a.finished[id] {
			continue
		}
		x := a.last.Attempts[i]
		if x.Attempt.State == api.AttemptRunning || x.EarlierSession {
			// Started by an earlier run of this agent, which is gone: the
			// attempt is lost (what that run left of it was killed above,
			// so the run the cluster places next cannot overlap it).
			// Report it so the task is retried now rather than when a
			// timeout notices. One still reserved, but for an earlier
			// session, that run may have started before its start was
			// committed (see execute): it is not started again.
			a.finished[id] = true
			why := "the agent restarted; the process is gone"
			if x.Attempt.State != api.AttemptRunning {
				why = "the agent restarted; its earlier run may have started the attempt, so it is not run again"
			}
			if n := a.leftovers[id]; n > 0 {
				why = fmt.Sprintf("the agent restarted; the %d processes its earlier run left running were killed", n)
			}
			if a.leftoverContainers[id] {
				why = "the agent restarted; the container its earlier run left was killed and removed"
			}
			if fence := takeFenceRecord(a.cfg.DataDir, id); fence != "" {
				why = "the agent restarted; " + fence
			}
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.report(ctx, x, outcome{state: api.AttemptLost, exitCode: -1, err: why})
			}()
			continue
		}
		if len(a.running) >= max(a.cfg.Slots, 1) {
			continue
		}
		actx, cancel := context.WithCancelCause(ctx)
		a.running[id] = &execution{assignment: x, cancel: cancel}
		a.metaDirty.Store(true)
		var startBy time.Time
		if x.StartWithinMs > 0 {
			startBy = a.lastAt.Add(time.Duration(x.StartWithinMs) * time.Millisecond)
		}
		keep := x.Spec.OnDisconnect == spec.OnDisconnectKeepRunning
		if keep {
			// The guard spares it too when the agent stops or dies.
			a.guard.Load().keepRunning(id, true)
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer cancel(nil)
			if keep {
				defer a.guard.Load().keepRunning(id, false)
			}
			a.execute(ctx, actx, cancel, x, startBy)
			a.mu.Lock()
			delete(a.running, id)
			a.finished[id] = true
			a.mu.Unlock()
			a.metaDirty.Store(true)
			a.reconcile(ctx, nil) // a slot is free: start what waits
		}()
	}
}
