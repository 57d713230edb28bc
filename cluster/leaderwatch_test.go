package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"herd/config"
)

// fakeContact is a Raft as the leader watch sees it; it validates a
// reload as Raft does for the lease and records every one.
type fakeContact struct {
	state   raft.RaftState
	last    time.Time
	lease   time.Duration
	cfg     raft.ReloadableConfig
	reloads []raft.ReloadableConfig
}

func (f *fakeContact) State() raft.RaftState                   { return f.state }
func (f *fakeContact) LastContact() time.Time                  { return f.last }
func (f *fakeContact) ReloadableConfig() raft.ReloadableConfig { return f.cfg }
func (f *fakeContact) ReloadConfig(rc raft.ReloadableConfig) error {
	if f.lease > rc.HeartbeatTimeout {
		return errors.New("LeaderLeaseTimeout cannot be larger than heartbeat timeout")
	}
	f.reloads = append(f.reloads, rc)
	f.cfg = rc
	return nil
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
