package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// specHarness has a class with history on n2 and n3 and a speculative
// task of it running on n1, marked slow.
func specHarness(t *testing.T, id string) (*profileHarness, *Attempt) {
	t.Helper()
	h := newProfileHarness(t, "n1", "n2", "n3")
	for i := 0; i < 2; i++ {
		h.run("etl", "n2", time.Second, AttemptSucceeded)
		h.run("etl", "n3", time.Second, AttemptSucceeded)
	}
	spec := testSpec("")
	spec.Class, spec.Speculative, spec.MaxAttempts = "etl", true, 3
	h.apply(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: spec})
	r := h.apply(MsgReserve, ReserveRequest{TaskID: id, AttemptID: id + "-1", Number: 1, NodeID: "n1", SessionGeneration: 1, Now: h.now}).(*ReserveResult)
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: id + "-1", LeaseVersion: r.Attempt.LeaseVersion, Now: h.now})
	h.now = h.now.Add(11 * time.Second)
	if _, ok := h.apply(MsgAttemptSlow, AttemptSlowRequest{AttemptID: id + "-1", Now: h.now}).(*AttemptResult); !ok {
		t.Fatal("mark slow refused")
	}
	a, _ := h.f.State().Attempt(id + "-1")
	return h, a
}

func (h *profileHarness) backup(task, node string, number int) any {
	n, _ := h.f.State().Node(node)
	return h.apply(MsgReserve, ReserveRequest{TaskID: task, AttemptID: task + "-" + string(rune('0'+number)), Number: number, NodeID: node, SessionGeneration: n.SessionGeneration, Now: h.now, Backup: true})
}

func (h *profileHarness) end(id string, state AttemptState) any {
	a, _ := h.f.State().Attempt(id)
	return h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: id, LeaseVersion: a.LeaseVersion, State: state, Now: h.now, RetryAt: h.now})
}

func timelineHas(t *Task, s string) bool {
	return slices.ContainsFunc(t.Timeline(), func(e TimelineEvent) bool { return strings.Contains(e.Message, s) })
}

// A speculative task's slow attempt gets one backup on another node; the
// backup finishing first wins, the slow attempt is cancelled and its late
// result is stale. The invariants (two live attempts only so) hold after
// every command (the harness checks them).
func TestBackupWinsTheRace(t *testing.T) {
	h, slow := specHarness(t, "s1")
	if res := h.backup("s1", "n1", 2); !isRejection(res, RejectConflict) {
		t.Fatalf("a backup on the slow attempt's node: %v", res)
	}
	b, ok := h.backup("s1", "n2", 2).(*ReserveResult)
	if !ok {
		t.Fatal("backup refused")
	}
	if res := h.backup("s1", "n3", 3); !isRejection(res, RejectConflict) {
		t.Fatalf("a second backup: %v", res)
	}
	task, _ := h.f.State().Task("s1")
	if task.State != TaskRunning || task.CurrentAttempt() != slow.ID || h.f.State().BackupAttempt(task) != b.Attempt.ID {
		t.Fatalf("racing: %v current %s backup %s", task.State, task.CurrentAttempt(), h.f.State().BackupAttempt(task))
	}
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: b.Attempt.ID, LeaseVersion: b.Attempt.LeaseVersion, Now: h.now})
	h.now = h.now.Add(time.Second)
	res, ok := h.end(b.Attempt.ID, AttemptSucceeded).(*AttemptResult)
	if !ok || res.Task.State != TaskSucceeded {
		t.Fatalf("the backup's success: %+v", res)
	}
	loser, _ := h.f.State().Attempt(slow.ID)
	if loser.State != AttemptCancelled || !timelineHas(res.Task, "attempt 1 on n1 cancelled: attempt 2 on n2 finished first") {
		t.Fatalf("loser %s, timeline %+v", loser.State, res.Task.Timeline())
	}
	if res := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: slow.ID, LeaseVersion: slow.LeaseVersion, State: AttemptSucceeded, Now: h.now}); !isRejection(res, RejectStale) {
		t.Fatalf("the loser's late result: %v", res)
	}
	if n := h.node("n1"); n.RunningAttempts != 0 || n.Reserved.CPUMillis != 0 {
		t.Fatalf("the loser's reservation is held: %+v", n)
	}
}

// The slow attempt failing leaves its backup as the task's attempt, which
// goes on and ends the task; a backup reserved but not started when the
// slow one fails starts as the task's attempt.
func TestBackupGoesOnWhenTheSlowAttemptFails(t *testing.T) {
	h, slow := specHarness(t, "s2")
	b := h.backup("s2", "n3", 2).(*ReserveResult)
	res, ok := h.end(slow.ID, AttemptTimedOut).(*AttemptResult)
	if !ok || res.Task.State != TaskRunning || res.Task.CurrentAttempt() != b.Attempt.ID || res.Task.Failures != 1 {
		t.Fatalf("after the slow attempt timed out: %+v", res)
	}
	if !timelineHas(res.Task, "attempt 2 on n3 goes on as the task's attempt") {
		t.Fatalf("timeline %+v", res.Task.Timeline())
	}
	if _, ok := h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: b.Attempt.ID, LeaseVersion: b.Attempt.LeaseVersion, Now: h.now}).(*AttemptResult); !ok {
		t.Fatal("the backup, now the task's attempt, cannot start")
	}
	if res, ok := h.end(b.Attempt.ID, AttemptSucceeded).(*AttemptResult); !ok || res.Task.State != TaskSucceeded {
		t.Fatalf("the backup's success: %+v", res)
	}
}

// Cancelling a racing task cancels both attempts; a node declared down
// under one of them leaves the other running; a task that is not
// speculative, or whose attempt is not slow, gets no backup.
func TestRaceEndsCleanly(t *testing.T) {
	h, _ := specHarness(t, "s3")
	h.backup("s3", "n2", 2)
	res, ok := h.apply(MsgCancelTask, CancelTaskRequest{TaskID: "s3", Reason: "enough", Now: h.now}).(*CancelResult)
	if !ok || res.Task.State != TaskCancelled {
		t.Fatalf("cancel: %+v", res)
	}
	for _, id := range []string{"s3-1", "s3-2"} {
		if a, _ := h.f.State().Attempt(id); a.State != AttemptCancelled {
			t.Fatalf("%s is %s after the cancel", id, a.State)
		}
	}

	h2, slow := specHarness(t, "s4")
	b := h2.backup("s4", "n2", 2).(*ReserveResult)
	h2.apply(MsgNodeDown, NodeDownRequest{NodeID: "n1", Reason: "gone", Now: h2.now})
	task, _ := h2.f.State().Task("s4")
	if a, _ := h2.f.State().Attempt(slow.ID); a.State != AttemptLost || task.CurrentAttempt() != b.Attempt.ID || task.State != TaskRunning {
		t.Fatalf("node down under the slow attempt: %s, task %v on %s", a.State, task.State, task.CurrentAttempt())
	}

	h3 := newProfileHarness(t, "n1", "n2")
	spec := testSpec("")
	h3.apply(MsgSubmitTask, SubmitTaskRequest{ID: "plain", SubmittedAt: h3.now, Spec: spec})
	r := h3.apply(MsgReserve, ReserveRequest{TaskID: "plain", AttemptID: "plain-1", Number: 1, NodeID: "n1", SessionGeneration: 1, Now: h3.now}).(*ReserveResult)
	h3.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "plain-1", LeaseVersion: r.Attempt.LeaseVersion, Now: h3.now})
	if res := h3.backup("plain", "n2", 2); !isRejection(res, RejectConflict) {
		t.Fatalf("a backup for a task that is not speculative: %v", res)
	}
	h4 := newProfileHarness(t, "n1", "n2")
	spec.Speculative = true
	h4.apply(MsgSubmitTask, SubmitTaskRequest{ID: "fast", SubmittedAt: h4.now, Spec: spec})
	r = h4.apply(MsgReserve, ReserveRequest{TaskID: "fast", AttemptID: "fast-1", Number: 1, NodeID: "n1", SessionGeneration: 1, Now: h4.now}).(*ReserveResult)
	h4.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "fast-1", LeaseVersion: r.Attempt.LeaseVersion, Now: h4.now})
	if res := h4.backup("fast", "n2", 2); !isRejection(res, RejectConflict) {
		t.Fatalf("a backup of an attempt not marked slow: %v", res)
	}
}
