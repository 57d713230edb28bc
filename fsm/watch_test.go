package fsm

import (
	"context"
	"errors"
	"testing"
	"time"

	"herd/scheduler"
)

func TestWatchSetWakesOnCloseOrContext(t *testing.T) {
	ws := NewWatchSet()
	a, b := make(chan struct{}), make(chan struct{})
	ws.Add(a)
	ws.Add(b)
	close(b)
	if err := ws.WatchCtx(context.Background()); err != nil {
		t.Fatalf("a closed channel did not wake the set: %v", err)
	}
	ws = NewWatchSet()
	ws.Add(a) // never closed
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := ws.WatchCtx(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an open channel: %v, want the context's deadline", err)
	}
	var none WatchSet
	none.Add(a) // a nil set collects nothing and does not panic
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := none.WatchCtx(ctx2); !errors.Is(err, context.Canceled) {
		t.Fatalf("empty set: %v, want canceled", err)
	}
}

// A node's attempts watch (what its agent's blocking assignments query
// waits on) wakes when the node's session or liveness changes, as the
// answer carries both; a heartbeat that changes neither does not wake it.
func TestNodeAttemptsWatchWakesOnSessionAndLiveness(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}
	n := h.register("n1", res, 1)
	watch := func() WatchSet {
		ws := NewWatchSet()
		if _, err := h.f.State().LiveAttemptsOnNode("n1", ws); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	fired := func(ws WatchSet, within time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return ws.WatchCtx(ctx) == nil
	}

	ws := watch()
	h.apply(MsgHeartbeat, HeartbeatRequest{NodeID: "n1", SessionGeneration: n.SessionGeneration, Now: epoch.Add(time.Second)})
	if fired(ws, 20*time.Millisecond) {
		t.Error("a heartbeat woke the node's watch")
	}
	ws = watch()
	again := h.register("n1", res, 1)
	if again.SessionGeneration == n.SessionGeneration || !fired(ws, 10*time.Second) {
		t.Errorf("a new session (%d → %d) did not wake the node's watch", n.SessionGeneration, again.SessionGeneration)
	}
	ws = watch()
	h.apply(MsgNodeLiveness, NodeLivenessRequest{NodeID: "n1", SessionGeneration: again.SessionGeneration, Liveness: string(scheduler.LivenessSuspect), Reason: "test", Now: epoch.Add(2 * time.Second)})
	if !fired(ws, 10*time.Second) {
		t.Error("a liveness verdict did not wake the node's watch")
	}
}
