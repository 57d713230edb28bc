package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// A submit-many command leaves the state exactly as a submit-task per
// task in one entry does (what a leader writes while a server of older
// forms remains), and answers the same results: tasks of two shapes, one
// whose idempotency key matches an earlier task, one with an id taken
// and one refused as invalid, which leaves the others submitted.
func TestSubmitManyIsASubmitPerTask(t *testing.T) {
	other := testSpec("")
	other.Priority, other.Command = 70, []string{"sleep", "1"}
	invalid := testSpec("")
	invalid.MaxAttempts = -1
	tasks := []SubmitTaskRequest{
		{ID: "t1", Spec: testSpec("")},
		{ID: "t2", Spec: other},
		{ID: "t3", Spec: testSpec("key-1")}, // the earlier task's key
		{ID: "t4", Spec: invalid},
		{ID: "t0", Spec: testSpec("")}, // an id taken
		{ID: "t5", Spec: testSpec("key-2")},
		{ID: "t6", Spec: other},
	}
	for i := range tasks {
		tasks[i].SubmittedAt = epoch
	}
	setup := func() *harness {
		h := newHarness(t)
		h.apply(MsgSubmitTask, SubmitTaskRequest{ID: "t0", SubmittedAt: epoch, Spec: testSpec("key-1")})
		return h
	}
	per := setup()
	var cmds [][]byte
	for _, r := range tasks {
		cmds = append(cmds, EncodeSubmitTask(r))
	}
	want := per.applyBatch(cmds...)
	many := setup()
	got, ok := many.apply(MsgSubmitMany, SubmitManyRequest{SubmittedAt: epoch, Tasks: tasks}).(BatchResult)
	if !ok || len(got) != len(want) {
		t.Fatalf("submit-many answered %#v", got)
	}
	for i := range want {
		if describe(got[i]) != describe(want[i]) {
			t.Fatalf("task %d: submit-many answered %s, a submit-task %s", i, describe(got[i]), describe(want[i]))
		}
	}
	requireSameState(t, per, many, "per task", "many")
	// The tasks of one shape share it, as submissions one by one do.
	a, _ := many.f.State().Task("t2")
	b, _ := many.f.State().Task("t6")
	if a.Spec.TaskShape != b.Spec.TaskShape {
		t.Fatal("two tasks of one shape hold two copies of it")
	}
}

// describe is a result as the test compares it: a refusal's code, or the
// task and whether it was created.
func describe(v any) string {
	var rej *Rejection
	switch r := v.(type) {
	case *SubmitResult:
		return fmt.Sprintf("%s created %v", r.Task.ID, r.Created)
	case error:
		if errors.As(r, &rej) {
			return "refused " + rej.Code
		}
		return "error " + r.Error()
	}
	return fmt.Sprintf("%T", v)
}

// A submit-many writes each distinct shape once, round-trips through its
// binary form, and refuses a truncated payload or a shape number past
// its shapes.
func TestSubmitManyCodec(t *testing.T) {
	other := testSpec("")
	other.Priority = 70
	r := SubmitManyRequest{SubmittedAt: epoch}
	var batch [][]byte
	for i := range 50 {
		spec := testSpec(fmt.Sprint("key-", i))
		if i%10 == 0 {
			spec = other
		}
		spec.Name = fmt.Sprint("task-", i)
		r.Tasks = append(r.Tasks, SubmitTaskRequest{ID: fmt.Sprintf("t%02d", i), SubmittedAt: epoch, Spec: spec})
		batch = append(batch, EncodeSubmitTask(r.Tasks[i]))
	}
	enc := EncodeSubmitMany(r)
	if one := len(EncodeBatch(batch)); len(enc)*3 > one {
		t.Fatalf("submit-many takes %d bytes, a batch of submissions %d: the shapes are not written once", len(enc), one)
	}
	h, payload, err := decodeHeader(enc)
	if err != nil || h.typ != MsgSubmitMany || h.version != FormsSubmitMany {
		t.Fatalf("header %+v, %v", h, err)
	}
	got, err := decodeSubmitMany(payload)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range r.Tasks {
		g := got.Tasks[i]
		if g.ID != want.ID || g.Spec.Name != want.Spec.Name || g.Spec.IdempotencyKey != want.Spec.IdempotencyKey || !g.SubmittedAt.Equal(epoch) ||
			!bytes.Equal(appendShape(nil, g.Spec.TaskShape), appendShape(nil, want.Spec.TaskShape)) {
			t.Fatalf("task %d decoded as %+v, want %+v", i, g, want)
		}
	}
	if _, err := decodeSubmitMany(payload[:len(payload)-2]); err == nil {
		t.Fatal("a truncated submit-many decoded")
	}
	bad := bytes.Clone(payload)
	bad[len(bad)-1] = 9 // the last task's shape number: there are two shapes
	if _, err := decodeSubmitMany(bad); err == nil {
		t.Fatal("a shape number past the shapes decoded")
	}
}
