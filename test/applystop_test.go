package test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd/api"
	"herd/fsm"
)

// A leader stopped under load from in-process callers stops, its callers
// return promptly, later calls are refused as not applied, and no
// goroutine is left waiting on an entry: raft never answers an entry
// committed but not yet applied when it shuts down, so the replica
// drains raft before stopping it and admits nothing new meanwhile.
func TestApplyCommandReturnsWhenTheLeaderStops(t *testing.T) {
	// Each replica's FSM is made slow, so that commits run ahead of it
	// and entries wait, committed, for the FSM when the leader stops.
	c := NewClusterWith(t, 3, Setup{AfterApply: func(string, uint64, *fsm.State) { time.Sleep(time.Millisecond) }})
	leader := c.WaitForLeader()
	srv := c.Server(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A heartbeat of an unknown node: refused by the FSM, but an entry
	// that commits and applies like any other.
	cmd, err := fsm.Encode(fsm.MsgHeartbeat, fsm.HeartbeatRequest{NodeID: "nobody", SessionGeneration: 1, Now: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	start := srv.FSM().Index()
	stop := make(chan struct{})
	var waiting atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		waiting.Add(1)
		go func() {
			defer wg.Done()
			defer waiting.Add(-1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _, _ = srv.ApplyCommand(ctx, cmd)
			}
		}()
	}
	if !Eventually(30*time.Second, func() bool { return srv.FSM().Index() > start+200 }) {
		t.Fatal("the leader applied too little to stop it under load")
	}
	c.Stop(leader)
	close(stop)
	if !Eventually(30*time.Second, func() bool { return waiting.Load() == 0 }) {
		t.Fatalf("%d of 32 ApplyCommand callers still waiting 30 s after their leader stopped", waiting.Load())
	}
	wg.Wait()
	var ce *api.CodedError
	if _, _, err := srv.ApplyCommand(ctx, cmd); !errors.As(err, &ce) || ce.Code != api.CodeNotApplied {
		t.Errorf("ApplyCommand on a stopped replica: %v, want a not_applied refusal", err)
	}

}
