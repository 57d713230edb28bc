package cluster

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/config"
)

// fakeContact is a Raft as the leader watch sees it; it validates a
// reload as Raft does for the lease and records every one.
type fakeContact struct {
	mu      sync.Mutex
	state   raft.RaftState
	last    time.Time
	lease   time.Duration
	cfg     raft.ReloadableConfig
	reloads []raft.ReloadableConfig
	// lastIndex and lastTerm are the log's last entry; standOnCheck makes
	// a nudge turn the follower into a candidate, as Raft does when its
	// leader has been silent a timeout.
	lastIndex, lastTerm uint64
	standOnCheck        bool
}

func (f *fakeContact) State() raft.RaftState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}
func (f *fakeContact) LastContact() time.Time { return f.last }
func (f *fakeContact) ReloadableConfig() raft.ReloadableConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}
func (f *fakeContact) ReloadConfig(rc raft.ReloadableConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease > rc.HeartbeatTimeout {
		return errors.New("LeaderLeaseTimeout cannot be larger than heartbeat timeout")
	}
	if f.standOnCheck && rc.HeartbeatTimeout < f.cfg.HeartbeatTimeout {
		f.state = raft.Candidate
	}
	f.reloads = append(f.reloads, rc)
	f.cfg = rc
	return nil
}
func (f *fakeContact) Stats() map[string]string {
	return map[string]string{"last_log_index": strconv.FormatUint(f.lastIndex, 10), "last_log_term": strconv.FormatUint(f.lastTerm, 10)}
}

func TestLeaderWatch(t *testing.T) {
	const hb = 800 * time.Millisecond
	base := raft.ReloadableConfig{TrailingLogs: 10240, SnapshotInterval: time.Minute, SnapshotThreshold: 8192, HeartbeatTimeout: hb, ElectionTimeout: hb}
	t0 := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
	newWatch := func(state raft.RaftState, last time.Time, lease time.Duration) (*leaderWatch, *fakeContact) {
		f := &fakeContact{state: state, last: last, lease: lease, cfg: base}
		return newLeaderWatch(f, hclog.NewNullLogger()), f
	}

	t.Run("a silent leader makes raft check now, and the timeout is put back", func(t *testing.T) {
		w, f := newWatch(raft.Follower, t0, 750*time.Millisecond)
		if w.jitter < 0 || w.jitter >= hb/4 {
			t.Fatalf("jitter %s outside [0, %s)", w.jitter, hb/4)
		}
		if w.check(t0.Add(hb + w.jitter - time.Millisecond)) {
			t.Fatalf("nudged before a timeout and this replica's jitter (%s) of silence", w.jitter)
		}
		at := t0.Add(hb + hb/4)
		if !w.check(at) {
			t.Fatal("no nudge after a timeout and a quarter of silence")
		}
		if len(f.reloads) != 2 {
			t.Fatalf("reloads = %+v, want a shorter timeout then the original", f.reloads)
		}
		if got := f.reloads[0]; got.HeartbeatTimeout >= hb || got.ElectionTimeout != hb || got.TrailingLogs != base.TrailingLogs {
			t.Errorf("first reload %+v: want only the heartbeat timeout shorter", got)
		}
		if f.cfg != base {
			t.Errorf("config after the nudge = %+v, want %+v", f.cfg, base)
		}
		// At most once a timeout, however often it polls.
		if w.jitter < 0 || w.jitter >= hb/4 {
			t.Errorf("jitter drawn after the nudge %s outside [0, %s)", w.jitter, hb/4)
		}
		if w.check(at.Add(hb - time.Millisecond)) {
			t.Error("nudged again within a timeout of the last nudge")
		}
		if !w.check(at.Add(hb)) {
			t.Error("no second nudge a timeout after the first, the leader still silent")
		}
	})

	t.Run("a leader heard within the timeout is left alone", func(t *testing.T) {
		w, f := newWatch(raft.Follower, t0, 750*time.Millisecond)
		if w.check(t0.Add(hb-time.Millisecond)) || len(f.reloads) != 0 {
			t.Errorf("nudged after %s of silence: %+v", hb-time.Millisecond, f.reloads)
		}
	})

	t.Run("only a follower that once heard a leader is nudged", func(t *testing.T) {
		for _, st := range []raft.RaftState{raft.Leader, raft.Candidate, raft.Shutdown} {
			w, f := newWatch(st, t0, 750*time.Millisecond)
			if w.check(t0.Add(time.Hour)) || len(f.reloads) != 0 {
				t.Errorf("%s nudged", st)
			}
		}
		w, f := newWatch(raft.Follower, time.Time{}, 750*time.Millisecond)
		if w.check(t0) || len(f.reloads) != 0 {
			t.Error("a follower that never heard a leader was nudged")
		}
	})

	t.Run("a lease as long as the timeout turns the watch off", func(t *testing.T) {
		w, f := newWatch(raft.Follower, t0, hb)
		if w.check(t0.Add(2 * hb)) {
			t.Error("reported a nudge raft refused")
		}
		if !w.disabled || f.cfg != base {
			t.Errorf("disabled = %v, config %+v: want off and untouched", w.disabled, f.cfg)
		}
		if w.check(t0.Add(10*hb)) || len(f.reloads) != 0 {
			t.Error("a disabled watch nudged")
		}
	})

	t.Run("the default timings leave the watch room to shorten the timeout", func(t *testing.T) {
		d := config.DefaultRaft()
		f := &fakeContact{state: raft.Follower, last: t0, lease: d.LeaderLeaseTimeout, cfg: base}
		f.cfg.HeartbeatTimeout, f.cfg.ElectionTimeout = d.HeartbeatTimeout, d.ElectionTimeout
		w := newLeaderWatch(f, hclog.NewNullLogger())
		if !w.check(t0.Add(2*d.HeartbeatTimeout)) || w.disabled {
			t.Fatalf("the defaults (timeout %s, lease %s) turned the watch off", d.HeartbeatTimeout, d.LeaderLeaseTimeout)
		}
	})

	t.Run("the operator's timeout is the one watched", func(t *testing.T) {
		w, f := newWatch(raft.Follower, t0, 750*time.Millisecond)
		f.cfg.HeartbeatTimeout, f.cfg.ElectionTimeout = 10*time.Minute, 10*time.Minute
		if w.check(t0.Add(time.Minute)) {
			t.Error("nudged after a minute of silence with a ten-minute timeout")
		}
	})
}

// A pre-vote request from a candidate whose log is ahead of this
// follower's, once the leader has been silent a heartbeat timeout, makes
// Raft check at once, without the jitter, and is held until Raft stood;
// any other request is left to Raft as it comes.
func TestLeaderWatchBeforePreVote(t *testing.T) {
	const hb = 800 * time.Millisecond
	base := raft.ReloadableConfig{TrailingLogs: 10240, SnapshotInterval: time.Minute, SnapshotThreshold: 8192, HeartbeatTimeout: hb, ElectionTimeout: hb}
	// The follower's log ends at index 120 of term 3.
	newWatch := func(silent time.Duration) (*leaderWatch, *fakeContact) {
		f := &fakeContact{state: raft.Follower, last: time.Now().Add(-silent), lease: 750 * time.Millisecond, cfg: base,
			lastIndex: 120, lastTerm: 3, standOnCheck: true}
		w := newLeaderWatch(f, hclog.NewNullLogger())
		w.jitter = hb / 4 // the longest: the look must not wait it out
		return w, f
	}
	req := func(term, index uint64) *raft.RequestPreVoteRequest {
		return &raft.RequestPreVoteRequest{Term: 5, LastLogTerm: term, LastLogIndex: index}
	}

	t.Run("a candidate ahead has raft stand before it answers", func(t *testing.T) {
		for _, r := range []*raft.RequestPreVoteRequest{req(3, 121), req(4, 1)} {
			w, f := newWatch(hb + time.Millisecond)
			w.beforePreVote(r)
			if len(f.reloads) != 2 || f.cfg != base {
				t.Fatalf("candidate at term %d index %d: reloads %+v, config %+v: want one nudge, the timeout put back", r.LastLogTerm, r.LastLogIndex, f.reloads, f.cfg)
			}
			if st := f.State(); st != raft.Candidate {
				t.Fatalf("returned with raft %s, want it to have stood first", st)
			}
			// The watch's own nudge counts it: not again within a timeout,
			// were raft still a follower.
			f.mu.Lock()
			f.state = raft.Follower
			f.mu.Unlock()
			if w.check(time.Now()) {
				t.Error("the watch nudged again right after the look did")
			}
		}
	})

	t.Run("a candidate not ahead is left to raft", func(t *testing.T) {
		for _, r := range []*raft.RequestPreVoteRequest{req(3, 120), req(3, 119), req(2, 500)} {
			w, f := newWatch(hb + time.Millisecond)
			w.beforePreVote(r)
			if len(f.reloads) != 0 {
				t.Errorf("candidate at term %d index %d against the follower's 3/120: nudged", r.LastLogTerm, r.LastLogIndex)
			}
		}
	})

	t.Run("a leader heard within the timeout keeps the follower loyal", func(t *testing.T) {
		w, f := newWatch(hb / 2)
		w.beforePreVote(req(9, 900))
		if len(f.reloads) != 0 {
			t.Errorf("nudged with the leader heard %s ago", hb/2)
		}
	})

	t.Run("only a follower is nudged", func(t *testing.T) {
		w, f := newWatch(hb + time.Millisecond)
		f.state = raft.Candidate
		w.beforePreVote(req(9, 900))
		if len(f.reloads) != 0 {
			t.Error("a candidate was nudged")
		}
	})

	t.Run("the request is held a bounded time when raft does not stand", func(t *testing.T) {
		const short = 40 * time.Millisecond
		f := &fakeContact{state: raft.Follower, last: time.Now().Add(-time.Second), lease: short / 2, lastIndex: 1, lastTerm: 1,
			cfg: raft.ReloadableConfig{HeartbeatTimeout: short, ElectionTimeout: short}}
		w := newLeaderWatch(f, hclog.NewNullLogger())
		done := make(chan struct{})
		go func() { w.beforePreVote(req(2, 1)); close(done) }()
		<-done // returns although raft stayed a follower
		if len(f.reloads) != 2 || f.State() != raft.Follower {
			t.Errorf("reloads %+v, state %s", f.reloads, f.State())
		}
	})
}

func TestAheadFollowsRaftsOrder(t *testing.T) {
	stats := map[string]string{"last_log_index": "120", "last_log_term": "3"}
	for _, c := range []struct {
		term, index uint64
		want        bool
	}{{3, 121, true}, {4, 0, true}, {3, 120, false}, {3, 119, false}, {2, 1000, false}} {
		if got := ahead(&raft.RequestPreVoteRequest{LastLogTerm: c.term, LastLogIndex: c.index}, stats); got != c.want {
			t.Errorf("candidate %d/%d against 3/120: ahead = %v, want %v", c.term, c.index, got, c.want)
		}
	}
	if ahead(&raft.RequestPreVoteRequest{LastLogTerm: 9, LastLogIndex: 9}, map[string]string{}) {
		t.Error("a candidate counted ahead of unreadable stats")
	}
}

// With its place among the voters known, a replica's jitter is that place
// spread over a quarter timeout: any two stand an eighth of a timeout
// apart among three voters, at every draw.
func TestLeaderWatchJitterFollowsThePlace(t *testing.T) {
	const hb = time.Second
	base := raft.ReloadableConfig{HeartbeatTimeout: hb, ElectionTimeout: hb}
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for place, want := range []time.Duration{0, hb / 8, hb / 4} {
		f := &fakeContact{state: raft.Follower, last: t0, lease: hb / 2, cfg: base}
		w := newLeaderWatch(f, hclog.NewNullLogger())
		w.placeAmong(func() (int, int) { return place, 3 })
		if w.jitter != want {
			t.Fatalf("place %d of 3: jitter %s, want %s", place, w.jitter, want)
		}
		if w.check(t0.Add(hb + want - time.Nanosecond)) {
			t.Fatalf("place %d nudged before a timeout and its jitter", place)
		}
		if !w.check(t0.Add(hb + want)) {
			t.Fatalf("place %d did not nudge after a timeout and its jitter", place)
		}
		if w.jitter != want {
			t.Fatalf("place %d: jitter drawn again %s, want %s", place, w.jitter, want)
		}
	}
	// An unknown place falls back to a random share of the quarter.
	f := &fakeContact{state: raft.Follower, last: t0, lease: hb / 2, cfg: base}
	w := newLeaderWatch(f, hclog.NewNullLogger())
	w.placeAmong(func() (int, int) { return -1, 0 })
	if w.jitter < 0 || w.jitter >= hb/4 {
		t.Fatalf("unknown place: jitter %s outside [0, %s)", w.jitter, hb/4)
	}
}

type fakeConfiguration struct{ servers []raft.Server }

func (f fakeConfiguration) GetConfiguration() raft.ConfigurationFuture {
	return configurationFuture{raft.Configuration{Servers: f.servers}}
}

type configurationFuture struct{ c raft.Configuration }

func (f configurationFuture) Error() error                      { return nil }
func (f configurationFuture) Index() uint64                     { return 1 }
func (f configurationFuture) Configuration() raft.Configuration { return f.c }

func TestVoterPlaceCountsVotersByID(t *testing.T) {
	c := fakeConfiguration{servers: []raft.Server{
		{ID: "s3", Suffrage: raft.Voter}, {ID: "s1", Suffrage: raft.Voter},
		{ID: "s0", Suffrage: raft.Nonvoter}, {ID: "s2", Suffrage: raft.Voter},
	}}
	for id, want := range map[raft.ServerID]int{"s1": 0, "s2": 1, "s3": 2, "s0": -1} {
		if place, voters := voterPlace(c, id); place != want || voters != 3 {
			t.Errorf("%s: place %d of %d, want %d of 3", id, place, voters, want)
		}
	}
}
