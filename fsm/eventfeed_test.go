package fsm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"herd/scheduler"
)

// lifecycle drives tasks through reservations, starts, failures and
// successes, and nodes through registrations and drains, so that every
// topic of the stream gets events, several at some indexes.
func lifecycle(t *testing.T, h *harness, tasks int) {
	t.Helper()
	res := scheduler.Resources{CPUMillis: 100, MemoryMB: 16}
	n1 := h.register("n1", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 8)
	h.register("n2", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 8)
	for i := range tasks {
		id := fmt.Sprintf("t%03d", i)
		h.submit(id, res, 2)
		att := "a-" + id
		h.applyBatch(reserveCmd(t, id, att, "n1", 1, n1.SessionGeneration))
		lease := leaseOf(t, h, att)
		start := epoch.Add(time.Duration(2*i) * time.Second) // one after the other, as a node runs them
		h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: att, LeaseVersion: lease, Now: start})
		state := AttemptSucceeded
		if i%3 == 0 {
			state = AttemptFailed
		}
		h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: att, LeaseVersion: lease, State: state, ExitCode: 1, Now: start.Add(time.Second)})
	}
	h.apply(MsgNodeDrain, NodeDrainRequest{NodeID: "n2", Enable: true, Now: epoch})
}

// streamOf reads the whole stream of f, limit events at a time.
func streamOf(t *testing.T, f *FSM, from EventPosition, limit int) []StreamEvent {
	t.Helper()
	var out []StreamEvent
	for {
		evs, next, _ := f.State().EventsFrom(from, limit, nil)
		if len(evs) == 0 {
			return out
		}
		if all, _, _ := f.State().EventsFrom(next, 0, nil); len(all) > 0 && all[0].Offset != 0 {
			t.Fatalf("a page of %d ends inside index %d", limit, next.Index)
		}
		out = append(out, evs...)
		from = next
	}
}

func TestEventStreamHoldsEveryRecordEventInApplyOrder(t *testing.T) {
	h := newHarness(t)
	lifecycle(t, h, 12)
	all := streamOf(t, h.f, EventPosition{}, 0)
	if len(all) == 0 {
		t.Fatal("the stream is empty")
	}
	// Positions strictly increase, offsets count from 0 within an index.
	for i := 1; i < len(all); i++ {
		p, q := all[i-1].position(), all[i].position()
		if !p.less(q) {
			t.Fatalf("event %d at %v is not after %v", i, q, p)
		}
		if q.Index != p.Index && q.Offset != 0 || q.Index == p.Index && q.Offset != p.Offset+1 {
			t.Fatalf("offsets at %v after %v are not consecutive", q, p)
		}
	}
	// Per record, the stream holds exactly the record's events, in order.
	byKey := map[string][]TimelineEvent{}
	lastState := map[string]string{}
	for _, e := range all {
		lastState[e.Key] = e.State
		key := e.Topic.String() + "/" + e.Key
		byKey[key] = append(byKey[key], e.Event)
	}
	st := h.f.State()
	tasks, _ := st.Tasks(TaskFilter{})
	for _, task := range tasks {
		if got := byKey["task/"+task.ID]; !reflect.DeepEqual(got, task.Timeline()) {
			t.Fatalf("task %s: stream %v, timeline %v", task.ID, got, task.Timeline())
		}
		if s := lastState[task.ID]; s != task.State.String() {
			t.Fatalf("task %s is %s, its last event says %s", task.ID, task.State, s)
		}
	}
	nodes, _ := st.Nodes()
	for _, n := range nodes {
		if got := byKey["node/"+n.ID]; !reflect.DeepEqual(got, n.Events) {
			t.Fatalf("node %s: stream %v, events %v", n.ID, got, n.Events)
		}
	}
	if len(byKey) != len(tasks)+len(nodes) {
		t.Fatalf("the stream names %d records, the state holds %d", len(byKey), len(tasks)+len(nodes))
	}
	// Read a few at a time, from any position, the stream is the same.
	for _, limit := range []int{1, 2, 7} {
		if got := streamOf(t, h.f, EventPosition{}, limit); !reflect.DeepEqual(got, all) {
			t.Fatalf("read %d at a time, the stream differs", limit)
		}
	}
	mid := all[len(all)/2]
	if got := streamOf(t, h.f, mid.position(), 3); !reflect.DeepEqual(got, all[len(all)/2:]) {
		t.Fatalf("resumed at %v, the stream differs", mid.position())
	}
}

func TestEventStreamIsTheSameOnEveryReplicaAndAfterARestore(t *testing.T) {
	h := newHarness(t)
	lifecycle(t, h, 6)
	var snap bytes.Buffer
	if err := h.f.State().Dump(&snap); err != nil {
		t.Fatal(err)
	}
	at := h.f.Index()
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if _, _, complete := restored.State().EventsFrom(EventPosition{}, 0, nil); complete != at+1 {
		t.Fatalf("a restored replica holds events from %d, want %d", complete, at+1)
	}
	// Both go on with the same entries (replayed to a second replica too).
	rng := rand.New(rand.NewPCG(3, 4))
	var log [][]byte
	for i := 1; i <= 400; i++ {
		log = append(log, randomCommand(t, rng, i))
	}
	for i, cmd := range log {
		h.f.ApplyBytes(at+uint64(i)+1, cmd)
		restored.ApplyBytes(at+uint64(i)+1, cmd)
	}
	after := EventPosition{Index: at + 1}
	want := streamOf(t, h.f, after, 0)
	if len(want) == 0 {
		t.Fatal("the random entries made no events")
	}
	if got := streamOf(t, restored, after, 0); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored replica streams other events")
	}
	// A replica that applied everything from the start streams the same.
	other := newHarness(t)
	lifecycle(t, other, 6)
	for i, cmd := range log {
		other.f.ApplyBytes(at+uint64(i)+1, cmd)
	}
	if a, b := streamOf(t, other.f, EventPosition{}, 0), streamOf(t, h.f, EventPosition{}, 0); !reflect.DeepEqual(a, b) {
		t.Fatal("two replicas applying the same entries stream different events")
	}
}

func TestEventStreamTrimsWholeIndexesAndSaysSo(t *testing.T) {
	f := New(nil)
	// Each entry registers three nodes: three events at one index.
	var index uint64
	for index < eventKeep+100 {
		index++
		var cmds [][]byte
		for k := range 3 {
			cmds = append(cmds, mustEncode(t, MsgRegisterNode, RegisterNodeRequest{Now: epoch, Node: Node{
				ID: fmt.Sprintf("n%d-%d", index, k), Capabilities: map[string][]string{"exec": {"1"}},
				Resources: scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, Slots: 1,
			}}))
		}
		f.ApplyBytes(index, EncodeBatch(cmds))
	}
	evs, _, complete := f.State().EventsFrom(EventPosition{}, 0, nil)
	if complete <= 1 {
		t.Fatalf("after %d events the stream still claims to hold everything", 3*index)
	}
	if len(evs) < eventKeep || evs[0].Event.Index != complete || evs[0].Offset != 0 {
		t.Fatalf("kept %d events from %v; complete from %d", len(evs), evs[0].position(), complete)
	}
	if last := evs[len(evs)-1]; last.Event.Index != index || last.Offset != 2 {
		t.Fatalf("the newest event is %v, want index %d offset 2", last.position(), index)
	}
}

func TestEventStreamWakesAWaitingReader(t *testing.T) {
	h := newHarness(t)
	h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 1)
	st := h.f.State()
	_, next, _ := st.EventsFrom(EventPosition{}, 0, nil)
	ws := NewWatchSet()
	if evs, _, _ := st.EventsFrom(next, 0, ws); len(evs) != 0 {
		t.Fatalf("nothing after %v yet, got %d events", next, len(evs))
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- ws.WatchCtx(ctx)
	}()
	h.submit("t1", scheduler.Resources{CPUMillis: 100, MemoryMB: 16}, 1)
	if err := <-done; err != nil {
		t.Fatalf("the reader was not woken: %v", err)
	}
	evs, _, _ := h.f.State().EventsFrom(next, 0, nil)
	if len(evs) != 1 || evs[0].Key != "t1" || evs[0].Topic != TopicTask || evs[0].Event.Kind != EventQueued {
		t.Fatalf("want t1's queued event, got %+v", evs)
	}
}
