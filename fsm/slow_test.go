package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

// An attempt running far past its class's fleet median is marked slow
// once its time passes both 5× the median and the floor: the task's
// timeline and the node's events say so, its time counts as a run of the
// node, and three such attempts demote the node while they still run.
func TestHungAttemptIsMarkedSlowAndCountsTowardDemotion(t *testing.T) {
	h := newProfileHarness(t, "fast1", "fast2", "hung")
	for i := 0; i < 3; i++ {
		h.run("etl", "fast1", time.Second, AttemptSucceeded)
		h.run("etl", "fast2", time.Second, AttemptSucceeded)
	}
	if d, ok := h.f.State().SlowThreshold("etl", "hung"); !ok || d != 10*time.Second {
		t.Fatalf("threshold %s %v, want the 10 s floor over 5× 1 s", d, ok)
	}
	start := func(id string) string {
		spec := testSpec("")
		spec.Class = "etl"
		h.apply(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: spec})
		r := h.apply(MsgReserve, ReserveRequest{TaskID: id, AttemptID: id + "-1", Number: 1, NodeID: "hung", SessionGeneration: 1, Now: h.now}).(*ReserveResult)
		h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: id + "-1", LeaseVersion: r.Attempt.LeaseVersion, Now: h.now})
		return id + "-1"
	}
	var running []string
	for i := 0; i < 3; i++ {
		running = append(running, start(fmt.Sprintf("h%d", i)))
	}
	h.now = h.now.Add(9 * time.Second)
	if res := h.apply(MsgAttemptSlow, AttemptSlowRequest{AttemptID: running[0], Now: h.now}); !isRejection(res, RejectConflict) {
		t.Fatalf("9 s is under the floor: %v", res)
	}
	h.now = h.now.Add(2 * time.Second)
	for i, id := range running {
		if _, ok := h.apply(MsgAttemptSlow, AttemptSlowRequest{AttemptID: id, Now: h.now}).(*AttemptResult); !ok {
			t.Fatalf("mark %s slow refused", id)
		}
		if i == 0 {
			if res := h.apply(MsgAttemptSlow, AttemptSlowRequest{AttemptID: id, Now: h.now}); !isRejection(res, RejectConflict) {
				t.Fatalf("marked twice: %v", res)
			}
		}
	}
	task, _ := h.f.State().Task("h0")
	if !task.CurrentSlow() || !slices.ContainsFunc(task.Timeline(), func(e TimelineEvent) bool {
		return e.Kind == EventSlow && strings.Contains(e.Message, "attempt 1 on hung has run 11s, over 5.0× the fleet median of class etl (1s)")
	}) {
		t.Fatalf("timeline: %+v", task.Timeline())
	}
	n := h.node("hung")
	if lastEvent(n, EventSlow) == "" || n.Tier.Tier != scheduler.TierL3 {
		t.Fatalf("three hung attempts: tier %+v, slow event %q", n.Tier, lastEvent(n, EventSlow))
	}
	// They end (timed out): their time is not counted a second time, and
	// the node's recent runs stay empty after the demotion.
	for _, id := range running {
		a, _ := h.f.State().Attempt(id)
		h.now = h.now.Add(time.Second)
		h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: id, LeaseVersion: a.LeaseVersion, State: AttemptTimedOut, Now: h.now, RetryAt: h.now})
	}
	for _, c := range h.node("hung").History.Classes {
		if len(c.Recent) != 0 {
			t.Fatalf("runs before the demotion still count: %+v", c)
		}
	}
}
