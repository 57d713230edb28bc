package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

// framedTestState is a small state with servers reading forms 4, a node,
// tasks of two shapes (one over the reader's in-place frame size), a
// finished attempt, an explained task and one of version 1's odd strings.
func framedTestState(t *testing.T) *FSM {
	t.Helper()
	f := New(nil)
	index := uint64(0)
	apply := func(typ MessageType, payload any) any {
		t.Helper()
		index++
		res := f.ApplyBytes(index, mustEncode(t, typ, payload))
		if err, ok := res.(error); ok {
			t.Fatalf("entry %d: %v", index, err)
		}
		return res
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		apply(MsgUpsertServer, UpsertServerRequest{Server: Server{ID: id, RaftAddress: "r-" + id, HTTPAddress: "h-" + id, CommandForms: CommandForms}})
	}
	apply(MsgRegisterNode, RegisterNodeRequest{Now: epoch, Node: Node{ID: "n1", Capabilities: map[string][]string{"exec": {"1"}},
		Resources: scheduler.Resources{CPUMillis: 8000, MemoryMB: 8192}, Slots: 4}})
	big := testSpec("big")
	big.Env = map[string]string{"BIG": strings.Repeat("b", 3*maxPeekedFrame)}
	apply(MsgSubmitTask, SubmitTaskRequest{ID: "t-big", SubmittedAt: epoch, Spec: big})
	for i := range 3 {
		apply(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprint("t", i), SubmittedAt: epoch, Spec: testSpec(fmt.Sprint("k", i))})
	}
	odd := testSpec("odd")
	odd.Name = "<script>&\"quoted\"\\ é \u2028 tab\t\n"
	apply(MsgSubmitTask, SubmitTaskRequest{ID: "t-odd", SubmittedAt: epoch, Spec: odd})
	res := apply(MsgReserve, ReserveRequest{TaskID: "t0", AttemptID: "a0", Number: 1, NodeID: "n1", SessionGeneration: 1, Score: 1, Now: epoch, HeartbeatTTL: time.Hour})
	a := res.(*ReserveResult).Attempt
	apply(MsgAttemptRun, AttemptRunRequest{StartedAt: epoch, End: AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptFailed, ExitCode: 3,
		OutputTail: "line\nline", Error: "exit 3", Now: epoch.Add(time.Second), RetryAt: epoch.Add(time.Minute)}})
	apply(MsgExplain, ExplainRequest{TaskID: "t1", Summary: strings.Repeat("why ", maxPeekedFrame/2), Now: epoch})
	return f
}

// A framed snapshot restores the state it was written from, field for
// field, and frames records longer than the reader's in-place size.
func TestFramedSnapshotRoundTrip(t *testing.T) {
	f := framedTestState(t)
	if v := f.State().snapshotVersion(); v != snapshotFramed {
		t.Fatalf("a cluster whose servers all read forms %d writes snapshot version %d", CommandForms, v)
	}
	var framed, want bytes.Buffer
	if err := writeSnapshot(&framed, f.State()); err != nil {
		t.Fatal(err)
	}
	if err := f.State().Dump(&want); err != nil {
		t.Fatal(err)
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(framed.Bytes()))); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := restored.State().Dump(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Bytes(), got.Bytes()) {
		t.Fatalf("the restored state differs:\nwant %s\ngot  %s", want.String(), got.String())
	}
	if restored.Index() != f.Index() {
		t.Fatalf("restored index %d, want %d", restored.Index(), f.Index())
	}
	// The large shape is written once and shared by the tasks that have
	// it on both sides.
	if n := bytes.Count(framed.Bytes(), []byte(strings.Repeat("b", 3*maxPeekedFrame))); n != 1 {
		t.Fatalf("the large environment is written %d times, want once", n)
	}
	t0, _ := restored.State().Task("t0")
	t2, _ := restored.State().Task("t2")
	if t0.Spec.TaskShape != t2.Spec.TaskShape {
		t.Fatal("tasks of one shape restore with a shape each")
	}
}

// Until every server reads forms 4 (a rolling upgrade under way, or no
// server recorded), snapshots stay in version 1, which older builds read.
func TestSnapshotVersionWaitsForEveryServer(t *testing.T) {
	f := New(nil)
	if v := f.State().snapshotVersion(); v != snapshotJSON {
		t.Fatalf("a state without servers writes version %d", v)
	}
	f.ApplyBytes(1, mustEncode(t, MsgUpsertServer, UpsertServerRequest{Server: Server{ID: "s1", RaftAddress: "r1", HTTPAddress: "h1", CommandForms: FormsFramedSnapshot}}))
	f.ApplyBytes(2, mustEncode(t, MsgUpsertServer, UpsertServerRequest{Server: Server{ID: "s2", RaftAddress: "r2", HTTPAddress: "h2", CommandForms: FormsFramedSnapshot - 1}}))
	if v := f.State().snapshotVersion(); v != snapshotJSON {
		t.Fatalf("with a server reading forms %d, version %d", FormsFramedSnapshot-1, v)
	}
	var sink memorySink
	snap, _ := f.Snapshot()
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sink.Bytes(), []byte(`{"format":"herd-state","version":1,`)) {
		t.Fatalf("persisted during the upgrade: %.60q", sink.String())
	}
	f.ApplyBytes(3, mustEncode(t, MsgUpsertServer, UpsertServerRequest{Server: Server{ID: "s2", RaftAddress: "r2", HTTPAddress: "h2", CommandForms: FormsFramedSnapshot}}))
	sink.Reset()
	snap, _ = f.Snapshot()
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(sink.Bytes(), []byte(`{"format":"herd-state","version":2,`)) {
		t.Fatalf("persisted after the upgrade: %.60q", sink.String())
	}
}

// memorySink is a raft.SnapshotSink in memory.
type memorySink struct{ bytes.Buffer }

func (*memorySink) ID() string    { return "test" }
func (*memorySink) Cancel() error { return nil }
func (*memorySink) Close() error  { return nil }

// A damaged framed snapshot is refused with an error, never read as
// another state: cut anywhere, with bytes after its end, a task naming a
// shape not written before it, an unknown frame, tasks in JSON.
func TestFramedSnapshotRefusesDamage(t *testing.T) {
	f := framedTestState(t)
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, f.State()); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	header := bytes.IndexByte(whole, '\n') + 1
	restore := func(data []byte) error {
		return New(nil).Restore(io.NopCloser(bytes.NewReader(data)))
	}
	for cut := header; cut < len(whole); cut += 1 + cut/64 {
		if err := restore(whole[:cut]); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes was restored", cut, len(whole))
		}
	}
	if err := restore(append(bytes.Clone(whole), frameEnd)); err == nil || !strings.Contains(err.Error(), "after the snapshot's end") {
		t.Fatalf("bytes after the end: %v", err)
	}
	head := whole[:header]
	frame := func(kind byte, payload []byte) []byte {
		out := append([]byte{kind}, binary.AppendUvarint(nil, uint64(len(payload)))...)
		return append(out, payload...)
	}
	end := func(n uint64) []byte { return frame(frameEnd, binary.AppendUvarint(nil, n)) }
	task := appendTaskForm(nil, &Task{ID: "t-x", State: TaskPending, CreateIndex: 1, ModifyIndex: 1, submitted: "submitted"}, 7)
	taskJSON, _ := json.Marshal((&Task{ID: "t-x"}).toJSON())
	for name, c := range map[string]struct {
		body []byte
		want string
	}{
		"shape not written":    {append(frame(frameTask, task), end(1)...), "has shape 7, and 0 were written"},
		"unknown frame":        {append(frame(9, nil), end(1)...), "unknown frame kind 9"},
		"tasks in JSON":        {append(frame(frameRecord, append(appendString(nil, tableTasks), taskJSON...)), end(1)...), "binary form"},
		"end miscounts":        {append(frame(frameShape, appendShape(nil, testSpec("k").TaskShape)), end(2)...), "does not count"},
		"frame longer than it": {append([]byte{frameTask}, binary.AppendUvarint(nil, 1<<40)...), "unexpected EOF"},
	} {
		err := restore(append(bytes.Clone(head), c.body...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
