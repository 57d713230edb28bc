package cluster

import (
	"bytes"
	"fmt"
	"io"
	"maps"
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
			MaxAttempts: 1, Submitter: fmt.Sprint("s", prio%20),
		}}})
	}
	lq := newLeaderQueue(scheduler.DefaultQueueConfig())
	var left []string
	var fresh []string
	sync := func(wantRebuilt bool) {
		t.Helper()
		rebuilt, err := lq.sync(f.State(), func(id string) { left = append(left, id) })
		if err != nil || rebuilt != wantRebuilt {
			t.Fatalf("sync: rebuilt %v (want %v), %v", rebuilt, wantRebuilt, err)
		}
		// The counts by submitter and shape are those of the queued
		// tasks, however they came and went.
		subs, shapes := map[string]int{}, map[*fsm.TaskShape]map[string]int{}
		for _, qt := range lq.q.Head(now, lq.q.Len()+1) {
			tk := qt.Ref.(*fsm.Task)
			subs[tk.Spec.Submitter]++
			if !tk.HasNodeFailures() {
				if shapes[tk.Spec.TaskShape] == nil {
					shapes[tk.Spec.TaskShape] = map[string]int{}
				}
				shapes[tk.Spec.TaskShape][tk.Spec.Submitter]++
			}
		}
		if !maps.Equal(subs, lq.subs) || len(shapes) != len(lq.shapes) {
			t.Fatalf("counts by submitter %v and shapes %d, the queue holds %v and %d", lq.subs, len(lq.shapes), subs, len(shapes))
		}
		for shape, bySub := range shapes {
			counted := map[string]int{}
			if c := lq.shapes[shape]; c != nil {
				c.each(func(sub string, n int) { counted[sub] = n })
			}
			if !maps.Equal(bySub, counted) {
				t.Fatalf("shape %p counted %v, the queue holds %v", shape, counted, bySub)
			}
		}
		fresh = append(fresh, lq.takeFresh()...)
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
	// Every task is listed fresh once, when it is first queued; a record
	// that changes while queued is not new.
	if want := []string{"t0", "t1", "t2", "t3", "t4", "t5"}; !slices.Equal(fresh, want) {
		t.Fatalf("listed as newly queued: %v, want %v", fresh, want)
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

// A shape's count keeps one submitter inline and the others in a map;
// whichever leaves first, each gives every submitter's count and the
// shape reports empty exactly when no task is left.
func TestShapeCountBySubmitter(t *testing.T) {
	c := &shapeCount{sub: "a"}
	steps := []struct {
		sub   string
		d     int
		want  map[string]int
		empty bool
	}{
		{"a", 1, map[string]int{"a": 1}, false},
		{"b", 1, map[string]int{"a": 1, "b": 1}, false},
		{"c", 2, map[string]int{"a": 1, "b": 1, "c": 2}, false},
		{"a", -1, map[string]int{"b": 1, "c": 2}, false},
		{"c", -1, map[string]int{"b": 1, "c": 1}, false},
		{"b", -1, map[string]int{"c": 1}, false},
		{"a", 1, map[string]int{"a": 1, "c": 1}, false},
		{"c", -1, map[string]int{"a": 1}, false},
		{"a", -1, map[string]int{}, true},
	}
	for i, s := range steps {
		empty := c.add(s.sub, s.d)
		got := map[string]int{}
		c.each(func(sub string, n int) { got[sub] = n })
		if empty != s.empty || !maps.Equal(got, s.want) {
			t.Fatalf("step %d (%s %+d): counts %v, empty %v; want %v, %v", i, s.sub, s.d, got, empty, s.want, s.empty)
		}
	}
}
