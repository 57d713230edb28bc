package test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd/agent"
	"herd/api"
	"herd/config"
)

// The replicas' wall clock steps forward by 10 minutes and back again (an
// operator or NTP setting it) while agents run and a task waits reserved
// on an agent that cannot start it: nothing follows the step. No node is
// suspected or declared down, the reserved attempt is not reclaimed
// early, retention forgets nothing early; after the step back, a cut-off
// agent is still declared DOWN on time and the reserved attempt is
// reclaimed on time.
func TestClockStepsChangeNothing(t *testing.T) {
	var offset atomic.Int64
	wall := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	timeouts := func(c *config.Server) {
		c.Scheduler.ScheduleToStartTimeout = 20 * time.Second
		c.Scheduler.TaskRetention = 30 * time.Second
	}
	setup := gossipSetup(timeouts)
	setup.Clock, setup.ClockSteps = wall, true
	c := NewClusterWith(t, 3, setup)
	started := time.Now()
	worker, ft := faultyAgent(c, agent.Config{ID: "worker", Labels: map[string]string{"role": "worker"}, Slots: 2}, 11)
	blind := c.StartAgent(agent.Config{ID: "blind", Labels: map[string]string{"role": "blind"}, Slots: 1})
	WaitRegistered(t, worker, blind)
	cl := c.AllClient()
	ctx := Ctx(t, 3*time.Minute)
	lv := c.Replicas[0].Cfg.Liveness
	// The leader judges reservations only once it has led for the
	// schedule-to-start timeout.
	time.Sleep(time.Until(started.Add(21 * time.Second)))

	finished := shSpec("finished", "true")
	finished.RequiredLabels = map[string]string{"role": "worker"}
	finishedID := submit(t, cl, finished)
	waitTaskState(t, cl, finishedID, api.TaskSucceeded)
	blind.Transport.Cut() // it gossips on, but never sees its assignments
	reserved := shSpec("reserved", "true")
	reserved.RequiredLabels = map[string]string{"role": "blind"}
	reservedID := submit(t, cl, reserved)
	waitTaskState(t, cl, reservedID, api.TaskScheduled)
	reservedAt := time.Now()
	events := func() int { return len(node(t, cl, "worker").Events) + len(node(t, cl, "blind").Events) }
	before := events()

	offset.Store(int64(10 * time.Minute))
	// Longer than a retention pass (a quarter of the retention) and many
	// liveness and reclaim checks.
	for deadline := time.Now().Add(9 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		task, _, err := cl.GetTask(ctx, reservedID, api.ReadOptions{Consistent: true})
		if err != nil || task.State != api.TaskScheduled {
			t.Fatalf("after the step forward the reserved task is %s (%v): reclaimed early", task.State, err)
		}
		if _, _, err := cl.GetTask(ctx, finishedID, api.ReadOptions{Consistent: true}); err != nil {
			t.Fatalf("after the step forward the finished task is gone (%v): forgotten early", err)
		}
		for _, id := range []string{"worker", "blind"} {
			if n := node(t, cl, id); n.Liveness != api.LivenessReady {
				t.Fatalf("after the step forward %s is %s: %+v", id, n.Liveness, n.Events)
			}
		}
	}
	if after := events(); after != before {
		t.Fatalf("the step forward added %d node events", after-before)
	}

	offset.Store(0) // ten minutes back
	cut := time.Now()
	ft.Cut(true)
	worker.Transport.Cut()
	if !Eventually(3*downBound(lv, 0), func() bool { return node(t, cl, "worker").Liveness == api.LivenessDown }) {
		t.Fatal("after the step back a cut-off agent is never declared DOWN")
	}
	if took, bound := time.Since(cut), downBound(lv, time.Second); took > bound {
		t.Errorf("after the step back DOWN took %v, more than the bound %v", took, bound)
	}
	// Reclaimed on time: its schedule-to-start timeout is 20 s.
	if !Eventually(time.Until(reservedAt.Add(45*time.Second)), func() bool {
		task, _, err := cl.GetTask(ctx, reservedID, api.ReadOptions{Consistent: true})
		return err == nil && len(task.Attempts) > 0 && task.Attempts[0].State == api.AttemptLost &&
			slices.ContainsFunc(task.Timeline, func(e api.TimelineEvent) bool { return strings.Contains(e.Message, "not started within") })
	}) {
		task, _, _ := cl.GetTask(context.Background(), reservedID, api.ReadOptions{Consistent: true})
		t.Fatalf("after the step back the never-started attempt was not reclaimed in time: %+v", task.Attempts)
	}
}

// Two agents whose clocks are off by an hour, one ahead and one behind,
// are treated as any other: the cluster takes no time from an agent (the
// leader stamps every event), so neither is suspected over many heartbeat
// intervals, a task's run timeout is not cut short, the stamps on their
// attempts are the leader's, retention keeps a finished task, and once one
// is cut off it is declared DOWN on time.
func TestAgentClocksOffByAnHour(t *testing.T) {
	setup := gossipSetup(func(c *config.Server) { c.Scheduler.TaskRetention = time.Minute })
	c := NewClusterWith(t, 3, setup)
	lv := c.Replicas[0].Cfg.Liveness
	offBy := map[string]time.Duration{"ahead": time.Hour, "behind": -time.Hour}
	handles := map[string]*AgentHandle{}
	var ahead *FaultTransport
	for _, id := range []string{"ahead", "behind"} {
		skew := offBy[id]
		h, ft := faultyAgent(c, agent.Config{ID: id, Slots: 2, Labels: map[string]string{"clock": id},
			Clock: func() time.Time { return time.Now().Add(skew) }}, 5)
		handles[id] = h
		if id == "ahead" {
			ahead = ft
		}
	}
	WaitRegistered(t, handles["ahead"], handles["behind"])
	cl := c.AllClient()
	ctx := Ctx(t, 3*time.Minute)
	if !Eventually(30*time.Second, func() bool {
		return node(t, cl, "ahead").Liveness == api.LivenessReady && node(t, cl, "behind").Liveness == api.LivenessReady
	}) {
		t.Fatal("the agents never became READY")
	}
	events := func(id string) int { return len(node(t, cl, id).Events) }
	before := map[string]int{"ahead": events("ahead"), "behind": events("behind")}

	began := time.Now()
	var finished, slow []string
	for _, id := range []string{"ahead", "behind"} {
		ok := shSpec("ok-"+id, "true")
		ok.RequiredLabels = map[string]string{"clock": id}
		finished = append(finished, submit(t, cl, ok))
		s := shSpec("slow-"+id, "sleep 30")
		s.RequiredLabels = map[string]string{"clock": id}
		s.TimeoutSeconds, s.MaxAttempts = ptrTo(int64(3)), ptrTo(1)
		slow = append(slow, submit(t, cl, s))
	}
	for _, id := range finished {
		task := waitTaskState(t, cl, id, api.TaskSucceeded)
		a := task.Attempts[0]
		// The leader's stamps: within the test's own span, not an hour off.
		for _, at := range []time.Time{a.ReservedAt, a.StartedAt, a.FinishedAt} {
			if at.Before(began.Add(-5*time.Second)) || at.After(time.Now().Add(5*time.Second)) {
				t.Fatalf("attempt %s on %s is stamped %v, outside the test's span from %v", a.ID, a.NodeID, at, began)
			}
		}
	}
	for _, id := range slow {
		task := waitTaskState(t, cl, id, api.TaskTimedOut)
		a := task.Attempts[0]
		if ran := a.FinishedAt.Sub(a.StartedAt); ran < 3*time.Second {
			t.Fatalf("attempt %s on %s timed out after %v, before its 3 s run timeout", a.ID, a.NodeID, ran)
		}
	}
	// Many heartbeat intervals: both stay READY with no new node events,
	// and the finished tasks are kept (retention is a minute).
	for deadline := time.Now().Add(20 * lv.HeartbeatInterval); time.Now().Before(deadline); time.Sleep(lv.HeartbeatInterval / 2) {
		for _, id := range []string{"ahead", "behind"} {
			if n := node(t, cl, id); n.Liveness != api.LivenessReady {
				t.Fatalf("%s, whose clock is an hour off, is %s: %+v", id, n.Liveness, n.Events)
			}
		}
		for _, id := range finished {
			if _, _, err := cl.GetTask(ctx, id, api.ReadOptions{Consistent: true}); err != nil {
				t.Fatalf("finished task %s forgotten early: %v", id, err)
			}
		}
	}
	for id, n := range before {
		if got := events(id); got != n {
			t.Fatalf("%s gained %d node events while it ran true", id, got-n)
		}
	}

	cut := time.Now()
	ahead.Cut(true)
	handles["ahead"].Transport.Cut()
	if !Eventually(3*downBound(lv, 0), func() bool { return node(t, cl, "ahead").Liveness == api.LivenessDown }) {
		t.Fatal("the cut-off agent whose clock is ahead is never declared DOWN")
	}
	if took, bound := time.Since(cut), downBound(lv, time.Second); took > bound {
		t.Errorf("DOWN took %v, more than the bound %v", took, bound)
	}
}
