package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
)

// One task of a class that succeeds everywhere fails fast on every node
// it tries: it is the suspect, no node is quarantined or has a streak or
// a blamed failure left, and its timeline says why.
func TestOneBadTaskQuarantinesNoHealthyNode(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	h := newProfileHarness(t, nodes...)
	for _, id := range nodes {
		h.run("build", id, time.Second, AttemptSucceeded)
	}
	bad := h.run("build", "a", 5*time.Millisecond, AttemptFailed)
	if got := h.node("a").History.FastStreak; got != 1 {
		t.Fatalf("a failure of a task that failed nowhere else counts: streak %d", got)
	}
	for _, id := range nodes[1:] {
		h.runTask(bad, "build", id, 5*time.Millisecond, AttemptFailed)
	}
	for _, id := range nodes {
		n := h.node(id)
		if n.Quarantine != nil || n.Tier.Demotions != 0 || n.History.FastStreak != 0 {
			t.Fatalf("node %s blamed for a bad task: %+v %+v streak %d", id, n.Quarantine, n.Tier, n.History.FastStreak)
		}
		if b, _ := n.History.BlamedRate(h.now, time.Hour); b != 0 {
			t.Fatalf("node %s has %d blamed failures", id, b)
		}
	}
	task, _ := h.f.State().Task(bad)
	if !slices.ContainsFunc(task.Timeline(), func(e TimelineEvent) bool {
		return e.Kind == EventBlame && strings.Contains(e.Message, "failed on a and on b: the task is the suspect")
	}) {
		t.Fatalf("timeline does not say the task is the suspect: %+v", task.Timeline())
	}
	// Every later task of the class still finds all five nodes.
	for _, id := range nodes {
		h.run("build", id, time.Second, AttemptSucceeded)
	}
}

// A suspected quarantine that a bad task helped begin is released when
// that task fails elsewhere and too few tasks remain.
func TestBadTaskFailingElsewhereReleasesItsQuarantine(t *testing.T) {
	h := newProfileHarness(t, "good", "x")
	h.run("build", "good", time.Second, AttemptSucceeded)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, h.run("build", "x", 5*time.Millisecond, AttemptFailed))
	}
	h.runTask(ids[2], "build", "good", time.Second, AttemptSucceeded)
	if q := h.node("x").Quarantine; q == nil || len(q.Tasks) != 3 {
		t.Fatalf("three fast failures, one of them succeeding elsewhere since: %+v", q)
	}
	h.runTask(ids[0], "build", "good", 5*time.Millisecond, AttemptFailed)
	n := h.node("x")
	if n.Quarantine != nil || !strings.HasPrefix(lastEvent(n, EventQuarantine), "released: task "+ids[0]+" failed on other nodes too") {
		t.Fatalf("quarantine kept on a bad task's evidence: %+v, %q", n.Quarantine, lastEvent(n, EventQuarantine))
	}
}

// A node that fails fast everything it is given, of classes the fleet has
// never run, is quarantined at the third task while other nodes succeed.
func TestNewClassBlackHoleIsCaught(t *testing.T) {
	h := newProfileHarness(t, "good", "hole")
	h.run("old", "good", time.Second, AttemptSucceeded)
	var ids []string
	for i := 0; i < 3; i++ {
		if q := h.node("hole").Quarantine; q != nil {
			t.Fatalf("quarantined after %d failures: %+v", i, q)
		}
		ids = append(ids, h.run(fmt.Sprintf("new%d", i), "hole", 3*time.Millisecond, AttemptFailed))
	}
	h.runTask(ids[0], "new0", "good", time.Second, AttemptSucceeded)
	q := h.node("hole").Quarantine
	if q == nil || q.Level != QuarantineSuspected || !strings.Contains(q.Reason, "3 tasks (class new0, new1, new2) failed in a row here") {
		t.Fatalf("a black hole for new classes: %+v", q)
	}
}

// Fast failures of everything before anything succeeded elsewhere make
// the node a suspect, asked for its health check; a failing check
// quarantines it before any of its tasks succeeded elsewhere.
func TestSuspectsFailingCheckQuarantinesIt(t *testing.T) {
	h := newProfileHarness(t, "good", "hole")
	for i := 0; i < 3; i++ {
		h.run(fmt.Sprintf("new%d", i), "hole", 3*time.Millisecond, AttemptFailed)
	}
	n := h.node("hole")
	if n.Quarantine != nil || n.HealthCheck.Requested != 1 {
		t.Fatalf("nothing succeeded anywhere: a suspect, asked for its check: %+v %+v", n.Quarantine, n.HealthCheck)
	}
	n = h.apply(MsgNodeHealthCheck, NodeHealthCheckRequest{NodeID: "hole", Op: HealthCheckResult, Seq: 1, Passed: false, Output: "sh: not found", Now: h.now}).(*Node)
	if n.Quarantine == nil || !n.Quarantine.CheckFailed || !strings.Contains(n.Quarantine.Reason, "health check fails") {
		t.Fatalf("a suspect's failing check quarantines it: %+v", n.Quarantine)
	}
}

// The same task failing again on one node (no other node fits it) is
// one task's evidence: it counts once toward a streak.
func TestOneTaskFailingTwiceOnOneNodeCountsOnce(t *testing.T) {
	h := newProfileHarness(t, "good", "only")
	h.run("build", "good", time.Second, AttemptSucceeded)
	id := h.run("build", "only", 5*time.Millisecond, AttemptFailed)
	h.runTask(id, "build", "only", 5*time.Millisecond, AttemptFailed)
	if n := h.node("only"); n.Quarantine != nil || n.History.FastStreak != 1 {
		t.Fatalf("one task's failures: %+v, streak %d", n.Quarantine, n.History.FastStreak)
	}
}

// A slow run that began before the node's demotion and ends after it
// does not count against the dwell: the promotion goes through.
func TestRunInFlightAtDemotionDoesNotBlockPromotion(t *testing.T) {
	h := newProfileHarness(t, "fast1", "fast2", "slow")
	for i := 0; i < 3; i++ {
		h.run("infer", "fast1", time.Second, AttemptSucceeded)
		h.run("infer", "fast2", time.Second, AttemptSucceeded)
	}
	// An attempt starts on the slow node and is still running while the
	// node is demoted.
	spec := testSpec("")
	spec.Class = "infer"
	h.apply(MsgSubmitTask, SubmitTaskRequest{ID: "inflight", SubmittedAt: h.now, Spec: spec})
	r := h.apply(MsgReserve, ReserveRequest{TaskID: "inflight", AttemptID: "inflight-1", Number: 1, NodeID: "slow", SessionGeneration: 1, Now: h.now}).(*ReserveResult)
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "inflight-1", LeaseVersion: r.Attempt.LeaseVersion, Now: h.now})
	for i := 0; i < 3; i++ {
		h.run("infer", "slow", 3*time.Second, AttemptSucceeded)
	}
	if h.node("slow").Tier.Tier != scheduler.TierL3 {
		t.Fatal("not demoted")
	}
	h.now = h.now.Add(11 * time.Minute)
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "inflight-1", LeaseVersion: r.Attempt.LeaseVersion, State: AttemptSucceeded, Now: h.now})
	h.run("infer", "slow", time.Second, AttemptSucceeded)
	if n, ok := h.apply(MsgNodeTier, NodeTierRequest{NodeID: "slow", Op: TierOpPromote, Now: h.now}).(*Node); !ok || n.Tier.Tier != scheduler.TierL2 {
		t.Fatalf("a run in flight at the demotion blocked the promotion: %v", h.apply(MsgNodeTier, NodeTierRequest{NodeID: "slow", Op: TierOpPromote, Now: h.now}))
	}
}

// Over generated histories of good work, bad tasks that fail on every
// node they try, and maybe one black hole: no healthy node is left
// quarantined or demoted, none has a blamed failure, and the black hole
// is quarantined by its third failed task, never eating a fourth.
func TestBlameFollowsTheEvidence(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		count := rapid.IntRange(3, 6).Draw(rt, "nodes")
		var nodes []string
		for i := 0; i < count; i++ {
			nodes = append(nodes, fmt.Sprintf("n%d", i))
		}
		h := newProfileHarness(t, nodes...)
		hole := ""
		if rapid.Bool().Draw(rt, "hole") {
			hole = nodes[0]
		}
		holeAte, caughtAt := 0, -1
		seq := 0
		open := func() []string {
			var out []string
			for _, id := range nodes {
				if !h.refuses(id) {
					out = append(out, id)
				}
			}
			return out
		}
		steps := rapid.IntRange(10, 60).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			seq++
			id := fmt.Sprintf("s%03d", seq)
			avail := open()
			if rapid.IntRange(0, 3).Draw(rt, "kind") == 0 {
				// A bad task: it fails fast on 2..4 distinct nodes.
				k := rapid.IntRange(2, 4).Draw(rt, "k")
				if len(avail) < k {
					continue
				}
				for _, i := range rapid.Permutation(avail).Draw(rt, "order")[:k] {
					if !h.tryTask(id, "work", i, 5*time.Millisecond, AttemptFailed) {
						rt.Fatalf("reserve on %s refused", i)
					}
				}
				continue
			}
			class := rapid.SampledFrom([]string{"work", "other", fmt.Sprintf("new%d", seq)}).Draw(rt, "class")
			if len(avail) == 0 {
				continue
			}
			on := rapid.SampledFrom(avail).Draw(rt, "node")
			if on != hole {
				h.tryTask(id, class, on, time.Second, AttemptSucceeded)
				continue
			}
			if !h.tryTask(id, class, on, 5*time.Millisecond, AttemptFailed) {
				continue // it takes no work now (awaiting its health check)
			}
			holeAte++
			var healthy []string
			for _, i := range open() {
				if i != hole {
					healthy = append(healthy, i)
				}
			}
			h.tryTask(id, class, rapid.SampledFrom(healthy).Draw(rt, "retry"), time.Second, AttemptSucceeded)
			if caughtAt < 0 && h.node(hole).Quarantine != nil {
				caughtAt = holeAte
			}
		}
		for _, id := range nodes {
			n := h.node(id)
			if id == hole {
				if holeAte >= h.f.State().ProfileSettings().BlackHoleFailures && n.Quarantine == nil {
					rt.Fatalf("black hole %s ate %d tasks and is not quarantined", id, holeAte)
				}
				if holeAte > h.f.State().ProfileSettings().BlackHoleFailures {
					rt.Fatalf("black hole %s ate %d tasks (caught at %d)", id, holeAte, caughtAt)
				}
				continue
			}
			if n.Quarantine != nil || n.Tier.Demotions != 0 || h.refuses(id) {
				rt.Fatalf("healthy node %s judged: %+v %+v, probation %v", id, n.Quarantine, n.Tier, n.probation())
			}
			if b, _ := n.History.BlamedRate(h.now, 24*time.Hour); b != 0 {
				rt.Fatalf("healthy node %s has %d blamed failures", id, b)
			}
		}
	})
}
