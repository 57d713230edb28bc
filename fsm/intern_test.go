package fsm

import (
	"bytes"
	"fmt"
	"io"
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
		if a.LastExplain != "0/3 nodes eligible: 3 not active" || a.LastExplain != b.LastExplain {
			t.Fatalf("%s: summaries %q and %q", label, a.LastExplain, b.LastExplain)
		}
		ea, eb := a.Timeline[len(a.Timeline)-1], b.Timeline[len(b.Timeline)-1]
		if ea.Kind != "waiting" || ea.Message != a.LastExplain || eb.Message != b.LastExplain {
			t.Fatalf("%s: last events %+v and %+v", label, ea, eb)
		}
		if unsafe.StringData(a.LastExplain) != unsafe.StringData(b.LastExplain) || unsafe.StringData(ea.Message) != unsafe.StringData(eb.Message) {
			t.Fatalf("%s: the two tasks keep separate copies of one summary", label)
		}
	}
	shared("applied", f.State())
	var buf bytes.Buffer
	if err := f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	shared("restored", restored.State())
}
