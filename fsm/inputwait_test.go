package fsm

import (
	"slices"
	"testing"
	"time"
)

// An attempt that could not fetch an input from any live node ends LOST
// at no cost: the task does not use up its attempts, no node is blamed
// or blacklisted, it waits (NotBefore), and its timeline says why. A
// plain LOST end still counts.
func TestInputUnavailableCostsNothing(t *testing.T) {
	h := newProfileHarness(t, "consumer")
	spec := testSpec("")
	spec.MaxAttempts = 2
	h.apply(MsgSubmitTask, SubmitTaskRequest{ID: "c1", SubmittedAt: h.now, Spec: spec})
	end := func(number int, unavailable bool) *Task {
		t.Helper()
		id := "c1-" + string(rune('0'+number))
		r, ok := h.apply(MsgReserve, ReserveRequest{TaskID: "c1", AttemptID: id, Number: number, NodeID: "consumer", SessionGeneration: 1, Now: h.now}).(*ReserveResult)
		if !ok {
			t.Fatalf("reserve attempt %d refused", number)
		}
		h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: id, LeaseVersion: r.Attempt.LeaseVersion, Now: h.now})
		h.now = h.now.Add(time.Second)
		res, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: id, LeaseVersion: r.Attempt.LeaseVersion, State: AttemptLost, ExitCode: -1,
			Error: "input unavailable", Now: h.now, RetryAt: h.now.Add(5 * time.Second), InputUnavailable: unavailable}).(*AttemptResult)
		if !ok {
			t.Fatalf("end attempt %d refused", number)
		}
		h.now = h.now.Add(5 * time.Second)
		return res.Task
	}
	for n := 1; n <= 5; n++ {
		task := end(n, true)
		if task.State != TaskPending || task.Failures != 0 || len(task.nodeFailures()) != 0 || task.NotBefore().IsZero() {
			t.Fatalf("after %d unavailable inputs: state %v, failures %d, node failures %v, not before %v", n, task.State, task.Failures, task.nodeFailures(), task.NotBefore())
		}
		if !slices.ContainsFunc(task.Timeline(), func(e TimelineEvent) bool { return e.Kind == EventInputUnavailable }) {
			t.Fatal("the timeline does not say why the task waits")
		}
	}
	if n := h.node("consumer"); n.History != nil && len(n.History.Outcomes) != 0 {
		t.Fatalf("the node's history counts the waits: %+v", n.History.Outcomes)
	}
	if task := end(6, false); task.State != TaskPending || task.Failures != 1 {
		t.Fatalf("a plain lost end counts: %v, %d", task.State, task.Failures)
	}
	if task := end(7, false); task.State != TaskFailed {
		t.Fatalf("two counted ends of at most 2 give up: %v", task.State)
	}
}
