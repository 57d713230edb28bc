package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// Tasks waiting for the same reason share the text of it, as applied and
// after a restore: a backlog of 100,000 explained tasks kept 100,000
// copies of one summary.
func TestWaitingTasksShareTheirSummary(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(nil)
	index := uint64(0)
	apply := func(msg MessageType, req any) {
		t.Helper()
		index++
		if rej, ok := f.ApplyBytes(index, mustEncode(t, msg, req)).(*Rejection); ok {
			t.Fatalf("rejected: %v", rej)
		}
	}
	for i := range 2 {
		apply(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprint("t", i), SubmittedAt: now, Spec: testSpec(fmt.Sprint("k", i))})
		// Each request decodes into its own string.
		apply(MsgExplain, ExplainRequest{TaskID: fmt.Sprint("t", i), Summary: "0/3 nodes eligible: 3 not active", Now: now})
	}
	shared := func(label string, st *State) {
		t.Helper()
		a, _ := st.Task("t0")
		b, _ := st.Task("t1")
		if a.LastExplain() != "0/3 nodes eligible: 3 not active" || a.LastExplain() != b.LastExplain() {
			t.Fatalf("%s: summaries %q and %q", label, a.LastExplain(), b.LastExplain())
		}
		ea, _ := a.LastEvent()
		eb, _ := b.LastEvent()
		if ea.Kind != EventWaiting || ea.Message != a.LastExplain() || eb.Message != b.LastExplain() {
			t.Fatalf("%s: last events %+v and %+v", label, ea, eb)
		}
		if unsafe.StringData(a.LastExplain()) != unsafe.StringData(b.LastExplain()) || unsafe.StringData(ea.Message) != unsafe.StringData(eb.Message) {
			t.Fatalf("%s: the two tasks keep separate copies of one summary", label)
		}
	}
	shared("applied", f.State())
	shared("restored", restoredCopy(t, f).State())
}

// restoredCopy is a fresh FSM restored from f's snapshot.
func restoredCopy(t *testing.T, f *FSM) *FSM {
	t.Helper()
	var buf bytes.Buffer
	if err := f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	return restored
}

// Tasks submitted alike share one shape, whichever form carried them and
// after a restore; a task whose shape differs in any field keeps its own,
// with its own values.
func TestTasksSubmittedAlikeShareTheirShape(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	variants := map[string]func(*TaskShape){
		"priority":   func(s *TaskShape) { s.Priority++ },
		"command":    func(s *TaskShape) { s.Command = []string{"true", "x"} },
		"env":        func(s *TaskShape) { s.Env = map[string]string{"A": "1", "B": "3"} },
		"capability": func(s *TaskShape) { s.Capability = "docker" },
		"version":    func(s *TaskShape) { s.CapabilityVersion = "2" },
		"required":   func(s *TaskShape) { s.RequiredLabels = map[string]string{"zone": "a"} },
		"preferred":  func(s *TaskShape) { s.PreferredLabels = map[string]string{"zone": "a"} },
		"resources":  func(s *TaskShape) { s.Resources.DiskMB = 1 },
		"timeout":    func(s *TaskShape) { s.TimeoutSeconds++ },
		"attempts":   func(s *TaskShape) { s.MaxAttempts++ },
		"submitter":  func(s *TaskShape) { s.Submitter = "team-b" },
	}
	f := New(nil)
	index := uint64(0)
	submit := func(id string, spec TaskSpec, encode func(MessageType, any) ([]byte, error)) {
		t.Helper()
		enc, err := encode(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: now, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		index++
		if rej, ok := f.ApplyBytes(index, enc).(*Rejection); ok {
			t.Fatalf("%s rejected: %v", id, rej)
		}
	}
	submit("base", testSpec("k-base"), Encode)
	submit("alike", testSpec("k-alike"), Encode)
	// An empty map encodes as none.
	emptyLabels := testSpec("k-empty")
	emptyLabels.RequiredLabels = map[string]string{}
	submit("empty", emptyLabels, Encode)
	for name, change := range variants {
		spec := testSpec("k-" + name)
		shape := *spec.TaskShape
		change(&shape)
		spec.TaskShape = &shape
		submit(name, spec, Encode)
	}
	check := func(label string, st *State) {
		t.Helper()
		base, _ := st.Task("base")
		for _, id := range []string{"alike", "empty"} {
			if got, _ := st.Task(id); got.Spec.TaskShape != base.Spec.TaskShape {
				t.Errorf("%s: task %q keeps its own copy of the base shape", label, id)
			}
		}
		for name, change := range variants {
			got, _ := st.Task(name)
			want := *testSpec("").TaskShape
			change(&want)
			if got.Spec.TaskShape == base.Spec.TaskShape || !reflect.DeepEqual(*got.Spec.TaskShape, want) {
				t.Errorf("%s: task changed in %s has shape %+v, want its own %+v", label, name, *got.Spec.TaskShape, want)
			}
		}
	}
	check("applied", f.State())
	check("restored", restoredCopy(t, f).State())
}

// A replica holds one task record per task: keep it in the 112-byte size
// class (its shape is shared, its state a byte, what a pending task does
// not have in a second record that stays in the 80-byte class).
func TestTaskRecordStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(Task{}); size > 112 {
		t.Fatalf("Task is %d bytes, want at most 112", size)
	}
	if size := unsafe.Sizeof(taskMore{}); size > 80 {
		t.Fatalf("taskMore is %d bytes, want at most 80", size)
	}
}

// A task state reads and writes as its name, in records and as map keys,
// and an unknown name is refused rather than read as no state.
func TestTaskStateReadsAndWritesItsName(t *testing.T) {
	for s := TaskPending; s <= TaskCancelled; s++ {
		b, err := json.Marshal(map[TaskState]Task{s: {State: s}})
		if err != nil {
			t.Fatal(err)
		}
		name := s.String()
		if !strings.Contains(string(b), `{"`+name+`":{"id":"","state":"`+name+`"`) {
			t.Fatalf("%d encodes as %s", s, b)
		}
		var back map[TaskState]Task
		if err := json.Unmarshal(b, &back); err != nil || back[s].State != s {
			t.Fatalf("%s decodes as %v (%v)", b, back, err)
		}
		if p, ok := ParseTaskState(name); !ok || p != s || !s.Valid() {
			t.Fatalf("ParseTaskState(%q) = %v, %v", name, p, ok)
		}
	}
	var tk Task
	if err := json.Unmarshal([]byte(`{"id":"t","state":"DONE"}`), &tk); err == nil {
		t.Fatalf("an unknown state was read as %v", tk.State)
	}
	if TaskState(0).Valid() || TaskState(99).Valid() {
		t.Fatal("no state and an unknown number count as valid")
	}
}
