package cluster

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftContact is what the leader watch needs of Raft; *raft.Raft has it.
type raftContact interface {
	State() raft.RaftState
	LastContact() time.Time
	ReloadableConfig() raft.ReloadableConfig
	ReloadConfig(raft.ReloadableConfig) error
}

// leaderWatch makes a follower stand for election soon after its leader
// has been silent for a heartbeat timeout.
//
// Raft checks for its leader only when a timer fires, at random intervals
// of one to two heartbeat timeouts, and stands only when the last contact
// is older than one timeout at that moment: a leader that vanishes is
// noticed after one to three timeouts, and the other follower, still
// holding its leader until its own check, refuses the first candidate's
// votes meanwhile. The watch polls the last contact 32 times a timeout
// and, once it is a timeout and this replica's jitter old, has Raft run
// its check at once, through the one door Raft opens for that: a reload of
// its configuration with a shorter heartbeat timeout, which a follower
// answers by checking now. The timeout is put back straight after. So
// both followers notice a lost leader within a timeout and a quarter.
//
// The jitter, a random share of a quarter timeout, keeps the followers
// apart: the leader's last heartbeat reached both at once, and two that
// stand within a round trip of each other split the vote and wait out an
// election timeout. Apart, the first is refused by the other, which still
// holds its leader, and the second wins with the first's vote.
//
// Whether to stand stays Raft's decision, by its own rules: pre-vote and a
// follower's loyalty to a leader it still hears keep a follower that alone
// misses heartbeats from deposing anyone.
type leaderWatch struct {
	r      raftContact
	logger hclog.Logger
	// nudged is when the watch last had Raft check; it asks at most once
	// a timeout, as Raft's own timer would at its quickest.
	nudged time.Time
	// jitter is how far past a timeout of silence this replica waits
	// before it nudges, drawn afresh after each nudge from [0, timeout/4).
	jitter time.Duration
	// disabled records that Raft refused the shorter timeout (its lease
	// equals the heartbeat timeout), so the watch stays quiet.
	disabled bool
}

// leaderWatchPolls is how many times a heartbeat timeout the watch looks.
const leaderWatchPolls = 32

func newLeaderWatch(r raftContact, logger hclog.Logger) *leaderWatch {
	w := &leaderWatch{r: r, logger: logger}
	w.jitter = leaderWatchJitter(r.ReloadableConfig().HeartbeatTimeout)
	return w
}

func leaderWatchJitter(hb time.Duration) time.Duration {
	return rand.N(max(hb/4, 1))
}

// run polls until ctx ends.
func (w *leaderWatch) run(ctx context.Context) {
	for {
		wait := w.r.ReloadableConfig().HeartbeatTimeout / leaderWatchPolls
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, time.Millisecond)):
		}
		w.check(time.Now())
	}
}

// check nudges Raft when this replica is a follower whose leader has been
// silent for a heartbeat timeout at now. It reports whether it did.
func (w *leaderWatch) check(now time.Time) bool {
	if w.disabled || w.r.State() != raft.Follower {
		return false
	}
	last := w.r.LastContact()
	rc := w.r.ReloadableConfig()
	hb := rc.HeartbeatTimeout
	// A replica that never heard a leader is left to Raft: its first
	// election after a start is Raft's own business.
	if last.IsZero() || now.Sub(last) < hb+w.jitter || now.Sub(w.nudged) < hb {
		return false
	}
	w.nudged, w.jitter = now, leaderWatchJitter(hb)
	shorter := rc
	shorter.HeartbeatTimeout = hb - time.Nanosecond
	if err := w.r.ReloadConfig(shorter); err != nil {
		w.disabled = true
		w.logger.Warn("cannot hasten elections: raft refuses a shorter heartbeat timeout; a lost leader is noticed on raft's own timer", "error", err)
		return false
	}
	if err := w.r.ReloadConfig(rc); err != nil {
		// The same values were accepted at the start; a refusal here
		// leaves a timeout one nanosecond short, which nobody can tell.
		w.logger.Error("restoring raft's heartbeat timeout", "error", err)
	}
	w.logger.Debug("leader silent for a heartbeat timeout; raft checks now", "silent", now.Sub(last))
	return true
}
