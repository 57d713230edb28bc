package cluster

import (
	"testing"
	"time"

	"herd/fsm"
	"herd/scheduler"
)

// The reclaims the leader makes of attempts reserved past the timeout
// apply to an attempt still RESERVED and spare one whose start committed
// after the leader listed it; one reserved within the timeout is not
// reclaimed at all.
func TestReclaimSparesAnAttemptStartedAfterTheLook(t *testing.T) {
	f := fsm.New(nil)
	var index uint64
	apply := func(t *testing.T, mt fsm.MessageType, v any) any {
		t.Helper()
		b, err := fsm.Encode(mt, v)
		if err != nil {
			t.Fatal(err)
		}
		index++
		return f.ApplyBytes(index, b)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	n, ok := apply(t, fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: at, Node: fsm.Node{
		ID: "n1", Capabilities: map[string][]string{"exec": {"1"}}, Resources: scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 4,
	}}).(*fsm.Node)
	if !ok {
		t.Fatal("register failed")
	}
	for i, id := range []string{"t1", "t2", "t3"} {
		reservedAt := at
		if id == "t3" {
			reservedAt = at.Add(50 * time.Second)
		}
		apply(t, fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: at, Spec: fsm.TaskSpec{Name: id, TaskShape: &fsm.TaskShape{
			Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", TimeoutSeconds: 60, MaxAttempts: 2,
			Resources: scheduler.Resources{CPUMillis: 100, MemoryMB: 64},
		}}})
		if _, ok := apply(t, fsm.MsgReserve, fsm.ReserveRequest{TaskID: id, AttemptID: "a" + id[1:], Number: 1, NodeID: "n1",
			SessionGeneration: n.SessionGeneration, Now: reservedAt, HeartbeatTTL: time.Hour}).(*fsm.ReserveResult); !ok {
			t.Fatalf("reservation %d failed", i)
		}
	}
	reserved, err := f.State().AttemptsInState(fsm.AttemptReserved)
	if err != nil || len(reserved) != 3 {
		t.Fatalf("reserved attempts: %d (%v)", len(reserved), err)
	}
	now := at.Add(time.Minute)
	reclaims := reclaimsDue(reserved, now, time.Minute)
	if len(reclaims) != 2 {
		t.Fatalf("%d reclaims, want those of a1 and a2 (a3 was reserved 10 s ago)", len(reclaims))
	}
	// a1's start commits between the leader's look and its reclaims.
	a1, _ := f.State().Attempt("a1")
	if _, ok := apply(t, fsm.MsgAttemptStart, fsm.AttemptStartRequest{AttemptID: "a1", LeaseVersion: a1.LeaseVersion, Now: now}).(*fsm.AttemptResult); !ok {
		t.Fatal("start of a1 failed")
	}
	for _, r := range reclaims {
		apply(t, fsm.MsgAttemptEnd, r)
	}
	for id, want := range map[string]fsm.AttemptState{"a1": fsm.AttemptRunning, "a2": fsm.AttemptLost, "a3": fsm.AttemptReserved} {
		if a, err := f.State().Attempt(id); err != nil || a.State != want {
			t.Errorf("%s is %v (%v), want %s", id, a, err, want)
		}
	}
}
