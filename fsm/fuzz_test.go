package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"herd/scheduler"
)

func seedCommands(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t MessageType
		v any
	}{
		{MsgSubmitTask, SubmitTaskRequest{ID: "t1", SubmittedAt: now, Spec: testSpec("k")}},
		{MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{ID: "n1", Resources: scheduler.Resources{CPUMillis: 1000}, Slots: 2}}},
		{MsgReserve, ReserveRequest{TaskID: "t1", AttemptID: "a1", Number: 1, NodeID: "n1", SessionGeneration: 1, Now: now}},
		{MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: 3, State: AttemptFailed, Now: now}},
		{MsgNodeDown, NodeDownRequest{NodeID: "n1", Now: now}},
		{MsgCancelTask, CancelTaskRequest{TaskID: "t1", Now: now}},
		{MsgUpsertServer, UpsertServerRequest{Server: Server{ID: "s1", HTTPAddress: "h"}}},
		{MsgNodeConditions, NodeConditionsRequest{NodeID: "n1", SessionGeneration: 1, Conditions: []NodeCondition{{Type: "disk_full", Message: "m"}}, Now: now}},
		{MsgExplain, ExplainRequest{TaskID: "t1", Summary: "0/1 nodes eligible", Now: now}},
		{MsgExplainMany, ExplainManyRequest{Summary: "0/1 nodes eligible", Now: now, TaskIDs: []string{"t1", "t2"}}},
		{MsgSubmitMany, SubmitManyRequest{SubmittedAt: now, Tasks: []SubmitTaskRequest{{ID: "t2", Spec: testSpec("k2")}, {ID: "t3", Spec: testSpec("")}}}},
	} {
		b, err := Encode(c.t, c.v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(EncodeBatch([][]byte{b, b}))
	}
	f.Add([]byte{})
	f.Add([]byte{byte(MsgBatch), CommandForms, 0xff, 0xff})
	f.Add([]byte{0x80 | 77, CommandForms})
}

// FuzzApply: arbitrary bytes as a Raft entry never panic, and whatever
// applies keeps the state's invariants. A prefix of valid commands makes
// the fuzzed entry act on a populated state.
func FuzzApply(f *testing.F) {
	seedCommands(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fm := New(nil)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		prefix := [][]byte{}
		for _, c := range []struct {
			t MessageType
			v any
		}{
			{MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{ID: "n1", Capabilities: map[string][]string{"exec": {"1"}}, Resources: scheduler.Resources{CPUMillis: 1000, MemoryMB: 100}, Slots: 2}}},
			{MsgSubmitTask, SubmitTaskRequest{ID: "t1", SubmittedAt: now, Spec: testSpec("k")}},
		} {
			b, _ := Encode(c.t, c.v)
			prefix = append(prefix, b)
		}
		fm.ApplyBytes(1, EncodeBatch(prefix))
		fm.ApplyBytes(2, data)
		if err := fm.State().CheckInvariants(); err != nil {
			t.Fatalf("entry %q broke an invariant: %v", data, err)
		}
	})
}

// FuzzRestore: arbitrary bytes as a snapshot never panic; what restores
// can be snapshotted again.
func FuzzRestore(f *testing.F) {
	good := New(nil)
	good.ApplyBytes(1, mustEncode(f, MsgSubmitTask, SubmitTaskRequest{ID: "t1", Spec: testSpec("k")}))
	var buf bytes.Buffer
	if err := good.State().Dump(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	// The same state in version 2, its frames in the binary form.
	good.ApplyBytes(2, mustEncode(f, MsgUpsertServer, UpsertServerRequest{Server: Server{ID: "s1", RaftAddress: "r", HTTPAddress: "h", CommandForms: CommandForms}}))
	buf.Reset()
	if err := writeSnapshotAs(&buf, good.State(), snapshotFramed); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"herd-state","version":1,"index":3}` + "\n"))
	f.Add([]byte("{}"))
	// A task whose spec has no shape fields at all.
	f.Add([]byte(`{"format":"herd-state","version":1,"index":3}` + "\n" + `{"table":"tasks","record":{"id":"t","state":"PENDING","spec":{"name":"n"}}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fm := New(nil)
		if err := fm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		if err := fm.State().Dump(io.Discard); err != nil {
			t.Fatalf("restored state cannot be dumped: %v", err)
		}
		// Every restored task has a spec to read (its shape is shared,
		// so a missing one would be a nil pointer).
		tasks, _ := fm.State().Tasks(TaskFilter{})
		for _, tk := range tasks {
			_ = tk.Spec.Priority + len(tk.Spec.Command)
		}
	})
}
