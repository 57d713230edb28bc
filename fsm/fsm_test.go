package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

func testSpec(key string) TaskSpec {
	return TaskSpec{Name: "t", IdempotencyKey: key, TaskShape: &TaskShape{
		Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", TimeoutSeconds: 60, MaxAttempts: 3,
		Submitter: "team-a", Env: map[string]string{"B": "2", "A": "1"},
	}}
}

func mustEncode(t interface {
	Helper()
	Fatal(args ...any)
}, mt MessageType, v any) []byte {
	t.Helper()
	b, err := Encode(mt, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestSubmitIsIdempotentByKey(t *testing.T) {
	f := New(nil)
	r1 := f.ApplyBytes(1, mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "a", SubmittedAt: epoch, Spec: testSpec("k")}))
	r2 := f.ApplyBytes(2, mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "b", SubmittedAt: epoch, Spec: testSpec("k")}))
	s1, ok1 := r1.(*SubmitResult)
	s2, ok2 := r2.(*SubmitResult)
	if !ok1 || !ok2 {
		t.Fatalf("unexpected responses %#v %#v", r1, r2)
	}
	if !s1.Created || s2.Created || s2.Task.ID != "a" {
		t.Fatalf("second submit with the same key must return task a uncreated, got created=%v id=%s", s2.Created, s2.Task.ID)
	}
	tasks, err := f.State().Tasks(TaskFilter{})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("want exactly one task, got %d (%v)", len(tasks), err)
	}
}

func TestInvalidSpecIsRejectedNotPanicked(t *testing.T) {
	f := New(nil)
	spec := testSpec("")
	spec.Command = nil
	resp := f.ApplyBytes(1, mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "a", Spec: spec}))
	var rej *Rejection
	if err, ok := resp.(error); !ok || !errors.As(err, &rej) || rej.Code != RejectInvalid {
		t.Fatalf("want invalid rejection, got %#v", resp)
	}
}

func TestUnknownAndMalformedEntries(t *testing.T) {
	f := New(nil)
	if err, ok := f.ApplyBytes(1, []byte{99, CommandForms, '{', '}'}).(error); !ok || !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("unknown type: want ErrUnknownCommand, got %v", err)
	}
	if resp := f.ApplyBytes(2, []byte{99 | byte(IgnoreUnknownFlag), CommandForms}); resp != nil {
		t.Fatalf("ignorable unknown type: want nil, got %#v", resp)
	}
	for i, data := range [][]byte{nil, {5}, {5, 9, '{'}, {byte(MsgSubmitTask), CommandForms, '['}, {byte(MsgBatch), CommandForms, 0xff}} {
		if err, ok := f.ApplyBytes(uint64(3+i), data).(error); !ok || !errors.Is(err, ErrMalformedCommand) {
			t.Fatalf("entry %d %q: want ErrMalformedCommand, got %#v", i, data, f.ApplyBytes(uint64(3+i), data))
		}
	}
	if f.Index() != 7 {
		t.Fatalf("refused entries still advance the applied index: want 7, got %d", f.Index())
	}
}

func TestBatchAppliesEachCommandWithItsOwnResult(t *testing.T) {
	f := New(nil)
	bad := testSpec("")
	bad.Priority = 1000
	batch := EncodeBatch([][]byte{
		mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "a", SubmittedAt: epoch, Spec: testSpec("k1")}),
		mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "b", SubmittedAt: epoch, Spec: bad}),
		mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "c", SubmittedAt: epoch, Spec: testSpec("k1")}),
		mustEncode(t, MsgNoop, NoopRequest{}),
	})
	res, ok := f.ApplyBytes(1, batch).(BatchResult)
	if !ok || len(res) != 4 {
		t.Fatalf("want 4 results, got %#v", res)
	}
	if r, ok := res[0].(*SubmitResult); !ok || !r.Created {
		t.Fatalf("result 0: %#v", res[0])
	}
	if _, ok := res[1].(*Rejection); !ok {
		t.Fatalf("result 1 should be a rejection: %#v", res[1])
	}
	if r, ok := res[2].(*SubmitResult); !ok || r.Created || r.Task.ID != "a" {
		t.Fatalf("result 2 should be the existing task a: %#v", res[2])
	}
}

// randomCommand builds one of the commands this FSM knows, with ids drawn
// from small pools so that updates and collisions happen often.
func randomCommand(t testing.TB, rng *rand.Rand, i int) []byte {
	now := epoch.Add(time.Duration(i) * time.Second)
	switch rng.IntN(5) {
	case 0:
		return mustEncode(t, MsgUpsertServer, UpsertServerRequest{Server: Server{ID: fmt.Sprintf("s%d", rng.IntN(5)), RaftAddress: "r", HTTPAddress: fmt.Sprintf("h%d", i)}})
	case 1:
		return mustEncode(t, MsgRemoveServer, RemoveServerRequest{ID: fmt.Sprintf("s%d", rng.IntN(5))})
	case 2:
		return mustEncode(t, MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{
			ID: fmt.Sprintf("n%d", rng.IntN(20)), Labels: map[string]string{"zone": fmt.Sprint(rng.IntN(3))},
			Capabilities: map[string][]string{"exec": {"1"}},
			Resources:    scheduler.Resources{CPUMillis: int64(rng.IntN(8000)), MemoryMB: 4096}, Slots: rng.IntN(8),
		}})
	case 3:
		return EncodeBatch([][]byte{randomCommand(t, rng, i), randomCommand(t, rng, i)})
	default:
		spec := testSpec(fmt.Sprintf("k%d", rng.IntN(300)))
		spec.Priority = rng.IntN(101)
		return mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprintf("t%06d", i), SubmittedAt: now, Spec: spec})
	}
}

func TestSnapshotRestoreRoundTripAfterRandomCommands(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := New(nil)
	for i := 1; i <= 5000; i++ {
		f.ApplyBytes(uint64(i), randomCommand(t, rng, i))
	}
	var buf bytes.Buffer
	if err := f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if restored.Index() != f.Index() {
		t.Fatalf("index: want %d, got %d", f.Index(), restored.Index())
	}
	var again bytes.Buffer
	if err := restored.State().Dump(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("restored state differs from the original")
	}
	// The restored FSM keeps working identically: apply the same tail to both.
	for i := 5001; i <= 5500; i++ {
		cmd := randomCommand(t, rng, i)
		f.ApplyBytes(uint64(i), cmd)
		restored.ApplyBytes(uint64(i), cmd)
	}
	h1, _ := f.State().Hash()
	h2, _ := restored.State().Hash()
	if h1 != h2 {
		t.Fatalf("states diverged after applying the same tail: %s vs %s", h1, h2)
	}
	counts, err := f.State().CountTasks()
	if err != nil || counts[TaskPending] == 0 {
		t.Fatalf("the random sequence should have created tasks: %v %v", counts, err)
	}
}

func TestApplyIsDeterministic(t *testing.T) {
	var hashes []string
	for run := 0; run < 3; run++ {
		rng := rand.New(rand.NewPCG(7, 7))
		f := New(nil)
		for i := 1; i <= 2000; i++ {
			f.ApplyBytes(uint64(i), randomCommand(t, rng, i))
		}
		h, err := f.State().Hash()
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("same commands gave different states: %v", hashes)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	for _, in := range []string{"", "{}", `{"format":"herd-state","version":1}` + "\n" + `{"table":"nope","record":{}}`, `{"format":"herd-state","version":1}` + "\n" + `{"table":"tasks","record":{}}`} {
		f := New(nil)
		if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(in)))); err == nil {
			t.Fatalf("restore of %q should fail", in)
		}
	}
}

// writeSnapshot frames records by hand; the bytes are what a JSON encoder
// of snapshotRecord writes (the snapshot format, and every state hash,
// stay as they were), also for text JSON escapes.
func TestSnapshotFramingIsTheJSONEncoders(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := New(nil)
	for i := 1; i <= 2000; i++ {
		f.ApplyBytes(uint64(i), randomCommand(t, rng, i))
	}
	odd := testSpec("odd")
	odd.Name = "<script>&\"quoted\"\\ é \u2028 tab\t"
	odd.Env = map[string]string{"A<B": "x&y"}
	f.ApplyBytes(2001, mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: "t-odd", Spec: odd}))
	var got bytes.Buffer
	if err := writeSnapshotAs(&got, f.State(), snapshotJSON); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	st := f.State()
	if err := enc.Encode(snapshotHeader{Format: snapshotFormat, Version: snapshotJSON, Index: st.index}); err != nil {
		t.Fatal(err)
	}
	write := func(table string, rec any) bool {
		body, err := json.Marshal(rec)
		if err == nil {
			err = enc.Encode(snapshotRecord{Table: table, Record: body})
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	}
	st.st.servers.Ascend(func(v *Server) bool { return write(tableServers, v) })
	st.st.nodes.Ascend(func(v *Node) bool { return write(tableNodes, v) })
	st.st.tasks.Ascend(func(v *Task) bool { return write(tableTasks, v) })
	st.st.attempts.Ascend(func(v *Attempt) bool { return write(tableAttempts, v) })
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("snapshot bytes differ from the JSON encoder's (%d vs %d bytes)", got.Len(), want.Len())
	}
}

// Restore reads records framed otherwise too (spaces, CRLF, blank
// lines, no final newline, keys in another order) and a record longer
// than its read buffer, into the same state.
func TestRestoreReadsOtherFramings(t *testing.T) {
	f := New(nil)
	for i := 1; i <= 3; i++ {
		f.ApplyBytes(uint64(i), mustEncode(t, MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprint("t", i), Spec: testSpec(fmt.Sprint("k", i))}))
	}
	var buf bytes.Buffer
	if err := writeSnapshotAs(&buf, f.State(), snapshotJSON); err != nil {
		t.Fatal(err)
	}
	// t2 gets an explanation longer than the reader's 256 KiB buffer.
	longExplain := strings.Repeat("x", 600<<10)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	var records []snapshotRecord
	for _, l := range lines[1:] {
		var rec snapshotRecord
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(rec.Record), `"id":"t2"`) {
			var task Task
			if err := json.Unmarshal(rec.Record, &task); err != nil {
				t.Fatal(err)
			}
			task.setLastExplain(longExplain)
			rec.Record, _ = json.Marshal(&task)
		}
		records = append(records, rec)
	}
	canonical, reframed := []string{lines[0]}, []string{lines[0]}
	for i, rec := range records {
		line, _ := json.Marshal(rec)
		canonical = append(canonical, string(line))
		if i%2 == 0 {
			reframed = append(reframed, fmt.Sprintf(` { "record" : %s , "table" : %q } `, rec.Record, rec.Table), "")
		} else {
			reframed = append(reframed, string(line))
		}
	}
	restore := func(text string) string {
		t.Helper()
		g := New(nil)
		if err := g.Restore(io.NopCloser(strings.NewReader(text))); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if task, err := g.State().Task("t2"); err != nil || task.LastExplain() != longExplain {
			t.Fatalf("the long record was not restored whole: %v", err)
		}
		h, _ := g.State().Hash()
		return h
	}
	want := restore(strings.Join(canonical, "\n") + "\n")
	for _, text := range []string{strings.Join(reframed, "\r\n"), strings.Join(reframed, "\n")} {
		if restore(text) != want {
			t.Fatal("restored state differs")
		}
	}
}

// Every command number up to the newest has an entry with its own name
// and one form, a binary command refuses a payload of another type, and
// a command in forms this build does not read is refused.
func TestCommandTableIsComplete(t *testing.T) {
	names := map[string]MessageType{}
	for typ := MsgBatch; typ <= MsgSubmitMany; typ++ {
		c, ok := commandOf(typ)
		if !ok {
			t.Fatalf("command %d has no entry", typ)
		}
		if prev, dup := names[c.name]; dup {
			t.Fatalf("commands %d and %d are both named %q", prev, typ, c.name)
		}
		names[c.name] = typ
		if typ != MsgBatch && c.apply == nil {
			t.Fatalf("command %s has no apply", c.name)
		}
		if typ.String() != c.name || (typ|IgnoreUnknownFlag).String() != c.name {
			t.Fatalf("command %d is called %q", typ, typ.String())
		}
	}
	if _, ok := commandOf(MsgSubmitMany + 1); ok {
		t.Fatal("a command past the newest has an entry")
	}
	if _, err := Encode(MsgReserve, ExplainRequest{TaskID: "t"}); err == nil {
		t.Fatal("a reservation encoded from an explanation")
	}
	enc := mustEncode(t, MsgCancelTask, CancelTaskRequest{TaskID: "t"})
	enc[1] = CommandForms + 1
	if err, ok := New(nil).ApplyBytes(1, enc).(error); !ok || !errors.Is(err, ErrMalformedCommand) || !strings.Contains(err.Error(), fmt.Sprintf("command forms %d", CommandForms+1)) {
		t.Fatalf("a command in newer forms: %v", err)
	}
	// Every command but those later forms added is written in the first
	// release's forms, which servers of that release read during a
	// rolling upgrade.
	if enc := mustEncode(t, MsgCancelTask, CancelTaskRequest{TaskID: "t"}); enc[1] != baseForms {
		t.Fatalf("a cancellation written in forms %d", enc[1])
	}
	if enc := mustEncode(t, MsgAttemptEnd, AttemptEndRequest{AttemptID: "a", State: AttemptSucceeded}); enc[1] != baseForms {
		t.Fatalf("an attempt's end written in forms %d", enc[1])
	}
	if enc := mustEncode(t, MsgAttemptRun, AttemptRunRequest{End: AttemptEndRequest{AttemptID: "a", State: AttemptSucceeded}}); enc[1] != FormsAttemptRun {
		t.Fatalf("an attempt's run written in forms %d", enc[1])
	}
	if enc := mustEncode(t, MsgExplainMany, ExplainManyRequest{Summary: "s", TaskIDs: []string{"t"}}); enc[1] != FormsExplainMany {
		t.Fatalf("an explanation of many written in forms %d", enc[1])
	}
	if enc := mustEncode(t, MsgSubmitMany, SubmitManyRequest{Tasks: []SubmitTaskRequest{{ID: "t", Spec: testSpec("")}}}); enc[1] != FormsSubmitMany {
		t.Fatalf("a submission of many written in forms %d", enc[1])
	}
}
