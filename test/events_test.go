package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
)

// readAll reads replica i's whole event stream as it stands.
func readAll(t *testing.T, cl *api.Client, q api.EventQuery) []api.Event {
	t.Helper()
	var out []api.Event
	err := cl.Events(Ctx(t, time.Minute), q, false, func(l api.EventLine) error {
		if l.Lost != nil {
			return fmt.Errorf("events lost: %s", l.Message)
		}
		out = append(out, l.Event)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func samePositions(t *testing.T, what string, got, want []api.Event) {
	t.Helper()
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			t.Fatalf("%s: %d events, want %d; first missing %+v", what, len(got), len(want), want[i])
		case i >= len(want):
			t.Fatalf("%s: %d events, want %d; first extra %+v", what, len(got), len(want), got[i])
		case got[i] != want[i]:
			t.Fatalf("%s: event %d is %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// The event stream read from one replica, cut off, and resumed from the
// last position seen on another replica, is exactly the stream: every
// event once, in order. A client following with every address carries on
// by itself when the replica it reads from stops.
func TestEventStreamResumesWithoutLossOrRepeats(t *testing.T) {
	c := NewClusterWith(t, 3, gossipSetup())
	a := c.StartAgent(agent.Config{ID: "edge-1", Slots: 4})
	WaitRegistered(t, a)
	cl := c.AllClient()
	var ids []string
	for i := range 8 {
		ids = append(ids, submit(t, cl, shSpec(fmt.Sprintf("e%d", i), "true")))
	}
	for _, id := range ids {
		waitTaskState(t, cl, id, api.TaskSucceeded)
	}

	// Follow on replica 0, and hang up after some events.
	var first []api.Event
	ctx, cancel := context.WithCancel(Ctx(t, time.Minute))
	err := c.Client(0).Events(ctx, api.EventQuery{}, true, func(l api.EventLine) error {
		if l.Lost != nil {
			t.Errorf("replica 0 lost events: %s", l.Message)
		}
		first = append(first, l.Event)
		if len(first) == 17 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(first) != 17 {
		t.Fatalf("the first read ended with %v after %d events", err, len(first))
	}
	// More happens meanwhile.
	for i := range 4 {
		spec := shSpec(fmt.Sprintf("f%d", i), "exit 3")
		spec.MaxAttempts = ptrTo(1)
		ids = append(ids, submit(t, cl, spec))
	}
	for _, id := range ids[8:] {
		waitTaskState(t, cl, id, api.TaskFailed)
	}
	if _, err := cl.DrainNode(Ctx(t, time.Minute), "edge-1", true); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(c.Server(c.WaitForLeader()).FSM().Index())

	// Resume on replica 1 from just past the last event seen.
	resumed := readAll(t, c.Client(1), api.EventQuery{From: first[len(first)-1].Position().After()})
	whole := readAll(t, c.Client(2), api.EventQuery{})
	samePositions(t, "read in two parts on two replicas", append(append([]api.Event(nil), first...), resumed...), whole)
	states := map[string]string{}
	for _, ev := range whole {
		states[ev.Topic+"/"+ev.Key] = ev.State
	}
	for i, id := range ids {
		want := api.TaskSucceeded
		if i >= 8 {
			want = api.TaskFailed
		}
		if states["task/"+id] != want {
			t.Fatalf("the stream's last state of %s is %q, want %s", id, states["task/"+id], want)
		}
	}
	if states["node/edge-1"] == "" {
		t.Fatal("the stream has no event of node edge-1")
	}
	// A topic filter keeps the order and selects alike.
	var drained bool
	for _, ev := range readAll(t, c.Client(0), api.EventQuery{Topics: []api.EventTopicFilter{{Topic: "node", Key: "edge-1"}}}) {
		if ev.Topic != "node" || ev.Key != "edge-1" {
			t.Fatalf("a node:edge-1 read gave %+v", ev)
		}
		drained = drained || ev.Kind == "management"
	}
	if !drained {
		t.Fatal("the drain is not in edge-1's events")
	}

	// Follow with every address; stop the replica being read.
	var mu sync.Mutex
	var followed []api.Event
	fctx, fcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	all := c.AllClient()
	all.RetryWait = 50 * time.Millisecond
	go func() {
		done <- all.Events(fctx, api.EventQuery{}, true, func(l api.EventLine) error {
			if l.Lost != nil {
				return fmt.Errorf("events lost: %s", l.Message)
			}
			mu.Lock()
			followed = append(followed, l.Event)
			mu.Unlock()
			return nil
		})
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(followed) }
	// The cluster goes on making events (its node's liveness, profile
	// reports): the follower reads at least what was read whole, and
	// begins with exactly that.
	if !Eventually(30*time.Second, func() bool { return count() >= len(whole) }) {
		t.Fatalf("the follower read %d of %d events", count(), len(whole))
	}
	mu.Lock()
	samePositions(t, "followed from the start", followed[:len(whole)], whole)
	mu.Unlock()
	c.Stop(0) // the client starts with the first address
	if _, err := cl.DrainNode(Ctx(t, time.Minute), "edge-1", false); err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(c.Server(c.WaitForLeader()).FSM().Index())
	want := readAll(t, c.Client(1), api.EventQuery{})
	if !Eventually(30*time.Second, func() bool { return count() >= len(want) }) {
		t.Fatalf("after the stop the follower read %d of %d events", count(), len(want))
	}
	fcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the follower ended with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	samePositions(t, "followed across a replica's stop", followed[:len(want)], want)
	for i := 1; i < len(followed); i++ {
		if !followed[i-1].Position().Before(followed[i].Position()) {
			t.Fatalf("followed across a replica's stop: event %d (%+v) does not come after %+v", i, followed[i], followed[i-1])
		}
	}
}
