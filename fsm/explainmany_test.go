package fsm

import (
	"testing"
	"time"

	"herd/scheduler"
)

// An explain-many command leaves the state exactly as an explain per task
// in one entry does (what a leader writes while a server of older forms
// remains): tasks whose reason changed get it and a timeline event, a
// task already explained so, one placed since and one that is gone are
// passed over; the snapshots of the two states are the same bytes.
func TestExplainManyIsAnExplainPerTask(t *testing.T) {
	res := scheduler.Resources{CPUMillis: 1000, MemoryMB: 512}
	const reason = "0/1 nodes eligible: 1 missing capability gpu@1"
	now := epoch.Add(time.Second)
	setup := func() *harness {
		h := newHarness(t)
		h.register("n1", res, 2)
		for _, id := range []string{"t1", "t2", "t3", "t4"} {
			h.submit(id, res, 3)
		}
		h.apply(MsgExplain, ExplainRequest{TaskID: "t2", Summary: reason, Now: epoch})
		h.applyBatch(reserveCmd(t, "t3", "t3-1", "n1", 1, 1))
		return h
	}
	ids := []string{"t1", "t2", "t3", "t4", "gone"}
	per := setup()
	var cmds [][]byte
	for _, id := range ids {
		cmds = append(cmds, EncodeExplain(ExplainRequest{TaskID: id, Summary: reason, Now: now}))
	}
	per.applyBatch(cmds...)
	many := setup()
	if got := many.apply(MsgExplainMany, ExplainManyRequest{Summary: reason, Now: now, TaskIDs: ids}); got != nil {
		t.Fatalf("explain-many answered %v", got)
	}
	requireSameState(t, per, many, "per task", "many")
	for _, id := range []string{"t1", "t4"} {
		task, err := many.f.State().Task(id)
		if err != nil || task.LastExplain() != reason {
			t.Fatalf("%s explained %q, %v", id, task.LastExplain(), err)
		}
	}
}

// An explain-many round-trips through its binary form, and a truncated
// one is refused as malformed.
func TestExplainManyCodec(t *testing.T) {
	r := ExplainManyRequest{Summary: "waiting", Now: epoch.Add(time.Second), TaskIDs: []string{"a", "bb", "ccc"}}
	enc := EncodeExplainMany(r)
	h, payload, err := decodeHeader(enc)
	if err != nil || h.typ != MsgExplainMany || h.version != FormsExplainMany {
		t.Fatalf("header %+v, %v", h, err)
	}
	got, err := decodeExplainMany(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary != r.Summary || !got.Now.Equal(r.Now) || len(got.TaskIDs) != 3 || got.TaskIDs[2] != "ccc" {
		t.Fatalf("decoded %+v, want %+v", got, r)
	}
	if _, err := decodeExplainMany(payload[:len(payload)-2]); err == nil {
		t.Fatal("a truncated explain-many decoded")
	}
}
