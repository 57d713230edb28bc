package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

// A node's reported conditions: a new one is stamped and recorded as an
// event, one that stands keeps its stamp and adds nothing, a cleared one
// is an event; a reservation on a node with a condition is refused at
// apply time, and one from an older session or a malformed report is
// refused with the reason.
func TestNodeConditions(t *testing.T) {
	h := newHarness(t)
	n := h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 2)
	report := func(at time.Duration, gen uint64, conds ...NodeCondition) any {
		return h.apply(MsgNodeConditions, NodeConditionsRequest{NodeID: "n1", SessionGeneration: gen, Conditions: conds, Now: epoch.Add(at)})
	}
	full := NodeCondition{Type: "disk_full", Message: "3 MiB free"}
	got, ok := report(time.Second, n.SessionGeneration, full).(*Node)
	if !ok || len(got.Conditions) != 1 || got.Conditions[0].Since != StampOf(epoch.Add(time.Second)) {
		t.Fatalf("first report: %#v", got)
	}
	if last := got.Events[len(got.Events)-1]; last.Kind != EventCondition || last.Message != "disk_full: 3 MiB free" {
		t.Fatalf("event: %+v", last)
	}
	events, modified := len(got.Events), got.ModifyIndex
	got = report(2*time.Second, n.SessionGeneration, full).(*Node)
	if len(got.Events) != events || got.ModifyIndex != modified || got.Conditions[0].Since != StampOf(epoch.Add(time.Second)) {
		t.Fatalf("an unchanged report changed the node: %+v", got)
	}

	h.submit("t1", scheduler.Resources{CPUMillis: 100}, 1)
	h.index++
	resp := h.f.ApplyBytes(h.index, reserveCmd(t, "t1", "a1", "n1", 1, n.SessionGeneration))
	var rej *Rejection
	if err, ok := resp.(error); !ok || !errors.As(err, &rej) || rej.Code != string(scheduler.ReasonAgentCondition) {
		t.Fatalf("a reservation on a node with a condition: %#v", resp)
	}

	got = report(3*time.Second, n.SessionGeneration).(*Node)
	if len(got.Conditions) != 0 || got.Events[len(got.Events)-1].Message != "disk_full cleared" {
		t.Fatalf("cleared: %+v", got)
	}
	h.index++
	if resp := h.f.ApplyBytes(h.index, reserveCmd(t, "t1", "a1", "n1", 1, n.SessionGeneration)); resp != nil {
		if _, ok := resp.(*ReserveResult); !ok {
			t.Fatalf("a reservation once the condition cleared: %#v", resp)
		}
	}

	for name, c := range map[string]struct {
		gen   uint64
		conds []NodeCondition
		code  string
	}{
		"older session": {n.SessionGeneration - 1, []NodeCondition{full}, RejectSessionChanged},
		"bad type":      {n.SessionGeneration, []NodeCondition{{Type: "Disk Full"}}, RejectInvalid},
		"twice":         {n.SessionGeneration, []NodeCondition{full, full}, RejectInvalid},
		"long message":  {n.SessionGeneration, []NodeCondition{{Type: "x", Message: strings.Repeat("m", MaxConditionMessageSize+1)}}, RejectInvalid},
	} {
		resp := report(4*time.Second, c.gen, c.conds...)
		if err, ok := resp.(error); !ok || !errors.As(err, &rej) || rej.Code != c.code {
			t.Errorf("%s: %#v, want rejection %s", name, resp, c.code)
		}
	}
}
