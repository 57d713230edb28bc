package cluster

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
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
	// Stats has the last entry of the log ("last_log_index",
	// "last_log_term").
	Stats() map[string]string
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
// The jitter keeps the followers apart: the leader's last heartbeat
// reached both at once, and two that stand within a round trip of each
// other split the vote and wait out an election timeout. Apart, the first
// is refused by the other, which still holds its leader, and the second
// wins with the first's vote (or, when the first is the more up to date,
// the look at pre-votes has the second stand at once and grant it). A
// replica's jitter is its place among the voters, ordered by id, spread
// over a quarter timeout, so that any two stand at least that quarter
// over one fewer than the voters apart (125 ms for three voters with a
// one-second timeout); a random share of the quarter while its place is
// unknown. Random shares alone came within a round trip of each other
// often enough to split the vote in about one lost leader of thirty.
//
// Whether to stand stays Raft's decision, by its own rules: pre-vote and a
// follower's loyalty to a leader it still hears keep a follower that alone
// misses heartbeats from deposing anyone.
type leaderWatch struct {
	r      raftContact
	logger hclog.Logger

	// mu guards what follows: the watch's loop and the transport's look
	// at pre-vote requests (beforePreVote) both nudge.
	mu sync.Mutex
	// nudged is when the watch last had Raft check; it asks at most once
	// a timeout, as Raft's own timer would at its quickest.
	nudged time.Time
	// jitter is how far past a timeout of silence this replica waits
	// before it nudges, drawn afresh after each nudge (see draw).
	jitter time.Duration
	// rank, once set, is this replica's place among the voters ordered
	// by id, and how many voters there are.
	rank func() (place, voters int)
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

// placeAmong gives the watch this replica's place among the voters, and
// draws its jitter from it.
func (w *leaderWatch) placeAmong(rank func() (place, voters int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rank = rank
	w.jitter = w.draw(w.r.ReloadableConfig().HeartbeatTimeout)
}

// draw returns this replica's jitter for the heartbeat timeout hb: its
// place among the voters spread over [0, hb/4], or a random share of
// hb/4 while its place is unknown. w.mu is held.
func (w *leaderWatch) draw(hb time.Duration) time.Duration {
	if w.rank != nil {
		if place, voters := w.rank(); voters >= 2 && place >= 0 && place < voters {
			return time.Duration(place) * (hb / 4) / time.Duration(voters-1)
		}
	}
	return leaderWatchJitter(hb)
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
// silent for a heartbeat timeout and its jitter at now. It reports
// whether it did.
func (w *leaderWatch) check(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nudge(now, w.jitter)
}

// nudge has Raft check for its leader now, if this replica is a follower
// whose leader has been silent for a heartbeat timeout and wait past it,
// and the watch did not nudge within the last timeout. It reports
// whether it did. w.mu is held.
func (w *leaderWatch) nudge(now time.Time, wait time.Duration) bool {
	if w.disabled || w.r.State() != raft.Follower {
		return false
	}
	last := w.r.LastContact()
	rc := w.r.ReloadableConfig()
	hb := rc.HeartbeatTimeout
	// A replica that never heard a leader is left to Raft: its first
	// election after a start is Raft's own business.
	if last.IsZero() || now.Sub(last) < hb+wait || now.Sub(w.nudged) < hb {
		return false
	}
	w.nudged, w.jitter = now, w.draw(hb)
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

// preVoteHold bounds, in heartbeat timeouts, how long beforePreVote holds
// a request while Raft checks for its leader.
const preVoteHold = 8

// beforePreVote sees a pre-vote request before Raft answers it (see
// preVoteLook). When this replica is a follower whose leader has been
// silent for a heartbeat timeout and the candidate's log is more up to
// date than its own, it has Raft check now, without waiting out its
// jitter, and holds the request until Raft has left the follower state
// (for at most a heartbeat timeout over preVoteHold): Raft then answers
// it holding no leader, by the logs alone. A candidate whose log is not
// ahead is answered as before, so two candidates with equal claims still
// stand apart and do not split the vote.
func (w *leaderWatch) beforePreVote(req *raft.RequestPreVoteRequest) {
	if !ahead(req, w.r.Stats()) {
		return
	}
	now := time.Now()
	w.mu.Lock()
	nudged := w.nudge(now, 0)
	w.mu.Unlock()
	if !nudged {
		return
	}
	limit := now.Add(w.r.ReloadableConfig().HeartbeatTimeout / preVoteHold)
	for w.r.State() == raft.Follower && time.Now().Before(limit) {
		time.Sleep(time.Millisecond)
	}
	w.logger.Debug("a candidate ahead of this replica asked for a pre-vote after the leader fell silent; raft checked first", "candidate", req.ID, "state", w.r.State())
}

// ahead reports whether the candidate's last entry is later than the
// replica's, by Raft's order (term, then index); unreadable stats are not
// ahead.
func ahead(req *raft.RequestPreVoteRequest, stats map[string]string) bool {
	term, err1 := strconv.ParseUint(stats["last_log_term"], 10, 64)
	index, err2 := strconv.ParseUint(stats["last_log_index"], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return req.LastLogTerm > term || req.LastLogTerm == term && req.LastLogIndex > index
}

// voterPlace is this replica's place among the voters of its latest Raft
// configuration ordered by id, and how many voters there are (-1 and 0
// when the configuration cannot be read).
func voterPlace(r interface {
	GetConfiguration() raft.ConfigurationFuture
}, self raft.ServerID) (place, voters int) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return -1, 0
	}
	var ids []raft.ServerID
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			ids = append(ids, srv.ID)
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, self), len(ids)
}
