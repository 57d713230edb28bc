package fsm

import (
	"testing"

	"herd/scheduler"
)

// A reservation changes the node's usage, not its record: every reader
// (State.Node, State.Nodes, a snapshot, a later command's own lookup)
// sees the usage and the index that changed it, a view taken before sees
// neither, and a restored replica carries on from the same usage.
func TestNodeUsageIsReadWithTheNode(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 500, MemoryMB: 64}
	n := h.register("n1", scheduler.Resources{CPUMillis: 2000, MemoryMB: 1024}, 4)
	h.submit("t1", res, 1)
	h.submit("t2", res, 1)
	before := h.f.State()
	record, _ := h.f.db.nodeRecord("n1")
	h.applyBatch(reserveCmd(t, "t1", "a1", "n1", 1, n.SessionGeneration), reserveCmd(t, "t2", "a2", "n1", 1, n.SessionGeneration))
	reservedAt := h.index
	if now, _ := h.f.db.nodeRecord("n1"); now != record {
		t.Fatal("the reservations replaced the node's record")
	}
	want := func(st *State, reserved scheduler.Resources, running int, modified uint64) {
		t.Helper()
		one, err := st.Node("n1")
		if err != nil {
			t.Fatal(err)
		}
		all, _ := st.Nodes()
		for _, got := range []*Node{one, all[0]} {
			if got.Reserved != reserved || got.RunningAttempts != running || got.ModifyIndex != modified {
				t.Fatalf("node reads %+v in %d attempts at index %d, want %+v in %d at %d",
					got.Reserved, got.RunningAttempts, got.ModifyIndex, reserved, running, modified)
			}
		}
	}
	want(before, scheduler.Resources{}, 0, n.ModifyIndex)
	want(h.f.State(), res.Add(res), 2, reservedAt)

	// A command that rewrites the record stamps it with the usage.
	drained, ok := h.apply(MsgNodeDrain, NodeDrainRequest{NodeID: "n1", Enable: true}).(*Node)
	if !ok || drained.RunningAttempts != 2 || drained.Reserved != res.Add(res) {
		t.Fatalf("drain answered %+v", drained)
	}
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: leaseOf(t, h, "a1"), State: AttemptSucceeded, Now: epoch})
	want(h.f.State(), res, 1, h.index)

	restored := restoredCopy(t, h.f)
	want(restored.State(), res, 1, h.index)
	end := mustEncode(t, MsgAttemptEnd, AttemptEndRequest{AttemptID: "a2", LeaseVersion: leaseOf(t, h, "a2"), State: AttemptSucceeded, Now: epoch})
	h.index++
	h.f.ApplyBytes(h.index, end)
	restored.ApplyBytes(h.index, end)
	for _, f := range []*FSM{h.f, restored} {
		want(f.State(), scheduler.Resources{}, 0, h.index)
		if err := f.State().CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	h1, _ := h.f.State().Hash()
	h2, _ := restored.State().Hash()
	if h1 != h2 {
		t.Fatal("the restored replica's state differs after the same command")
	}
}
