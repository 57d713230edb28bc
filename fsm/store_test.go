package fsm

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// storeModel is the obvious implementation the store must agree with:
// plain maps, every query a full scan.
type storeModel struct {
	tasks    map[string]Task
	attempts map[string]Attempt
}

func (m *storeModel) copy() *storeModel {
	return &storeModel{tasks: maps.Clone(m.tasks), attempts: maps.Clone(m.attempts)}
}

// checkAgainst compares every query of a view with the model.
func (m *storeModel) checkAgainst(t *rapid.T, st *State, label string) {
	taskStates := []TaskState{TaskPending, TaskScheduled, TaskRunning, TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled}
	counts, _ := st.CountTasks()
	for _, s := range taskStates {
		var want []string
		inState := 0
		for id, tk := range m.tasks {
			if tk.State != s {
				continue
			}
			inState++
			// A scheduled or running task is listed through its live
			// attempt; the FSM never has one without (CheckInvariants).
			if a, ok := m.attempts[tk.CurrentAttempt()]; indexedByState(s) || ok && a.State.Live() && a.TaskID == id {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		got, _ := st.Tasks(TaskFilter{State: s})
		if ids := taskIDs(got); !slices.Equal(ids, want) {
			t.Fatalf("%s: %s tasks %v, model %v", label, s, ids, want)
		}
		if counts[s] != inState {
			t.Fatalf("%s: count of %s is %d, model %d", label, s, counts[s], inState)
		}
		if len(want) > 1 { // pagination resumes after the cursor
			got, _ := st.Tasks(TaskFilter{State: s, After: want[0], Limit: 1})
			if ids := taskIDs(got); !slices.Equal(ids, want[1:2]) {
				t.Fatalf("%s: page after %s of %s is %v, want %v", label, want[0], s, ids, want[1:2])
			}
		}
	}
	all, _ := st.Tasks(TaskFilter{})
	want := slices.Sorted(maps.Keys(m.tasks))
	if ids := taskIDs(all); !slices.Equal(ids, want) {
		t.Fatalf("%s: tasks %v, model %v", label, ids, want)
	}
	for id, tk := range m.tasks {
		got, err := st.Task(id)
		if err != nil || got.State != tk.State || got.ModifyIndex != tk.ModifyIndex || got.Spec.IdempotencyKey != tk.Spec.IdempotencyKey {
			t.Fatalf("%s: task %s is %+v (%v), model %+v", label, id, got, err, tk)
		}
		if k := tk.Spec.IdempotencyKey; k != "" {
			if got, err := st.TaskByIdempotencyKey(k); err != nil || got.ID != id {
				t.Fatalf("%s: key %s finds %v (%v), want %s", label, k, got, err, id)
			}
		}
		var wantAttempts []string
		for aid, a := range m.attempts {
			if a.TaskID == id {
				wantAttempts = append(wantAttempts, aid)
			}
		}
		slices.Sort(wantAttempts)
		got2, _ := st.AttemptsOfTask(id)
		if ids := attemptIDs(got2); !slices.Equal(ids, wantAttempts) {
			t.Fatalf("%s: attempts of %s %v, model %v", label, id, ids, wantAttempts)
		}
	}
	for _, node := range []string{"n1", "n2"} {
		var wantAll, wantLive []string
		for aid, a := range m.attempts {
			if a.NodeID == node {
				wantAll = append(wantAll, aid)
				if a.State.Live() {
					wantLive = append(wantLive, aid)
				}
			}
		}
		slices.Sort(wantAll)
		slices.Sort(wantLive)
		gotAll, _ := st.AttemptsOnNode(node, nil)
		gotLive, _ := st.LiveAttemptsOnNode(node, nil)
		if !slices.Equal(attemptIDs(gotAll), wantAll) || !slices.Equal(attemptIDs(gotLive), wantLive) {
			t.Fatalf("%s: on %s attempts %v live %v, model %v live %v", label, node, attemptIDs(gotAll), attemptIDs(gotLive), wantAll, wantLive)
		}
	}
	for _, s := range []AttemptState{AttemptReserved, AttemptRunning, AttemptSucceeded, AttemptLost} {
		var want []string
		for aid, a := range m.attempts {
			if a.State == s {
				want = append(want, aid)
			}
		}
		slices.Sort(want)
		got, _ := st.AttemptsInState(s)
		if ids := attemptIDs(got); !slices.Equal(ids, want) {
			t.Fatalf("%s: %s attempts %v, model %v", label, s, ids, want)
		}
	}
}

func taskIDs(ts []*Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func attemptIDs(as []*Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.ID)
	}
	return out
}

// TestStoreMatchesModelAndViewsStayFrozen drives the store with random
// writes (many records, so trees split and merge) and checks every query
// against a model, and that a view taken earlier still answers exactly as
// the model did when it was taken.
func TestStoreMatchesModelAndViewsStayFrozen(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		db := newStore()
		m := &storeModel{tasks: map[string]Task{}, attempts: map[string]Attempt{}}
		type frozen struct {
			view  *State
			model *storeModel
		}
		var views []frozen
		// A reader following the pending feed from view to view must end
		// with exactly the pending set.
		fed := map[string]bool{}
		var cursor PendingCursor
		follow := func(v *State, label string) {
			changes, next, ok := v.PendingChanges(cursor)
			if !ok {
				if cursor != (PendingCursor{}) {
					rt.Fatalf("%s: the feed lost the reader's place", label)
				}
				pending, _ := v.PendingTasks(nil)
				for _, tk := range pending {
					fed[tk.ID] = true
				}
			}
			for _, c := range changes {
				// A change that left the task out removes it unread, as
				// the leader's queue does.
				if !c.Pending {
					delete(fed, c.ID)
				} else if tk, err := v.Task(c.ID); err == nil && tk.State == TaskPending {
					fed[c.ID] = true
				} else {
					delete(fed, c.ID)
				}
			}
			cursor = next
			pending, _ := v.PendingTasks(nil)
			if len(pending) != len(fed) {
				rt.Fatalf("%s: the feed's reader has %d pending tasks, the view %d", label, len(fed), len(pending))
			}
			for _, tk := range pending {
				if !fed[tk.ID] {
					rt.Fatalf("%s: the feed's reader misses pending task %s", label, tk.ID)
				}
			}
		}
		taskStates := []TaskState{TaskPending, TaskScheduled, TaskRunning, TaskSucceeded, TaskCancelled}
		attemptStates := []AttemptState{AttemptReserved, AttemptRunning, AttemptSucceeded, AttemptLost}
		steps := rapid.IntRange(1, 400).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			id := fmt.Sprintf("t%03d", rapid.IntRange(0, 150).Draw(rt, "task"))
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				tk := Task{ID: id, State: rapid.SampledFrom(taskStates).Draw(rt, "state"), ModifyIndex: uint64(i)}
				if !indexedByState(tk.State) {
					// Mostly one of its own attempts, as in the FSM.
					var own []string
					for aid, a := range m.attempts {
						if a.TaskID == id {
							own = append(own, aid)
						}
					}
					slices.Sort(own)
					tk.setCurrentAttempt(fmt.Sprintf("a%03d", rapid.IntRange(0, 150).Draw(rt, "current")))
					if len(own) > 0 && rapid.IntRange(0, 3).Draw(rt, "own") > 0 {
						tk.setCurrentAttempt(rapid.SampledFrom(own).Draw(rt, "current own"))
					}
				}
				if old, ok := m.tasks[id]; ok {
					tk.Spec.IdempotencyKey = old.Spec.IdempotencyKey // keys never change
				} else if rapid.Bool().Draw(rt, "keyed") {
					tk.Spec.IdempotencyKey = "k-" + id
				}
				db.putTask(&tk)
				m.tasks[id] = tk
			case 4:
				if tk, ok := m.tasks[id]; ok {
					db.deleteTask(&tk)
					delete(m.tasks, id)
				}
			case 5, 6, 7:
				aid := fmt.Sprintf("a%03d", rapid.IntRange(0, 150).Draw(rt, "attempt"))
				a := Attempt{ID: aid, TaskID: id, NodeID: rapid.SampledFrom([]string{"n1", "n2"}).Draw(rt, "node"),
					State: rapid.SampledFrom(attemptStates).Draw(rt, "astate"), ModifyIndex: uint64(i)}
				if old, ok := m.attempts[aid]; ok {
					a.TaskID, a.NodeID = old.TaskID, old.NodeID // an attempt's task and node never change
				}
				db.putAttempt(&a)
				m.attempts[aid] = a
			case 8:
				aid := fmt.Sprintf("a%03d", rapid.IntRange(0, 150).Draw(rt, "attempt"))
				if a, ok := m.attempts[aid]; ok {
					db.deleteAttempt(&a)
					delete(m.attempts, aid)
				}
			case 9:
				views = append(views, frozen{view: &State{st: db.clone(), index: uint64(i)}, model: m.copy()})
				follow(views[len(views)-1].view, fmt.Sprintf("view at step %d", i))
			}
		}
		follow(&State{st: db.clone()}, "latest")
		if err := db.checkIndexes(); err != nil {
			rt.Fatalf("indexes: %v", err)
		}
		m.checkAgainst(rt, &State{st: db.clone()}, "latest")
		for i, v := range views {
			if err := v.view.st.checkIndexes(); err != nil {
				rt.Fatalf("view %d indexes: %v", i, err)
			}
			v.model.checkAgainst(rt, v.view, fmt.Sprintf("view %d", i))
		}
	})
}

// The pending feed keeps at least feedKeep changes; a reader further
// behind, or from another store (a restore), is told to read whole.
func TestPendingFeedTrimsAndTellsLaggards(t *testing.T) {
	db := newStore()
	start, _, _ := (&State{st: db.clone()}).PendingChanges(PendingCursor{})
	if start != nil {
		t.Fatal("an empty feed returned changes")
	}
	_, zero, _ := (&State{st: db.clone()}).PendingChanges(PendingCursor{})
	for i := range 2*feedKeep + 10 {
		db.pendingChanged(fmt.Sprint("t", i), true)
	}
	v := &State{st: db.clone()}
	if _, _, ok := v.PendingChanges(zero); ok {
		t.Fatal("a reader behind the trimmed feed was not told to read whole")
	}
	_, now, _ := v.PendingChanges(zero)
	db.pendingChanged("late", true)
	changes, _, ok := (&State{st: db.clone()}).PendingChanges(now)
	if !ok || len(changes) != 1 || changes[0] != (PendingChange{ID: "late", Pending: true}) {
		t.Fatalf("a current reader got %v (ok %v), want [late]", changes, ok)
	}
	if got := len(v.st.changes); got < feedKeep || got >= 2*feedKeep {
		t.Fatalf("the feed holds %d changes, want between %d and %d", got, feedKeep, 2*feedKeep)
	}
	if _, _, ok := (&State{st: newStore().clone()}).PendingChanges(now); ok {
		t.Fatal("a cursor from another store was accepted")
	}
}

// TestWatchFiresForChangesAfterTheView checks the watch hub's promise: a
// reader waiting on a topic from a view at index i wakes for any change
// after i, including one applied before it started waiting.
func TestWatchFiresForChangesAfterTheView(t *testing.T) {
	f := New(nil)
	submit := func(index uint64, id string) {
		data, err := Encode(MsgSubmitTask, SubmitTaskRequest{ID: id, Spec: TaskSpec{TaskShape: &TaskShape{Command: []string{"true"}, MaxAttempts: 1, Capability: "exec", CapabilityVersion: "1", TimeoutSeconds: 60}}})
		if err != nil {
			t.Fatal(err)
		}
		if res := f.ApplyBytes(index, data); res != nil {
			if err, ok := res.(error); ok {
				t.Fatalf("submit %s: %v", id, err)
			}
		}
	}
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	submit(1, "a")
	early := f.State()
	submit(2, "b") // applied before anyone waits from the early view
	if ch := f.watches.watch(topicPending, early.Index()); !isClosed(ch) {
		t.Fatal("a change after the view was taken did not wake a waiter that started later")
	}
	current := f.State()
	ch := f.watches.watch(topicPending, current.Index())
	nodeCh := f.watches.watch(topicNodes, current.Index())
	if isClosed(ch) || isClosed(nodeCh) {
		t.Fatal("a watch fired with no change after its view")
	}
	submit(3, "c")
	if !isClosed(ch) {
		t.Fatal("a pending-set change did not wake the pending watch")
	}
	if isClosed(nodeCh) {
		t.Fatal("a task submit woke the nodes watch")
	}
	var buf bytes.Buffer
	if err := f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	restoredCh := f.watches.watch(topicNodes, f.State().Index())
	if err := f.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if !isClosed(restoredCh) {
		t.Fatal("a restore did not wake every waiter")
	}
}
