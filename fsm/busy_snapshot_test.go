package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"herd/scheduler"
)

// busyFSM drives tasks through reservations, starts, failures with
// backoff, losses, cancellations and explanations on a few nodes, so
// that records hold every optional part a task record has.
func busyFSM(t *testing.T, seed uint64, steps int) *FSM {
	rng := rand.New(rand.NewPCG(seed, seed))
	h := newHarness(t)
	nodes := []string{"n0", "n1", "n2"}
	for _, id := range nodes {
		h.register(id, scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 3)
	}
	now, tasks, attempts := epoch, 0, 0
	for range steps {
		now = now.Add(time.Second)
		st := h.f.State()
		taskID := fmt.Sprintf("t%d", rng.IntN(tasks+1))
		task, _ := st.Task(taskID)
		switch op := rng.IntN(10); {
		case op < 2 || task == nil:
			tasks++
			h.submit(fmt.Sprintf("t%d", tasks), scheduler.Resources{CPUMillis: 500, MemoryMB: 64}, 1+rng.IntN(4))
		case op < 5:
			n, _ := st.Node(nodes[rng.IntN(len(nodes))])
			attempts++
			h.applyBatch(mustEncode(t, MsgReserve, ReserveRequest{
				TaskID: taskID, AttemptID: fmt.Sprintf("a%d", attempts), Number: int(task.Attempts) + 1,
				NodeID: n.ID, SessionGeneration: n.SessionGeneration, Now: now, HeartbeatTTL: time.Hour,
			}))
		case op == 5:
			if id := task.CurrentAttempt(); id != "" {
				h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: id, LeaseVersion: leaseOf(t, h, id), Now: now})
			}
		case op < 8:
			if id := task.CurrentAttempt(); id != "" {
				state := []AttemptState{AttemptSucceeded, AttemptFailed, AttemptFailed, AttemptTimedOut, AttemptLost}[rng.IntN(5)]
				h.apply(MsgAttemptEnd, AttemptEndRequest{
					AttemptID: id, LeaseVersion: leaseOf(t, h, id), State: state, ExitCode: 1, Error: "exit 1",
					Now: now, RetryAt: now.Add(time.Duration(rng.IntN(3)) * time.Second),
				})
			}
		case op == 8:
			h.apply(MsgExplain, ExplainRequest{TaskID: taskID, Summary: fmt.Sprintf("0/3 nodes eligible: %d busy", rng.IntN(3)), Now: now})
		default:
			h.apply(MsgCancelTask, CancelTaskRequest{TaskID: taskID, Now: now})
		}
	}
	return h.f
}

// A snapshot of tasks in every state, with attempts, backoffs, node
// failures, explanations and long timelines, restores to the same state
// and writes the same bytes again.
func TestSnapshotRoundTripOfBusyTasks(t *testing.T) {
	f := busyFSM(t, 5, 3000)
	var buf bytes.Buffer
	if err := f.State().Dump(&buf); err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"current_attempt":`, `"not_before":`, `"node_failures":`, `"last_explain":`, `"kind":"waiting"`, `"state":"SUCCEEDED"`, `"state":"CANCELLED"`} {
		if !strings.Contains(buf.String(), part) {
			t.Fatalf("the workload made no task with %s", part)
		}
	}
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := restored.State().Dump(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("the restored state writes different bytes")
	}
	if err := restored.State().CheckInvariants(); err != nil {
		t.Fatalf("restored state: %v", err)
	}
}

// A timeline keeps its submission event and the latest events, at most
// maxTimeline in all, and the event stream still carries every event.
func TestTimelineKeepsSubmissionAndLatest(t *testing.T) {
	h := newHarness(t)
	h.submit("t", scheduler.Resources{CPUMillis: 100}, 1)
	const explains = maxTimeline + 50
	for i := range explains {
		h.apply(MsgExplain, ExplainRequest{TaskID: "t", Summary: fmt.Sprintf("reason %d", i), Now: epoch.Add(time.Duration(i) * time.Second)})
	}
	task, err := h.f.State().Task("t")
	if err != nil {
		t.Fatal(err)
	}
	tl := task.Timeline()
	if len(tl) != maxTimeline || task.TimelineLen() != maxTimeline {
		t.Fatalf("timeline holds %d events (len %d), want %d", len(tl), task.TimelineLen(), maxTimeline)
	}
	if tl[0].Kind != EventQueued || tl[0].Index != task.CreateIndex || !strings.HasPrefix(tl[0].Message, "submitted by") {
		t.Fatalf("first event %+v is not the submission", tl[0])
	}
	if want := fmt.Sprintf("reason %d", explains-1); tl[len(tl)-1].Message != want || task.LastExplain() != want {
		t.Fatalf("last event %+v, explanation %q, want %q", tl[len(tl)-1], task.LastExplain(), want)
	}
	if want := fmt.Sprintf("reason %d", explains-maxTimeline+1); tl[1].Message != want {
		t.Fatalf("second event %+v, want the oldest kept reason %q", tl[1], want)
	}
	if last, _ := task.LastEvent(); last != tl[len(tl)-1] {
		t.Fatalf("LastEvent %+v, timeline ends with %+v", last, tl[len(tl)-1])
	}
	events, _, _ := h.f.State().EventsFrom(EventPosition{}, 0, nil)
	n := 0
	for _, e := range events {
		if e.Topic == TopicTask && e.Key == "t" {
			n++
		}
	}
	if n != explains+1 {
		t.Fatalf("the stream carries %d of the task's events, want %d", n, explains+1)
	}
}

// A requeued task keeps its submission's time apart from its new queue
// time, in the record, its timeline and a restored copy; a task never
// requeued has one time for both.
func TestRequeueKeepsSubmissionTime(t *testing.T) {
	h := newHarness(t)
	h.register("n0", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096}, 2)
	h.submit("t1", scheduler.Resources{CPUMillis: 500, MemoryMB: 64}, 3)
	h.submit("t2", scheduler.Resources{CPUMillis: 500, MemoryMB: 64}, 3)
	n, _ := h.f.State().Node("n0")
	h.applyBatch(reserveCmd(t, "t1", "a1", "n0", 1, n.SessionGeneration))
	failedAt := epoch.Add(time.Minute)
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: leaseOf(t, h, "a1"), State: AttemptFailed, ExitCode: 1, Now: failedAt, RetryAt: failedAt})
	for _, f := range []*FSM{h.f, restoredCopy(t, h.f)} {
		st := f.State()
		requeued, err := st.Task("t1")
		if err != nil {
			t.Fatal(err)
		}
		if requeued.State != TaskPending || !requeued.QueuedAt.Time().Equal(failedAt) {
			t.Fatalf("t1: state %s, queued at %v; want PENDING, queued again at %v", requeued.State, requeued.QueuedAt.Time(), failedAt)
		}
		if !requeued.SubmittedAt().Equal(epoch) || !requeued.Timeline()[0].Time.Time().Equal(epoch) {
			t.Fatalf("t1: submitted at %v, first event at %v; want both %v", requeued.SubmittedAt(), requeued.Timeline()[0].Time.Time(), epoch)
		}
		never, err := st.Task("t2")
		if err != nil {
			t.Fatal(err)
		}
		if never.more != nil || !never.SubmittedAt().Equal(epoch) || !never.QueuedAt.Time().Equal(epoch) {
			t.Fatalf("t2: submitted at %v, queued at %v, second record %v; want both %v and none", never.SubmittedAt(), never.QueuedAt.Time(), never.more != nil, epoch)
		}
	}
}
