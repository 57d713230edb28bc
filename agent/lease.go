package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"herd/spec"
)

// An agent holds its running attempts on a lease from the leader. Every
// answer of the leader to a heartbeat of the node's current session (a
// gossip lease acknowledgement, an HTTP heartbeat or registration, both
// committed by the leader) renews it for the lease the leader names,
// counted from when the agent sent that heartbeat, so no time the answer
// spent on the way is counted in the agent's favour. Only the leader's
// answers count, because only the leader declares nodes DOWN and
// re-places their attempts: a follower that still hears the agent proves
// nothing about what the leader will do.
//
// When the lease runs out the agent stops every running attempt (SIGTERM
// to the process group, SIGKILL after the kill grace, started early
// enough that the group is gone when the lease ends) and reports each
// LOST with the reason once it reaches the cluster again. The leader
// gives a lease no longer than the silence that makes a node DOWN
// (config.Liveness.Lease), and re-places a DOWN node's attempts only once
// the longest lease it may have given, and a tenth more, has passed since
// the node was last heard (cluster.Server.replaceAfter): the old process
// is dead before its replacement can start, even when the agent is alive
// and merely cut off.
// While half the lease is gone without an answer, the agent also
// heartbeats over HTTP, which TCP carries through loss that eats UDP.

// lease is the agent's lease on its running attempts.
type lease struct {
	mu        sync.Mutex
	renewedAt time.Time     // monotonic: when the acknowledged request was sent
	ttl       time.Duration // 0: the cluster gives no lease (nothing is fenced)
	sent      [64]sentBeat  // recent gossip heartbeats, by seq modulo 64
	// onRenew, when set, is told of every extension (outside the lock):
	// the agent's lease guard follows the lease by it.
	onRenew func(renewedAt time.Time, ttl time.Duration)
}

type sentBeat struct {
	seq uint64
	at  time.Time
}

// sentHeartbeat records when gossip heartbeat seq first went out.
func (l *lease) sentHeartbeat(seq uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := &l.sent[seq%uint64(len(l.sent))]; b.seq != seq {
		*b = sentBeat{seq: seq, at: at}
	}
}

// acked renews the lease from the send time of heartbeat seq; false
// when the heartbeat is too old to be remembered.
func (l *lease) acked(seq uint64, ttl time.Duration) bool {
	l.mu.Lock()
	b := l.sent[seq%uint64(len(l.sent))]
	l.mu.Unlock()
	if b.seq != seq || b.at.IsZero() {
		return false
	}
	l.renew(b.at, ttl)
	return true
}

// renew extends the lease to ttl from sentAt, if that is later.
func (l *lease) renew(sentAt time.Time, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	l.mu.Lock()
	extended := l.ttl == 0 || sentAt.Add(ttl).After(l.renewedAt.Add(l.ttl))
	if extended {
		l.renewedAt, l.ttl = sentAt, ttl
	}
	l.mu.Unlock()
	if extended && l.onRenew != nil {
		l.onRenew(sentAt, ttl)
	}
}

// state returns the lease's length and how much of it is left at now;
// ttl 0 means there is none.
func (l *lease) state(now time.Time) (ttl, left time.Duration, renewedAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ttl == 0 {
		return 0, 0, time.Time{}
	}
	return l.ttl, l.renewedAt.Add(l.ttl).Sub(now), l.renewedAt
}

// fenceError is why an attempt was stopped for want of a lease, and the
// grace its processes get between SIGTERM and SIGKILL.
type fenceError struct {
	msg   string
	grace time.Duration
}

// fenced is why ctx was ended for want of a lease; nil when it was not
// (or has not ended).
func fenced(ctx context.Context) *fenceError {
	var fence *fenceError
	if errors.As(context.Cause(ctx), &fence) {
		return fence
	}
	return nil
}

// fenceGrace is the kill grace of an attempt stopped for want of a lease
// of ttl: the configured one, but at most a quarter of the lease, so the
// stop begins while most of the lease is still left only if it must.
func (a *Agent) fenceGrace(ttl time.Duration) time.Duration { return min(a.cfg.KillGrace, ttl/4) }

func (e *fenceError) Error() string { return e.msg }

// leaseCheckEvery is how often the lease loop looks at the lease: the
// most it may notice late.
func (a *Agent) leaseCheckEvery() time.Duration {
	return max(a.cfg.HeartbeatInterval/10, 10*time.Millisecond)
}

// leaseLoop watches the lease: it asks for an HTTP heartbeat once half of
// it is gone unanswered, and stops the running attempts once too little
// is left to stop them within it.
func (a *Agent) leaseLoop(ctx context.Context) {
	every := a.leaseCheckEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	lapsed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		ttl, left, renewedAt := a.lease.state(now)
		if ttl == 0 {
			continue
		}
		if left < ttl/2 {
			select {
			case a.renewNow <- struct{}{}:
			default:
			}
		}
		grace := a.fenceGrace(ttl)
		if left > grace+every {
			lapsed = false
			continue
		}
		if !lapsed {
			lapsed = true
			a.lapses.Add(1)
			a.logger.Warn("the lease from the cluster ran out: running attempts are stopped, none started", "lease", ttl, "since_renewed", now.Sub(renewedAt))
		}
		a.fenceRunning(&fenceError{grace: grace, msg: fmt.Sprintf("stopped on %s: no contact with the cluster for %s, lease %s",
			a.cfg.ID, now.Sub(renewedAt).Round(100*time.Millisecond), ttl.Round(100*time.Millisecond))})
	}
}

// fenceRunning stops every running attempt for want of a lease.
func (a *Agent) fenceRunning(why *fenceError) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, ex := range a.running {
		if ex.fenced || ex.assignment.Spec.OnDisconnect == spec.OnDisconnectKeepRunning {
			continue
		}
		ex.fenced = true
		a.fences.Add(1)
		a.logger.Warn("stopping an attempt: the lease on it is running out", "attempt", id, "task", ex.assignment.Attempt.TaskID, "reason", why.msg)
		ex.cancel(why)
		a.conditions.note(fmt.Sprintf("attempt %s of task %s %s", id, ex.assignment.Attempt.TaskID, why.msg))
	}
}
