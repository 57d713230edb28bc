package fsm

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
)

// profileHarness runs attempts of classed tasks on nodes, at times it
// chooses, through the FSM's commands.
type profileHarness struct {
	*harness
	n   int
	now time.Time
}

func newProfileHarness(t testing.TB, nodes ...string) *profileHarness {
	h := &profileHarness{harness: newHarness(t), now: epoch}
	for _, id := range nodes {
		h.register(id, scheduler.Resources{CPUMillis: 2000, MemoryMB: 4096}, 4)
	}
	return h
}

// run submits a task of class and runs one attempt of it on node, taking
// d, ending as state; it returns the task id.
func (h *profileHarness) run(class, node string, d time.Duration, state AttemptState) string {
	h.t.Helper()
	h.n++
	id := fmt.Sprintf("t%03d", h.n)
	h.runTask(id, class, node, d, state)
	return id
}

// runTask runs the next attempt of task id (submitting it first if new).
func (h *profileHarness) runTask(id, class, node string, d time.Duration, state AttemptState) {
	h.t.Helper()
	if !h.tryTask(id, class, node, d, state) {
		h.t.Fatalf("reserve %s on %s refused", id, node)
	}
}

// tryTask is runTask that reports false, having done nothing, when the
// node refuses the reservation (it is quarantined, say).
func (h *profileHarness) tryTask(id, class, node string, d time.Duration, state AttemptState) bool {
	h.t.Helper()
	st := h.f.State()
	task, err := st.Task(id)
	if err != nil {
		spec := testSpec("")
		spec.Class = class
		spec.MaxAttempts = 10
		if _, ok := h.apply(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: spec}).(*SubmitResult); !ok {
			h.t.Fatalf("submit %s failed", id)
		}
		task, _ = h.f.State().Task(id)
	}
	n, err := h.f.State().Node(node)
	if err != nil {
		h.t.Fatal(err)
	}
	number := int(task.Attempts) + 1
	attempt := fmt.Sprintf("%s-%d", id, number)
	h.now = h.now.Add(time.Second)
	if task.NotBefore().After(StampOf(h.now)) {
		h.now = task.NotBefore().Time()
	}
	res := h.apply(MsgReserve, ReserveRequest{TaskID: id, AttemptID: attempt, Number: number, NodeID: node, SessionGeneration: n.SessionGeneration, Now: h.now})
	r, ok := res.(*ReserveResult)
	if !ok {
		return false
	}
	if out := h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: attempt, LeaseVersion: r.Attempt.LeaseVersion, Now: h.now}); out == nil {
		h.t.Fatal("start")
	}
	h.now = h.now.Add(d)
	if _, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: attempt, LeaseVersion: r.Attempt.LeaseVersion, State: state, ExitCode: 1, Now: h.now, RetryAt: h.now}).(*AttemptResult); !ok {
		h.t.Fatalf("end %s", attempt)
	}
	return true
}

// refuses reports whether node takes no new work now: quarantined, or
// awaiting a health check after fast failures.
func (h *profileHarness) refuses(node string) bool {
	n := h.node(node)
	return n.Quarantine != nil || slices.Equal(n.probation(), awaitingCheck)
}

func (h *profileHarness) node(id string) *Node {
	h.t.Helper()
	n, err := h.f.State().Node(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func lastEvent(n *Node, kind EventKind) string {
	for i := len(n.Events) - 1; i >= 0; i-- {
		if n.Events[i].Kind == kind {
			return n.Events[i].Message
		}
	}
	return ""
}

// A node three times slower than the fleet at a class is demoted once 3
// of its last 5 runs of it are over 2.5× the fleet median, with the
// reason as a node event; a promotion is refused before the dwell time
// and granted after it, once it ran at normal speed.
func TestSlowNodeIsDemotedAndPromotedAfterDwell(t *testing.T) {
	h := newProfileHarness(t, "fast1", "fast2", "slow")
	if tier := h.node("slow").Tier; tier.Tier != scheduler.TierL2 || tier.Base != scheduler.TierL2 {
		t.Fatalf("2 cores and 4 GiB should be L2: %+v", tier)
	}
	for i := 0; i < 3; i++ {
		h.run("infer", "fast1", time.Second, AttemptSucceeded)
		h.run("infer", "fast2", time.Second, AttemptSucceeded)
	}
	runs := 0
	for h.node("slow").Tier.Tier == scheduler.TierL2 {
		if runs == 5 {
			t.Fatal("not demoted within 5 runs")
		}
		h.run("infer", "slow", 3*time.Second, AttemptSucceeded)
		runs++
	}
	n := h.node("slow")
	if n.Tier.Tier != scheduler.TierL3 || runs != 3 {
		t.Fatalf("tier %+v after %d runs", n.Tier, runs)
	}
	want := "L2 → L3: 3 of the last 3 runs of class infer took over 2.5× the fleet median (1000 ms)"
	if got := lastEvent(n, EventTier); got != want {
		t.Fatalf("tier event %q, want %q", got, want)
	}
	promote := func() any {
		return h.apply(MsgNodeTier, NodeTierRequest{NodeID: "slow", Op: TierOpPromote, Now: h.now})
	}
	var rej *Rejection
	if err, ok := promote().(error); !ok || !errors.As(err, &rej) || !strings.Contains(rej.Error(), "dwell") {
		t.Fatalf("a promotion before the dwell time: %v", err)
	}
	h.now = h.now.Add(10 * time.Minute)
	h.run("infer", "slow", time.Second, AttemptSucceeded)
	if n, ok := promote().(*Node); !ok || n.Tier.Tier != scheduler.TierL2 || !strings.HasPrefix(lastEvent(n, EventTier), "L3 → L2: healthy for 10m0s") {
		t.Fatalf("promotion after the dwell: %#v", n)
	}
}

// A slow run since the demotion keeps the node down (hysteresis).
func TestSlowRunSinceDemotionRefusesPromotion(t *testing.T) {
	h := newProfileHarness(t, "fast1", "fast2", "slow")
	for i := 0; i < 3; i++ {
		h.run("infer", "fast1", time.Second, AttemptSucceeded)
		h.run("infer", "fast2", time.Second, AttemptSucceeded)
	}
	for i := 0; i < 3; i++ {
		h.run("infer", "slow", 3*time.Second, AttemptSucceeded)
	}
	h.now = h.now.Add(11 * time.Minute)
	h.run("infer", "slow", 2*time.Second, AttemptSucceeded) // 2× is under 2.5× but over 1.5×
	res := h.apply(MsgNodeTier, NodeTierRequest{NodeID: "slow", Op: TierOpPromote, Now: h.now})
	if err, ok := res.(error); !ok || !strings.Contains(err.Error(), "over 1.5×") {
		t.Fatalf("promotion with a run at 2× since the demotion: %v", res)
	}
}

// The black hole: a node whose attempts of a class fail fast while the
// class succeeds elsewhere is quarantined at the third failure, takes no
// reservation, is confirmed once those tasks succeed elsewhere, and is
// released by a passing health check after a failing one.
func TestBlackHoleIsQuarantinedConfirmedAndReleased(t *testing.T) {
	h := newProfileHarness(t, "good", "bad")
	h.run("build", "good", time.Second, AttemptSucceeded)
	var failed []string
	for i := 0; i < 3; i++ {
		if h.node("bad").Quarantine != nil {
			t.Fatalf("quarantined after %d failures", i)
		}
		failed = append(failed, h.run("build", "bad", 10*time.Millisecond, AttemptFailed))
	}
	n := h.node("bad")
	if n.Quarantine != nil || n.HealthCheck.Requested != 1 || !h.refuses("bad") {
		t.Fatalf("after 3 fast failures, a suspect awaiting its check: %+v %+v", n.Quarantine, n.HealthCheck)
	}
	h.runTask(failed[2], "build", "good", time.Second, AttemptSucceeded)
	n = h.node("bad")
	if n.Quarantine == nil || n.Quarantine.Level != QuarantineSuspected || n.Quarantine.Confirmed != 1 {
		t.Fatalf("a failed task succeeding elsewhere quarantines: %+v", n.Quarantine)
	}
	if !strings.Contains(n.Quarantine.Reason, "3 tasks of class build failed in a row here") {
		t.Fatalf("reason %q", n.Quarantine.Reason)
	}
	spec := testSpec("")
	h.apply(MsgSubmitTask, SubmitTaskRequest{ID: "other", SubmittedAt: h.now, Spec: spec})
	res := h.apply(MsgReserve, ReserveRequest{TaskID: "other", AttemptID: "o1", Number: 1, NodeID: "bad", SessionGeneration: 1, Now: h.now})
	var rej *Rejection
	if err, ok := res.(error); !ok || !errors.As(err, &rej) || rej.Code != string(scheduler.ReasonQuarantined) {
		t.Fatalf("a reservation on a quarantined node: %v", res)
	}
	h.runTask(failed[0], "build", "good", time.Second, AttemptSucceeded)
	if n := h.node("bad"); n.Quarantine.Level != QuarantineConfirmed || n.Quarantine.Confirmed != 2 {
		t.Fatalf("two of three succeeding elsewhere confirm: %+v", n.Quarantine)
	}
	seq := h.node("bad").HealthCheck.Requested
	check := func(seq uint64, passed bool) *Node {
		t.Helper()
		n, ok := h.apply(MsgNodeHealthCheck, NodeHealthCheckRequest{NodeID: "bad", Op: HealthCheckResult, Seq: seq, Passed: passed, Output: "tool missing", Now: h.now}).(*Node)
		if !ok {
			t.Fatalf("health check %d refused", seq)
		}
		return n
	}
	if n := check(seq, false); n.Quarantine == nil || !n.Quarantine.CheckFailed {
		t.Fatalf("a failed check keeps it: %+v", n.Quarantine)
	}
	if res := h.apply(MsgNodeHealthCheck, NodeHealthCheckRequest{NodeID: "bad", Op: HealthCheckResult, Seq: seq, Passed: true, Now: h.now}); !isRejection(res, RejectStale) {
		t.Fatalf("an answer to a check already answered: %v", res)
	}
	h.apply(MsgNodeHealthCheck, NodeHealthCheckRequest{NodeID: "bad", Op: HealthCheckRequest, Why: "recheck", Now: h.now})
	if n := check(seq+1, true); n.Quarantine != nil || !strings.HasPrefix(lastEvent(n, EventQuarantine), "released: the health check passes again") {
		t.Fatalf("a passing check after a failing one releases: %+v", n.Quarantine)
	}
}

func isRejection(res any, code string) bool {
	var rej *Rejection
	err, ok := res.(error)
	return ok && errors.As(err, &rej) && rej.Code == code
}

// A bad task is not a bad node: work that fails everywhere quarantines
// and demotes nobody.
func TestBadTaskQuarantinesNobody(t *testing.T) {
	h := newProfileHarness(t, "a", "b", "c")
	for i := 0; i < 4; i++ {
		id := h.run("broken", "a", 5*time.Millisecond, AttemptFailed)
		h.runTask(id, "broken", "b", 5*time.Millisecond, AttemptFailed)
		h.runTask(id, "broken", "c", 5*time.Millisecond, AttemptFailed)
	}
	for _, id := range []string{"a", "b", "c"} {
		n := h.node(id)
		if n.Quarantine != nil || n.Tier.Demotions != 0 {
			t.Fatalf("node %s punished for bad work: %+v %+v", id, n.Quarantine, n.Tier)
		}
	}
}

// Fast failures of tasks none of which succeeded elsewhere yet make the
// node a suspect: it is asked for its health check and takes no work
// until it answers; a success of another task does not quarantine it,
// the first success elsewhere of one of its failed tasks does.
func TestFirstSuccessElsewhereQuarantinesSuspect(t *testing.T) {
	h := newProfileHarness(t, "good", "bad")
	var failed []string
	for i := 0; i < 3; i++ {
		failed = append(failed, h.run("build", "bad", 10*time.Millisecond, AttemptFailed))
	}
	if n := h.node("bad"); n.Quarantine != nil || n.HealthCheck.Requested != 1 || !h.refuses("bad") {
		t.Fatalf("a suspect: quarantine %+v, check %+v, probation %v", n.Quarantine, n.HealthCheck, n.probation())
	}
	h.run("build", "good", time.Second, AttemptSucceeded)
	if q := h.node("bad").Quarantine; q != nil {
		t.Fatalf("another task's success is no evidence against the suspect: %+v", q)
	}
	h.runTask(failed[0], "build", "good", time.Second, AttemptSucceeded)
	if q := h.node("bad").Quarantine; q == nil || q.Level != QuarantineSuspected || q.Confirmed != 1 {
		t.Fatalf("the first of its tasks to succeed elsewhere should quarantine the suspect: %+v", q)
	}
}

// A failure rate over half, within the window, of tasks that then succeed
// elsewhere demotes a half-dead node and asks for its health check; the
// failures count once their tasks succeeded on another node, not before.
func TestFailureRateDemotes(t *testing.T) {
	h := newProfileHarness(t, "good", "flaky")
	for i := 0; i < 4; i++ {
		h.run("clean", "good", time.Second, AttemptSucceeded)
		// Slow failures (timeouts), so no black-hole streak.
		id := h.run("clean", "flaky", 40*time.Second, AttemptTimedOut)
		if i == 3 {
			if n := h.node("flaky"); n.Tier.Demotions != 0 {
				t.Fatalf("demoted before the failed task succeeded elsewhere: %+v", n.Tier)
			}
		}
		h.runTask(id, "clean", "good", time.Second, AttemptSucceeded)
	}
	n := h.node("flaky")
	if n.Tier.Tier != scheduler.TierL3 || !strings.Contains(lastEvent(n, EventTier), "failed at work that then succeeded elsewhere") || n.HealthCheck.Requested == 0 {
		t.Fatalf("tier %+v, event %q, check %+v", n.Tier, lastEvent(n, EventTier), n.HealthCheck)
	}
}

// An operator's pin holds against history, and auto lets it go.
func TestTierPin(t *testing.T) {
	h := newProfileHarness(t, "n1")
	n, ok := h.apply(MsgNodeTier, NodeTierRequest{NodeID: "n1", Op: TierOpPin, Tier: scheduler.TierL1, Now: h.now}).(*Node)
	if !ok || n.Tier.Tier != scheduler.TierL1 || n.Tier.Pin != scheduler.TierL1 {
		t.Fatalf("pinned: %+v", n)
	}
	n = h.apply(MsgNodeTier, NodeTierRequest{NodeID: "n1", Op: TierOpAuto, Now: h.now}).(*Node)
	if n.Tier.Tier != scheduler.TierL2 || n.Tier.Pin != scheduler.TierUnknown {
		t.Fatalf("unpinned: %+v", n.Tier)
	}
	if res := h.apply(MsgNodeTier, NodeTierRequest{NodeID: "n1", Op: TierOpPin, Tier: 7, Now: h.now}); !isRejection(res, RejectInvalid) {
		t.Fatalf("a pin to no tier: %v", res)
	}
}

// A measured profile moves the base tier; committed settings move every
// node's.
func TestProfileAndSettingsSetTheBaseTier(t *testing.T) {
	h := newProfileHarness(t, "n1")
	n, ok := h.apply(MsgNodeProfile, NodeProfileRequest{NodeID: "n1", SessionGeneration: 1, Now: h.now,
		Profile: NodeProfile{CPUScore: 400, Cores: 6, MemoryMB: 16384, Benchmarked: true}}).(*Node)
	if !ok || n.Tier.Tier != scheduler.TierL1 || n.Profile.MeasuredAt != StampOf(h.now) || lastEvent(n, EventTier) != "L2 → L1: profile measured" {
		t.Fatalf("after a 6-core profile: %+v %q", n.Tier, lastEvent(n, EventTier))
	}
	ps := DefaultProfileSettings()
	ps.L1MinCores = 8
	h.apply(MsgProfileSettings, ProfileSettingsRequest{Settings: ps, Now: h.now})
	if n := h.node("n1"); n.Tier.Tier != scheduler.TierL2 {
		t.Fatalf("with L1 from 8 cores: %+v", n.Tier)
	}
	ps.SlowRuns = 9
	if res := h.apply(MsgProfileSettings, ProfileSettingsRequest{Settings: ps, Now: h.now}); !isRejection(res, RejectInvalid) {
		t.Fatalf("slow runs over the window: %v", res)
	}
}

// Replicas applying the same entries derive the same profiles, tiers,
// quarantines and history: a random sequence of runs applied on two FSMs
// (one restored from a snapshot half way) ends in the same state.
func TestProfileDerivationIsDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		nodes := []string{"n1", "n2", "n3"}
		a, b := newProfileHarness(t, nodes...), newProfileHarness(t, nodes...)
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			class := rapid.SampledFrom([]string{"infer", "clean"}).Draw(rt, "class")
			node := rapid.SampledFrom(nodes).Draw(rt, "node")
			d := time.Duration(rapid.IntRange(1, 5000).Draw(rt, "ms")) * time.Millisecond
			state := rapid.SampledFrom([]AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut}).Draw(rt, "state")
			if a.refuses(node) {
				continue
			}
			a.run(class, node, d, state)
			b.run(class, node, d, state)
			if i == steps/2 {
				var buf strings.Builder
				if err := b.f.State().Dump(&buf); err != nil {
					rt.Fatal(err)
				}
				f := New(nil)
				if err := f.Restore(io.NopCloser(strings.NewReader(buf.String()))); err != nil {
					rt.Fatal(err)
				}
				b.f = f
			}
		}
		ha, _ := a.f.State().Hash()
		hb, _ := b.f.State().Hash()
		if ha != hb {
			rt.Fatalf("replicas differ after the same %d steps", steps)
		}
		for _, id := range nodes {
			va, vb := a.node(id).View(), b.node(id).View()
			if fmt.Sprint(va) != fmt.Sprint(vb) {
				rt.Fatalf("node %s views differ: %v vs %v", id, va, vb)
			}
		}
	})
}

// TestOutcomesKeepTheWindowAndTheBound checks the node history's results
// list: results older than the window leave it, the newest
// maxOutcomesKept stay in order, and a copy taken before an addition
// keeps what it had (histories are shared by the state's views).
func TestOutcomesKeepTheWindowAndTheBound(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := &NodeHistory{}
	for i := range 3 * maxOutcomesKept {
		h.addOutcome(Outcome{At: StampOf(start.Add(time.Duration(i) * time.Second)), Class: "c", OK: i%2 == 0}, time.Hour)
	}
	if len(h.Outcomes) != maxOutcomesKept {
		t.Fatalf("kept %d results, want %d", len(h.Outcomes), maxOutcomesKept)
	}
	for j, o := range h.Outcomes {
		i := 2*maxOutcomesKept + j
		if want := StampOf(start.Add(time.Duration(i) * time.Second)); o.At != want || o.OK != (i%2 == 0) {
			t.Fatalf("result %d is %+v, want the one at %d s", j, o, i)
		}
	}
	before := h.clone()
	kept := slices.Clone(before.Outcomes)
	// Ten minutes later with a five-minute window: only the new one stays.
	last := start.Add(time.Duration(3*maxOutcomesKept) * time.Second)
	h.addOutcome(Outcome{At: StampOf(last.Add(10 * time.Minute)), Class: "c"}, 5*time.Minute)
	if len(h.Outcomes) != 1 || h.Outcomes[0].At != StampOf(last.Add(10*time.Minute)) {
		t.Fatalf("after the window moved: %+v", h.Outcomes)
	}
	if !slices.Equal(before.Outcomes, kept) {
		t.Fatal("an earlier copy of the history changed")
	}
	// Within the window, nothing leaves.
	h.addOutcome(Outcome{At: StampOf(last.Add(11 * time.Minute)), Class: "c"}, 5*time.Minute)
	if len(h.Outcomes) != 2 {
		t.Fatalf("kept %d results within the window, want 2", len(h.Outcomes))
	}
}

// A run counts as slow only when it is also a quarter of a second or more
// past the fleet median: a node whose millisecond tasks take four times
// the median (a busy box scheduling them late) is not demoted, one whose
// fifth-of-a-second or two-second tasks take four times theirs is.
func TestSlowRunsNeedASecondPastTheMedian(t *testing.T) {
	for _, c := range []struct {
		median  time.Duration
		demoted bool
	}{
		{5 * time.Millisecond, false},
		{50 * time.Millisecond, false},
		{200 * time.Millisecond, true},
		{2 * time.Second, true},
	} {
		h := newProfileHarness(t, "a", "b", "c", "late")
		for i := 0; i < 3; i++ {
			for _, n := range []string{"a", "b", "c"} {
				h.run("build", n, c.median, AttemptSucceeded)
			}
		}
		for i := 0; i < 5; i++ {
			h.run("build", "late", 4*c.median, AttemptSucceeded)
		}
		if got := h.node("late").Tier.Demotions > 0; got != c.demoted {
			t.Errorf("runs of 4× a median of %s: demoted %v, want %v (tier %+v)", c.median, got, c.demoted, h.node("late").Tier)
		}
	}
}
