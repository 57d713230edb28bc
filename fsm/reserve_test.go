package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
)

const ttl = time.Minute

// tb is what the helpers need from *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type harness struct {
	t     tb
	f     *FSM
	index uint64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, f: New(nil)} }

func (h *harness) apply(mt MessageType, v any) any {
	h.t.Helper()
	h.index++
	resp := h.f.ApplyBytes(h.index, mustEncode(h.t, mt, v))
	if err := h.f.State().CheckInvariants(); err != nil {
		h.t.Fatalf("invariant broken after %s at index %d: %v", mt, h.index, err)
	}
	return resp
}

func (h *harness) applyBatch(cmds ...[]byte) BatchResult {
	h.t.Helper()
	h.index++
	resp := h.f.ApplyBytes(h.index, EncodeBatch(cmds))
	if err := h.f.State().CheckInvariants(); err != nil {
		h.t.Fatalf("invariant broken after batch at index %d: %v", h.index, err)
	}
	return resp.(BatchResult)
}

func (h *harness) register(id string, res scheduler.Resources, slots int) *Node {
	h.t.Helper()
	n, ok := h.apply(MsgRegisterNode, RegisterNodeRequest{Now: epoch, Node: Node{
		ID: id, Capabilities: map[string][]string{"exec": {"1"}}, Resources: res, Slots: slots,
	}}).(*Node)
	if !ok {
		h.t.Fatalf("register %s failed", id)
	}
	return n
}

func (h *harness) submit(id string, res scheduler.Resources, maxAttempts int) {
	h.t.Helper()
	spec := testSpec("")
	spec.Resources = res
	spec.MaxAttempts = maxAttempts
	if _, ok := h.apply(MsgSubmitTask, SubmitTaskRequest{ID: id, SubmittedAt: epoch, Spec: spec}).(*SubmitResult); !ok {
		h.t.Fatalf("submit %s failed", id)
	}
}

// reserveCmd encodes a reservation as the leader does (binary form).
func reserveCmd(t tb, task, attempt, node string, number int, gen uint64) []byte {
	return EncodeReserve(ReserveRequest{TaskID: task, AttemptID: attempt, Number: number, NodeID: node,
		SessionGeneration: gen, Now: epoch.Add(time.Second), HeartbeatTTL: ttl})
}

// The double-allocation exercise: two GPU tasks, one GPU, two deciders working from
// the same (stale) view. Exactly one reservation wins; the other is
// rejected with the capacity reason, whatever order they arrive in.
func TestTwoDecidersOneGPU(t *testing.T) {
	for _, sameEntry := range []bool{true, false} {
		t.Run(fmt.Sprintf("same_entry=%v", sameEntry), func(t *testing.T) {
			h := newHarness(t)
			gpu := scheduler.Resources{CPUMillis: 100, GPU: 1}
			n := h.register("gpu-node", scheduler.Resources{CPUMillis: 4000, MemoryMB: 4096, GPU: 1}, 4)
			h.submit("task-1", gpu, 1)
			h.submit("task-2", gpu, 1)
			// Both deciders saw the GPU free.
			a := reserveCmd(t, "task-1", "att-1", n.ID, 1, n.SessionGeneration)
			b := reserveCmd(t, "task-2", "att-2", n.ID, 1, n.SessionGeneration)
			var results []any
			if sameEntry {
				results = h.applyBatch(a, b)
			} else {
				h.index++
				results = append(results, h.f.ApplyBytes(h.index, a))
				h.index++
				results = append(results, h.f.ApplyBytes(h.index, b))
			}
			if _, ok := results[0].(*ReserveResult); !ok {
				t.Fatalf("first reservation should win: %#v", results[0])
			}
			var rej *Rejection
			if err, ok := results[1].(error); !ok || !errors.As(err, &rej) || rej.Code != string(scheduler.ReasonInsufficientFree) {
				t.Fatalf("second reservation should be rejected for capacity: %#v", results[1])
			}
			st := h.f.State()
			node, _ := st.Node(n.ID)
			if node.Reserved.GPU != 1 || node.RunningAttempts != 1 {
				t.Fatalf("node books: %+v", node)
			}
			if t2, _ := st.Task("task-2"); t2.State != TaskPending || t2.Attempts != 0 {
				t.Fatalf("loser must stay queued untouched: %+v", t2)
			}
			if err := st.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReserveRechecks(t *testing.T) {
	h := newHarness(t)
	small := scheduler.Resources{CPUMillis: 100}
	n := h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 2)
	h.submit("t1", small, 3)
	h.submit("t2", small, 3)
	h.submit("t3", small, 3)
	code := func(resp any) string {
		var rej *Rejection
		if err, ok := resp.(error); ok && errors.As(err, &rej) {
			return rej.Code
		}
		return "accepted"
	}
	cases := []struct {
		name string
		cmd  []byte
		want string
	}{
		{"wrong attempt number", reserveCmd(t, "t1", "a0", "n1", 2, n.SessionGeneration), RejectAttemptNumber},
		{"old session", reserveCmd(t, "t1", "a0", "n1", 1, n.SessionGeneration+7), RejectSessionChanged},
		{"unknown node", reserveCmd(t, "t1", "a0", "ghost", 1, 1), RejectNotFound},
		{"unknown task", reserveCmd(t, "ghost", "a0", "n1", 1, 1), RejectNotFound},
		{"accepted", reserveCmd(t, "t1", "a1", "n1", 1, n.SessionGeneration), "accepted"},
		{"task no longer pending", reserveCmd(t, "t1", "a2", "n1", 2, n.SessionGeneration), RejectTaskNotPending},
		{"attempt id reused", reserveCmd(t, "t2", "a1", "n1", 1, n.SessionGeneration), RejectConflict},
		{"second slot", reserveCmd(t, "t2", "a3", "n1", 1, n.SessionGeneration), "accepted"},
		{"no slot left", reserveCmd(t, "t3", "a4", "n1", 1, n.SessionGeneration), string(scheduler.ReasonNoFreeSlot)},
	}
	for _, c := range cases {
		h.index++
		if got := code(h.f.ApplyBytes(h.index, c.cmd)); got != c.want {
			t.Fatalf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	h.apply(MsgNodeDrain, NodeDrainRequest{NodeID: "n1", Enable: true})
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: leaseOf(t, h, "a1"), State: AttemptSucceeded, Now: epoch})
	h.index++
	if got := code(h.f.ApplyBytes(h.index, reserveCmd(t, "t3", "a5", "n1", 1, n.SessionGeneration))); got != string(scheduler.ReasonNotActive) {
		t.Fatalf("draining node must refuse placements, got %s", got)
	}
}

func leaseOf(t tb, h *harness, attempt string) uint64 {
	a, err := h.f.State().Attempt(attempt)
	if err != nil {
		t.Fatal(err)
	}
	return a.LeaseVersion
}

func TestAttemptLifecycleRetryAndFencing(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 500, MemoryMB: 64}
	n1 := h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 2)
	h.submit("t", res, 2)
	h.applyBatch(reserveCmd(t, "t", "a1", "n1", 1, n1.SessionGeneration))
	lease1 := leaseOf(t, h, "a1")
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "a1", LeaseVersion: lease1, Now: epoch})
	retryAt := epoch.Add(5 * time.Second)
	end := AttemptEndRequest{AttemptID: "a1", LeaseVersion: lease1, State: AttemptFailed, ExitCode: 1, Now: epoch.Add(2 * time.Second), RetryAt: retryAt}
	if _, ok := h.apply(MsgAttemptEnd, end).(*AttemptResult); !ok {
		t.Fatal("first failure should apply")
	}
	// The same report again is accepted without effect.
	if r, ok := h.apply(MsgAttemptEnd, end).(*AttemptResult); !ok || !r.Duplicate {
		t.Fatal("a duplicate report should be accepted as a duplicate")
	}
	task, _ := h.f.State().Task("t")
	if task.State != TaskPending || task.Failures != 1 || !task.NotBefore().Time().Equal(retryAt) {
		t.Fatalf("task should be requeued with backoff: %+v", task)
	}
	// Backoff is enforced by the FSM too.
	h.index++
	early := mustEncode(t, MsgReserve, ReserveRequest{TaskID: "t", AttemptID: "a2", Number: 2, NodeID: "n1", SessionGeneration: n1.SessionGeneration, Now: retryAt.Add(-time.Second), HeartbeatTTL: ttl})
	if err, ok := h.f.ApplyBytes(h.index, early).(error); !ok || !errors.Is(err, error(nil)) && err.(*Rejection).Code != RejectTaskBackoff {
		t.Fatalf("reservation before the backoff should be rejected: %v", err)
	}
	h.index++
	late := mustEncode(t, MsgReserve, ReserveRequest{TaskID: "t", AttemptID: "a2", Number: 2, NodeID: "n1", SessionGeneration: n1.SessionGeneration, Now: retryAt, HeartbeatTTL: ttl})
	if _, ok := h.f.ApplyBytes(h.index, late).(*ReserveResult); !ok {
		t.Fatal("reservation after the backoff should apply")
	}
	lease2 := leaseOf(t, h, "a2")
	if lease2 <= lease1 {
		t.Fatalf("a new attempt gets a newer lease: %d then %d", lease1, lease2)
	}
	// A zombie report for attempt 1 with a success is refused and recorded.
	zombie := AttemptEndRequest{AttemptID: "a1", LeaseVersion: lease1, State: AttemptSucceeded, Now: epoch.Add(10 * time.Second)}
	var rej *Rejection
	if err, ok := h.apply(MsgAttemptEnd, zombie).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectStale {
		t.Fatalf("zombie result must be rejected as stale: %#v", err)
	}
	// A wrong lease on the current attempt is refused too.
	if err, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a2", LeaseVersion: lease2 + 1, State: AttemptSucceeded, Now: epoch}).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectStale {
		t.Fatalf("wrong lease must be rejected: %#v", err)
	}
	// Second failure on the same node: out of attempts, FAILED, and n1 is
	// now blacklisted for this task.
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a2", LeaseVersion: lease2, State: AttemptFailed, ExitCode: 3, Now: epoch.Add(20 * time.Second)})
	st := h.f.State()
	task, _ = st.Task("t")
	node, _ := st.Node("n1")
	if task.State != TaskFailed || !task.BlacklistedOn(node) {
		t.Fatalf("task should be FAILED and n1 blacklisted: %+v", task)
	}
	var kinds []string
	for _, e := range task.Timeline() {
		kinds = append(kinds, e.Kind.String())
	}
	want := "queued,node_selected,started,finished,queued,node_selected,stale_result_rejected,stale_result_rejected,finished,failed"
	if got := fmt.Sprint(kinds); got != "["+replaceCommas(want)+"]" {
		t.Fatalf("timeline %v, want %s", kinds, want)
	}
	if node.Reserved != (scheduler.Resources{}) || node.RunningAttempts != 0 {
		t.Fatalf("resources must be released: %+v", node)
	}
	// A terminal task never moves again.
	h.index++
	if _, ok := h.f.ApplyBytes(h.index, reserveCmd(t, "t", "a3", "n1", 3, n1.SessionGeneration)).(error); !ok {
		t.Fatal("a FAILED task must not be reserved again")
	}
}

func replaceCommas(s string) string {
	out := []byte(s)
	for i := range out {
		if out[i] == ',' {
			out[i] = ' '
		}
	}
	return string(out)
}

func TestTransitionTables(t *testing.T) {
	taskStates := []TaskState{TaskPending, TaskScheduled, TaskRunning, TaskSucceeded, TaskFailed, TaskTimedOut, TaskCancelled}
	allowedTask := map[[2]TaskState]bool{}
	for _, p := range [][2]TaskState{
		{TaskPending, TaskScheduled}, {TaskPending, TaskCancelled},
		{TaskScheduled, TaskRunning}, {TaskScheduled, TaskPending}, {TaskScheduled, TaskSucceeded}, {TaskScheduled, TaskFailed}, {TaskScheduled, TaskTimedOut}, {TaskScheduled, TaskCancelled},
		{TaskRunning, TaskPending}, {TaskRunning, TaskSucceeded}, {TaskRunning, TaskFailed}, {TaskRunning, TaskTimedOut}, {TaskRunning, TaskCancelled},
	} {
		allowedTask[p] = true
	}
	for _, from := range taskStates {
		for _, to := range taskStates {
			if got := ValidTaskTransition(from, to); got != allowedTask[[2]TaskState{from, to}] {
				t.Errorf("task %s → %s: got %v", from, to, got)
			}
		}
	}
	attemptStates := []AttemptState{AttemptReserved, AttemptRunning, AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled}
	for _, from := range attemptStates {
		for _, to := range attemptStates {
			want := (from == AttemptReserved && to != AttemptReserved) || (from == AttemptRunning && to.Terminal())
			if got := ValidAttemptTransition(from, to); got != want {
				t.Errorf("attempt %s → %s: got %v, want %v", from, to, got, want)
			}
		}
	}
}

// Property: any interleaving of registrations, stale and fresh
// reservations, starts, ends (right and wrong leases), drains and
// eligibility changes keeps every node within capacity and every task to
// at most one live attempt (CheckInvariants after each apply).
func TestReservationInvariantsProperty(t *testing.T) {
	var accepted, released int
	codes := map[string]int{}
	defer func() {
		// The property is only meaningful if the runs really placed and
		// released work, not only had it rejected.
		t.Logf("%d reservations accepted, %d released; rejections %v", accepted, released, codes)
		if accepted < 120 || released < 30 {
			t.Errorf("generator too weak: %d reservations accepted, %d released; rejections %v", accepted, released, codes)
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		h := &harness{t: rt, f: New(nil)}
		nodeIDs := []string{"n0", "n1", "n2", "n3"}
		capacity := map[string]scheduler.Resources{}
		slots := map[string]int{}
		for _, id := range nodeIDs {
			capacity[id] = scheduler.Resources{
				CPUMillis: rapid.Int64Range(1000, 4000).Draw(rt, "cpu-"+id),
				MemoryMB:  rapid.Int64Range(512, 2048).Draw(rt, "mem-"+id),
				GPU:       rapid.Int64Range(0, 2).Draw(rt, "gpu-"+id),
			}
			slots[id] = rapid.IntRange(1, 4).Draw(rt, "slots-"+id)
			h.register(id, capacity[id], slots[id])
		}
		for i := 0; i < 8; i++ {
			h.submit(fmt.Sprintf("t%d", i), scheduler.Resources{
				CPUMillis: rapid.Int64Range(0, 1500).Draw(rt, "tcpu"),
				MemoryMB:  rapid.Int64Range(0, 512).Draw(rt, "tmem"),
				GPU:       rapid.Int64Range(0, 1).Draw(rt, "tgpu"),
			}, rapid.IntRange(1, 3).Draw(rt, "max"))
		}
		attempts := 0
		now := epoch
		steps := rapid.IntRange(1, 100).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			now = now.Add(time.Second)
			st := h.f.State()
			taskID := fmt.Sprintf("t%d", rapid.IntRange(0, 7).Draw(rt, "task"))
			nodeID := rapid.SampledFrom(nodeIDs).Draw(rt, "node")
			task, _ := st.Task(taskID)
			switch rapid.IntRange(0, 11).Draw(rt, "op") {
			case 10:
				if r, ok := h.apply(MsgNodeDown, NodeDownRequest{NodeID: nodeID, Reason: "test", Now: now}).(*NodeDownResult); ok {
					released += len(r.Reclaimed)
				}
			case 11:
				h.apply(MsgCancelTask, CancelTaskRequest{TaskID: taskID, Now: now})
			case 0, 1, 7, 8: // one or two reservations decided from the same view
				k := rapid.IntRange(1, 2).Draw(rt, "deciders")
				var cmds [][]byte
				for d := 0; d < k; d++ {
					tID := fmt.Sprintf("t%d", rapid.IntRange(0, 7).Draw(rt, "rtask"))
					tk, _ := st.Task(tID)
					rn, _ := st.Node(rapid.SampledFrom(nodeIDs).Draw(rt, "rnode"))
					attempts++
					// Mostly plausible proposals, sometimes a wrong attempt
					// number or a stale session.
					number, gen := tk.Attempts+1, rn.SessionGeneration
					if rapid.IntRange(0, 9).Draw(rt, "numoff") == 9 {
						number--
					}
					if rapid.IntRange(0, 9).Draw(rt, "genoff") == 9 {
						gen--
					}
					cmds = append(cmds, mustEncode(rt, MsgReserve, ReserveRequest{
						TaskID: tID, AttemptID: fmt.Sprintf("a%d", attempts), Number: int(number),
						NodeID: rn.ID, SessionGeneration: gen, Now: now, HeartbeatTTL: time.Hour,
					}))
				}
				for _, r := range h.applyBatch(cmds...) {
					if _, ok := r.(*ReserveResult); ok {
						accepted++
					} else if rej, ok := r.(*Rejection); ok {
						codes[rej.Code]++
					}
				}
			case 2: // start the current attempt
				if task.CurrentAttempt() != "" {
					a, _ := st.Attempt(task.CurrentAttempt())
					h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, Now: now})
				}
			case 3, 9: // end some attempt, current or not, with a right or wrong lease
				all, _ := st.AttemptsOfTask(taskID)
				if len(all) > 0 {
					a := rapid.SampledFrom(all).Draw(rt, "attempt")
					lease := a.LeaseVersion + uint64(rapid.IntRange(0, 1).Draw(rt, "leaseoff"))
					state := rapid.SampledFrom([]AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled}).Draw(rt, "end")
					if r, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: a.ID, LeaseVersion: lease, State: state, Now: now, RetryAt: now}).(*AttemptResult); ok && !r.Duplicate {
						released++
					}
				}
			case 4:
				h.apply(MsgNodeDrain, NodeDrainRequest{NodeID: nodeID, Enable: rapid.Bool().Draw(rt, "drain"), Now: now})
			case 5:
				h.apply(MsgNodeEligible, NodeEligibilityRequest{NodeID: nodeID, Eligible: rapid.Bool().Draw(rt, "eligible"), Now: now})
			case 6: // re-registration: a new session, same capacity
				h.apply(MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{ID: nodeID, Capabilities: map[string][]string{"exec": {"1"}}, Resources: capacity[nodeID], Slots: slots[nodeID]}})
			}
		}
	})
}

func TestNodeDownReclaimsAndCancelIsFinal(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 500}
	n1 := h.register("n1", scheduler.Resources{CPUMillis: 2000}, 4)
	h.submit("run", res, 3)
	h.submit("cancel-me", res, 3)
	h.applyBatch(reserveCmd(t, "run", "a1", "n1", 1, n1.SessionGeneration), reserveCmd(t, "cancel-me", "c1", "n1", 1, n1.SessionGeneration))
	lease := leaseOf(t, h, "a1")
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "a1", LeaseVersion: lease, Now: epoch})

	down, ok := h.apply(MsgNodeDown, NodeDownRequest{NodeID: "n1", Reason: "5 heartbeats missed", Now: epoch.Add(time.Minute)}).(*NodeDownResult)
	if !ok || len(down.Reclaimed) != 2 || down.Node.Liveness != scheduler.LivenessDown {
		t.Fatalf("node down: %#v", down)
	}
	st := h.f.State()
	if task, _ := st.Task("run"); task.State != TaskPending || task.CurrentAttempt() != "" {
		t.Fatalf("reclaimed task must be requeued: %+v", task)
	}
	if a, _ := st.Attempt("a1"); a.State != AttemptLost {
		t.Fatalf("attempt must be LOST: %+v", a)
	}
	if node, _ := st.Node("n1"); node.Reserved != (scheduler.Resources{}) || node.RunningAttempts != 0 {
		t.Fatalf("reservations must be released: %+v", node)
	}
	// The zombie's result dies with its fencing token.
	var rej *Rejection
	if err, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: lease, State: AttemptSucceeded, Now: epoch.Add(2 * time.Minute)}).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectStale {
		t.Fatalf("zombie result: %#v", err)
	}
	// A DOWN node takes no work until it registers again.
	h.index++
	late := mustEncode(t, MsgReserve, ReserveRequest{TaskID: "run", AttemptID: "a2", Number: 2, NodeID: "n1", SessionGeneration: n1.SessionGeneration, Now: epoch.Add(2 * time.Minute), HeartbeatTTL: time.Hour})
	if err, ok := h.f.ApplyBytes(h.index, late).(*Rejection); !ok || err.Code != string(scheduler.ReasonNotReady) {
		t.Fatalf("placement on a DOWN node: %#v", err)
	}
	back := h.register("n1", scheduler.Resources{CPUMillis: 2000}, 4)
	if back.Liveness != scheduler.LivenessReady || back.SessionGeneration != n1.SessionGeneration+1 {
		t.Fatalf("re-registration: %+v", back)
	}

	// Cancel: pending task → CANCELLED; twice is fine; a terminal one is not.
	if r, ok := h.apply(MsgCancelTask, CancelTaskRequest{TaskID: "cancel-me", Now: epoch}).(*CancelResult); !ok || r.Task.State != TaskCancelled {
		t.Fatalf("cancel: %#v", r)
	}
	if r, ok := h.apply(MsgCancelTask, CancelTaskRequest{TaskID: "cancel-me", Now: epoch}).(*CancelResult); !ok || !r.AlreadyCancelled {
		t.Fatalf("second cancel: %#v", r)
	}
	h.applyBatch(mustEncode(t, MsgReserve, ReserveRequest{TaskID: "run", AttemptID: "a3", Number: 2, NodeID: "n1", SessionGeneration: back.SessionGeneration, Now: epoch.Add(2 * time.Minute), HeartbeatTTL: time.Hour}))
	lease3 := leaseOf(t, h, "a3")
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "a3", LeaseVersion: lease3, Now: epoch})
	if r, ok := h.apply(MsgCancelTask, CancelTaskRequest{TaskID: "run", Reason: "operator", Now: epoch}).(*CancelResult); !ok || r.Task.State != TaskCancelled {
		t.Fatalf("cancel running: %#v", r)
	}
	if a, _ := h.f.State().Attempt("a3"); a.State != AttemptCancelled {
		t.Fatalf("running attempt must be cancelled with its task: %+v", a)
	}
	if err, ok := h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a3", LeaseVersion: lease3, State: AttemptFailed, ExitCode: -9, Now: epoch}).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectStale {
		t.Fatalf("late result after cancel must be stale: %#v", err)
	}
	h.submit("done", res, 1)
	h.applyBatch(reserveCmd(t, "done", "d1", "n1", 1, back.SessionGeneration))
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "d1", LeaseVersion: leaseOf(t, h, "d1"), State: AttemptSucceeded, Now: epoch})
	if err, ok := h.apply(MsgCancelTask, CancelTaskRequest{TaskID: "done", Now: epoch}).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectConflict {
		t.Fatalf("cancel of a finished task: %#v", err)
	}
}

func TestForgetTasksOnlyForgetsFinishedOnes(t *testing.T) {
	h := newHarness(t)
	n := h.register("n1", scheduler.Resources{CPUMillis: 2000}, 4)
	h.submit("done", scheduler.Resources{}, 1)
	h.submit("waiting", scheduler.Resources{}, 1)
	h.applyBatch(reserveCmd(t, "done", "a1", "n1", 1, n.SessionGeneration))
	h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: "a1", LeaseVersion: leaseOf(t, h, "a1"), State: AttemptSucceeded, Now: epoch})
	ids, err := h.f.State().FinishedTasks(epoch.Add(time.Hour), 10)
	if err != nil || len(ids) != 1 || ids[0] != "done" {
		t.Fatalf("finished tasks: %v %v", ids, err)
	}
	if n, ok := h.apply(MsgForgetTasks, ForgetTasksRequest{TaskIDs: []string{"done", "waiting", "ghost"}}).(int); !ok || n != 1 {
		t.Fatalf("want exactly one task forgotten, got %v", n)
	}
	st := h.f.State()
	if _, err := st.Task("done"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finished task should be gone: %v", err)
	}
	if _, err := st.Attempt("a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("its attempt should be gone: %v", err)
	}
	if _, err := st.Task("waiting"); err != nil {
		t.Fatalf("a pending task must be kept: %v", err)
	}
	if as, _ := st.AttemptsOnNode("n1", nil); len(as) != 0 {
		t.Fatalf("the node's attempt history should shrink: %d left", len(as))
	}
}

func TestRegistrationRetryKeepsTheSession(t *testing.T) {
	h := newHarness(t)
	reg := RegisterNodeRequest{Now: epoch, Node: Node{ID: "n1", Resources: scheduler.Resources{CPUMillis: 1000}, Slots: 1, RegistrationToken: "tok-1"}}
	first := h.apply(MsgRegisterNode, reg).(*Node)
	again := h.apply(MsgRegisterNode, reg).(*Node)
	if first.SessionGeneration != 1 || again.SessionGeneration != 1 {
		t.Fatalf("a retried registration must not start a session: %d then %d", first.SessionGeneration, again.SessionGeneration)
	}
	reg.Node.RegistrationToken = "tok-2"
	if next := h.apply(MsgRegisterNode, reg).(*Node); next.SessionGeneration != 2 {
		t.Fatalf("a new registration starts a new session, got %d", next.SessionGeneration)
	}
	reg.Node.RegistrationToken = ""
	if next := h.apply(MsgRegisterNode, reg).(*Node); next.SessionGeneration != 3 {
		t.Fatalf("without a token every registration is new, got %d", next.SessionGeneration)
	}
}

// A node declared DOWN has its attempts re-placed no sooner than the
// leader says (its agent's lease), and what the agent later reports of a
// reclaimed attempt's end is recorded in the timeline, once.
func TestNodeDownWaitsForTheLeaseAndRecordsTheAgentsWord(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 500}
	n1 := h.register("n1", scheduler.Resources{CPUMillis: 2000}, 4)
	h.submit("run", res, 3)
	h.applyBatch(reserveCmd(t, "run", "a1", "n1", 1, n1.SessionGeneration))
	lease := leaseOf(t, h, "a1")
	h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: "a1", LeaseVersion: lease, Now: epoch})
	downAt, retryAt := epoch.Add(time.Minute), epoch.Add(time.Minute+20*time.Second)
	h.apply(MsgNodeDown, NodeDownRequest{NodeID: "n1", Reason: "missed", Now: downAt, RetryAt: retryAt})
	if task, _ := h.f.State().Task("run"); task.NotBefore() != StampOf(retryAt) {
		t.Fatalf("the reclaimed task may run again at %v, want %v", task.NotBefore().Time(), retryAt)
	}
	report := AttemptEndRequest{AttemptID: "a1", LeaseVersion: lease, State: AttemptLost, ExitCode: -1,
		Error: "stopped on n1: no contact with the cluster for 20s, lease 20s", Now: epoch.Add(2 * time.Minute)}
	for range 2 {
		if res, ok := h.apply(MsgAttemptEnd, report).(*AttemptResult); !ok || !res.Duplicate {
			t.Fatalf("the agent's LOST report: %#v", res)
		}
	}
	task, _ := h.f.State().Task("run")
	n := 0
	for _, e := range task.Timeline() {
		if strings.Contains(e.Message, "as its agent reports: stopped on n1") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the agent's word is in the timeline %d times: %+v", n, task.Timeline())
	}
}

// TestReclaimSparesAStartedAttempt: a reclaim made only for a RESERVED
// attempt leaves one whose start committed first running, without a word
// in its timeline, and still reclaims one that never started. In JSON the
// condition is not carried, and the end applies as before.
func TestReclaimSparesAStartedAttempt(t *testing.T) {
	h := newHarness(t)
	res := scheduler.Resources{CPUMillis: 100, MemoryMB: 64}
	n1 := h.register("n1", scheduler.Resources{CPUMillis: 1000, MemoryMB: 1024}, 4)
	for _, id := range []string{"t1", "t2", "t3"} {
		h.submit(id, res, 2)
	}
	h.applyBatch(reserveCmd(t, "t1", "a1", "n1", 1, n1.SessionGeneration),
		reserveCmd(t, "t2", "a2", "n1", 1, n1.SessionGeneration),
		reserveCmd(t, "t3", "a3", "n1", 1, n1.SessionGeneration))
	for _, id := range []string{"a1", "a3"} {
		if _, ok := h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: id, LeaseVersion: leaseOf(t, h, id), Now: epoch.Add(2 * time.Second)}).(*AttemptResult); !ok {
			t.Fatalf("start of %s should apply", id)
		}
	}
	reclaim := func(id string) AttemptEndRequest {
		return AttemptEndRequest{AttemptID: id, LeaseVersion: leaseOf(t, h, id), State: AttemptLost, ExitCode: -1,
			Error: "reclaimed: not started", Now: epoch.Add(time.Minute), RetryAt: epoch.Add(time.Minute), OnlyReserved: true}
	}
	before, _ := h.f.State().Task("t1")
	var rej *Rejection
	if err, ok := h.apply(MsgAttemptEnd, reclaim("a1")).(error); !ok || !errors.As(err, &rej) || rej.Code != RejectStale {
		t.Fatalf("reclaiming a started attempt: %#v, want a stale rejection", err)
	}
	a1, _ := h.f.State().Attempt("a1")
	t1, _ := h.f.State().Task("t1")
	if a1.State != AttemptRunning || t1.State != TaskRunning || t1.TimelineLen() != before.TimelineLen() {
		t.Fatalf("the started attempt is %s, its task %s with %d events (had %d)", a1.State, t1.State, t1.TimelineLen(), before.TimelineLen())
	}
	if r, ok := h.apply(MsgAttemptEnd, reclaim("a2")).(*AttemptResult); !ok || r.Attempt.State != AttemptLost {
		t.Fatalf("reclaiming an attempt never started: %#v", r)
	}
	if t2, _ := h.f.State().Task("t2"); t2.State != TaskPending {
		t.Fatalf("the reclaimed attempt's task is %s, want it requeued", t2.State)
	}
}
