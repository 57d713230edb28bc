package cluster

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"herd/fsm"
	"herd/scheduler"
)

// The leader's queue follows the FSM: it holds exactly the pending tasks
// after submits and cancels, reports each task that leaves it once, and
// after a restore (a new store, whose feed cannot serve the old cursor)
// it rebuilds.
func TestLeaderQueueFollowsThePendingSet(t *testing.T) {
	f := fsm.New(nil)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	index := uint64(0)
	apply := func(typ fsm.MessageType, payload any) {
		t.Helper()
		b, err := fsm.Encode(typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.ApplyBytes(index, b); res != nil {
			if err, ok := res.(error); ok {
				t.Fatalf("apply %d: %v", typ, err)
			}
		}
	}
	submit := func(id string, prio int) {
		apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: fsm.TaskSpec{Name: id, TaskShape: &fsm.TaskShape{
			Priority: prio, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", TimeoutSeconds: 60,
			MaxAttempts: 1,
		}}})
	}
	lq := newLeaderQueue(scheduler.DefaultQueueConfig())
	var left []string
	sync := func(wantRebuilt bool) {
		t.Helper()
		rebuilt, err := lq.sync(f.State(), func(id string) { left = append(left, id) })
		if err != nil || rebuilt != wantRebuilt {
			t.Fatalf("sync: rebuilt %v (want %v), %v", rebuilt, wantRebuilt, err)
		}
	}
	ids := func() []string {
		var out []string
		for _, qt := range lq.q.Head(now, lq.q.Len()+1) {
			out = append(out, qt.ID)
		}
		return out
	}

	// Each queued task carries the view's record of it, which a pass uses
	// instead of looking it up again.
	checkRecords := func(label string) {
		t.Helper()
		st := f.State()
		for _, qt := range lq.q.Head(now, lq.q.Len()+1) {
			want, err := st.Task(qt.ID)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if got, _ := qt.Ref.(*fsm.Task); got != want {
				t.Fatalf("%s: queued %s carries %p, the view holds %p", label, qt.ID, got, want)
			}
		}
	}

	for i := range 5 {
		submit(fmt.Sprint("t", i), 10*i)
	}
	sync(true) // a new leader reads the pending set whole
	checkRecords("after the first sync")
	apply(fsm.MsgExplain, fsm.ExplainRequest{TaskID: "t2", Summary: "no node has capability exec", Now: now})
	sync(false)
	checkRecords("after a pending task's record changed")
	if got := ids(); !slices.Equal(got, []string{"t4", "t3", "t2", "t1", "t0"}) {
		t.Fatalf("queue after the first sync: %v", got)
	}
	apply(fsm.MsgCancelTask, fsm.CancelTaskRequest{TaskID: "t3", Now: now})
	submit("t5", 35)
	sync(false)
	if got := ids(); !slices.Equal(got, []string{"t4", "t5", "t2", "t1", "t0"}) {
		t.Fatalf("queue after a cancel and a submit: %v", got)
	}
	if !slices.Equal(left, []string{"t3"}) {
		t.Fatalf("tasks reported as leaving: %v, want [t3]", left)
	}
	sync(false) // nothing new
	if len(left) != 1 || lq.q.Len() != 5 {
		t.Fatalf("an idle sync changed the queue: %d tasks, left %v", lq.q.Len(), left)
	}

	// A restore replaces the store: the queue is rebuilt from it.
	var snap bytes.Buffer
	if err := f.State().Dump(&snap); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&snap)); err != nil {
		t.Fatal(err)
	}
	apply(fsm.MsgCancelTask, fsm.CancelTaskRequest{TaskID: "t0", Now: now})
	sync(true)
	if got := ids(); !slices.Equal(got, []string{"t4", "t5", "t2", "t1"}) {
		t.Fatalf("queue after a restore: %v", got)
	}
	checkRecords("after a restore")
}
