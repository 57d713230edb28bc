package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// passHarness drives whole scheduling passes without Raft: an in-memory
// FSM is the committed state, a settable clock the leader's, and the
// committer records what each pass produced and applies it to the FSM as
// Raft would.
type passHarness struct {
	t        *testing.T
	f        *fsm.FSM
	index    uint64
	now      time.Time
	cfg      config.Scheduler
	wakeWait time.Duration
	ps       *passState

	mu       sync.Mutex
	sleeping map[string]bool
	woken    []string
	commits  []harnessCommit
	// beforeCommit, when set, runs inside the next commit before its
	// entries apply: what other decisions committed meanwhile.
	beforeCommit func()
}

// harnessCommit is what one pass handed to the committer, and what the
// FSM made of its reservations.
type harnessCommit struct {
	reserves []fsm.ReserveRequest
	explains []fsm.ExplainRequest
	accepted int
	rejected []string // rejection codes
}

var passEpoch = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newPassHarness(t *testing.T) *passHarness {
	cfg := config.DefaultServer()
	h := &passHarness{t: t, f: fsm.New(nil), now: passEpoch, cfg: cfg.Scheduler, wakeWait: cfg.Liveness.WakeTimeout, sleeping: map[string]bool{}}
	h.ps = newPassState(h.cfg)
	return h
}

func (h *passHarness) State() *fsm.State { return h.f.State() }
func (h *passHarness) Now() time.Time    { return h.now }
func (h *passHarness) Hibernating(id string, _, _, _ time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sleeping[id]
}

func (h *passHarness) Wake(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.woken = append(h.woken, id)
	return nil
}

func (h *passHarness) Commit(_ context.Context, reserves []fsm.ReserveRequest, explains []fsm.ExplainRequest) int {
	h.mu.Lock()
	before := h.beforeCommit
	h.beforeCommit = nil
	h.mu.Unlock()
	if before != nil {
		before()
	}
	c := harnessCommit{reserves: reserves, explains: explains}
	for _, r := range reserves {
		switch res := h.applyRaw(fsm.EncodeReserve(r)).(type) {
		case *fsm.ReserveResult:
			c.accepted++
		case *fsm.Rejection:
			c.rejected = append(c.rejected, res.Code)
		default:
			h.t.Errorf("reserve %s: %v", r.TaskID, res)
		}
	}
	for _, e := range explains {
		h.apply(fsm.MsgExplain, e)
	}
	h.mu.Lock()
	h.commits = append(h.commits, c)
	h.mu.Unlock()
	return c.accepted
}

func (h *passHarness) applyRaw(b []byte) any {
	h.index++
	return h.f.ApplyBytes(h.index, b)
}

func (h *passHarness) apply(typ fsm.MessageType, payload any) any {
	h.t.Helper()
	b, err := fsm.Encode(typ, payload)
	if err != nil {
		h.t.Fatal(err)
	}
	res := h.applyRaw(b)
	if err, ok := res.(error); ok {
		if _, rejected := res.(*fsm.Rejection); !rejected {
			h.t.Fatalf("apply %v: %v", typ, err)
		}
	}
	return res
}

func (h *passHarness) node(id string, cpu int64, slots int, labels map[string]string) {
	h.apply(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: h.now, Node: fsm.Node{
		ID: id, Capabilities: map[string][]string{"exec": {"1"}}, Labels: labels,
		Resources: scheduler.Resources{CPUMillis: cpu, MemoryMB: 8192}, Slots: slots,
	}})
}

func (h *passHarness) submit(id string, cpu int64, prefer map[string]string) {
	h.apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: fsm.TaskSpec{Name: id, TaskShape: &fsm.TaskShape{
		Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", Resources: scheduler.Resources{CPUMillis: cpu},
		PreferredLabels: prefer, TimeoutSeconds: 60, MaxAttempts: 3,
	}}})
}

// pass runs one whole pass and waits for its commit.
func (h *passHarness) pass() (int, time.Time) {
	h.t.Helper()
	p := &pass{cfg: h.cfg, wakeTimeout: h.wakeWait, view: h, out: h, stats: &SchedulerStats{}, logger: hclog.NewNullLogger(), ps: h.ps}
	n, wake := p.run(context.Background(), nil)
	h.ps.commits.Wait()
	return n, wake
}

// lastCommit is what the latest pass committed (fails if it committed
// nothing since the count given).
func (h *passHarness) lastCommit(since int) harnessCommit {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.commits) <= since {
		h.t.Fatalf("no commit after the %d before", since)
	}
	return h.commits[len(h.commits)-1]
}

func (h *passHarness) commitCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.commits)
}

func (h *passHarness) taskState(id string) (fsm.TaskState, string) {
	t, err := h.f.State().Task(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return t.State, t.LastExplain()
}

// A pass decides up to MaxPassPlacements and hands them over in one
// commit; within a pass, nodes are booked as they are chosen, so no node
// gets more than its slots; once every slot is taken, passes only explain.
func TestPassBatchesWithoutOverbooking(t *testing.T) {
	h := newPassHarness(t)
	h.cfg.MaxPassPlacements = 3
	h.node("a", 8000, 2, nil)
	h.node("b", 8000, 2, nil)
	for i := range 10 {
		h.submit(fmt.Sprintf("t%02d", i), 100, nil)
	}
	perNode := map[string]int{}
	count := func(c harnessCommit) {
		for _, r := range c.reserves {
			perNode[r.NodeID]++
		}
	}
	if n, _ := h.pass(); n != 3 {
		t.Fatalf("first pass decided %d, want MaxPassPlacements = 3", n)
	}
	c := h.lastCommit(0)
	if len(c.reserves) != 3 || c.accepted != 3 {
		t.Fatalf("first commit: %d reservations, %d accepted, rejected %v", len(c.reserves), c.accepted, c.rejected)
	}
	count(c)
	// The queue is read in order: the three oldest tasks.
	for i, r := range c.reserves {
		if want := fmt.Sprintf("t%02d", i); r.TaskID != want || r.Number != 1 || r.SessionGeneration != 1 || !r.Now.Equal(h.now) {
			t.Errorf("reservation %d: %+v, want task %s, attempt 1, session 1, now", i, r, want)
		}
	}
	if n, _ := h.pass(); n != 1 {
		t.Fatalf("second pass decided %d, want the one slot left", n)
	}
	count(h.lastCommit(1))
	if perNode["a"] != 2 || perNode["b"] != 2 {
		t.Fatalf("reservations per node %v, want 2 each", perNode)
	}
	before := h.commitCount()
	if n, _ := h.pass(); n != 0 {
		t.Fatalf("a full cluster's pass decided %d", n)
	}
	for _, c := range h.commits[before:] {
		if len(c.reserves) != 0 {
			t.Fatalf("a full cluster's pass reserved %v", c.reserves)
		}
	}
}

// The best node sleeps: the pass wakes it (at most a message a second)
// and the task waits for it; once it is awake the task goes there. A node
// that does not wake within the wake timeout is passed over for the task.
func TestPassWakesASleepingNode(t *testing.T) {
	for _, wakes := range []bool{true, false} {
		t.Run(fmt.Sprintf("wakes=%v", wakes), func(t *testing.T) {
			h := newPassHarness(t)
			h.node("big", 8000, 4, map[string]string{"disk": "ssd"})
			h.node("small", 8000, 4, nil)
			h.sleeping["big"] = true
			h.submit("t1", 100, map[string]string{"disk": "ssd"})

			n, wake := h.pass()
			if n != 0 || len(h.woken) != 1 || h.woken[0] != "big" {
				t.Fatalf("first pass: %d decided, woke %v; want none decided, big woken", n, h.woken)
			}
			if want := h.now.Add(h.wakeWait); !wake.Equal(want) {
				t.Errorf("next pass due %v, want the wake deadline %v", wake, want)
			}
			h.now = h.now.Add(500 * time.Millisecond)
			if n, _ := h.pass(); n != 0 || len(h.woken) != 1 {
				t.Fatalf("half a second later: %d decided, woke %v; want no second message yet", n, h.woken)
			}
			h.now = h.now.Add(600 * time.Millisecond)
			if h.pass(); len(h.woken) != 2 {
				t.Fatalf("over a second later: woke %v, want a second message", h.woken)
			}
			if wakes {
				h.sleeping["big"] = false
				before := h.commitCount()
				if n, _ := h.pass(); n != 1 {
					t.Fatalf("awake: %d decided", n)
				}
				if r := h.lastCommit(before).reserves; r[0].NodeID != "big" {
					t.Fatalf("placed on %s, want the node it waited for", r[0].NodeID)
				}
				return
			}
			h.now = passEpoch.Add(h.wakeWait)
			before := h.commitCount()
			if n, _ := h.pass(); n != 1 {
				t.Fatalf("after the wake timeout: %d decided", n)
			}
			if r := h.lastCommit(before).reserves; r[0].NodeID != "small" {
				t.Fatalf("placed on %s, want the awake node", r[0].NodeID)
			}
			if why := h.ps.sleepers.passedOver["t1"]["big"]; !strings.Contains(why, "did not wake") {
				t.Errorf("passed-over reason %q", why)
			}
		})
	}
}

// A task no node can take is explained: the reason is committed, not
// again within the explain interval, not again when unchanged, and again
// once it changed.
func TestPassExplainsWhyATaskWaits(t *testing.T) {
	h := newPassHarness(t)
	h.node("a", 1000, 4, nil)
	h.submit("big", 4000, nil)
	if n, _ := h.pass(); n != 0 {
		t.Fatalf("decided %d for a task no node fits", n)
	}
	c := h.lastCommit(0)
	if len(c.explains) != 1 || c.explains[0].TaskID != "big" || !c.explains[0].Now.Equal(h.now) {
		t.Fatalf("explanations %+v, want one for big", c.explains)
	}
	state, why := h.taskState("big")
	if state != fsm.TaskPending || why != "0/1 nodes eligible: 1 CPU below minimum" {
		t.Fatalf("task %s explained %q", state, why)
	}
	commits := h.commitCount()
	h.now = h.now.Add(h.cfg.ExplainInterval / 2)
	h.pass()
	h.now = h.now.Add(h.cfg.ExplainInterval)
	h.pass()
	if got := h.commitCount(); got != commits {
		t.Fatalf("%d more commits: an unchanged reason was recorded again (or too soon)", got-commits)
	}
	h.apply(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: h.now, Node: fsm.Node{
		ID: "gpu", Capabilities: map[string][]string{"cuda": {"12"}}, Resources: scheduler.Resources{CPUMillis: 16000}, Slots: 1,
	}})
	h.now = h.now.Add(h.cfg.ExplainInterval)
	h.pass()
	if _, why := h.taskState("big"); why != "0/2 nodes eligible: 1 CPU below minimum, 1 missing capability exec@1" {
		t.Fatalf("changed reason recorded as %q", why)
	}
}

// With every slot taken, a backlog of one kind is explained in one pass:
// the class is summarized once, and the tasks after the first take its
// summary, beyond the bound on tasks summarized one by one.
func TestPassExplainsABacklogOfOneKindInOnePass(t *testing.T) {
	h := newPassHarness(t)
	h.node("a", 1000, 1, nil)
	h.submit("first", 100, nil)
	if n, _ := h.pass(); n != 1 {
		t.Fatalf("decided %d for the one slot, want 1", n)
	}
	const waiting = 3 * maxExplainsPerPass
	for i := range waiting {
		h.submit(fmt.Sprintf("w%03d", i), 100, nil)
	}
	commits := h.commitCount()
	h.now = h.now.Add(time.Millisecond)
	h.pass()
	c := h.lastCommit(commits)
	if len(c.explains) != waiting {
		t.Fatalf("one pass explained %d of %d waiting tasks of one kind", len(c.explains), waiting)
	}
	for i := range waiting {
		id := fmt.Sprintf("w%03d", i)
		if state, why := h.taskState(id); state != fsm.TaskPending || !strings.HasPrefix(why, "0/1 nodes eligible") {
			t.Fatalf("task %s %s, explained %q", id, state, why)
		}
	}
}

// Two decisions from one view cannot both win: when another placement
// took the slot between the pass's view and its commit, the FSM rejects
// the pass's reservation, and the next pass chooses again from the state
// as it now is.
func TestPassReselectsAfterAConflict(t *testing.T) {
	h := newPassHarness(t)
	h.node("best", 8000, 1, map[string]string{"disk": "ssd"})
	h.node("other", 8000, 1, nil)
	h.submit("t1", 100, map[string]string{"disk": "ssd"})
	h.beforeCommit = func() {
		// Committed meanwhile: another task reserved on the same node.
		h.submit("t0", 100, nil)
		r := fsm.ReserveRequest{TaskID: "t0", AttemptID: "a0", Number: 1, NodeID: "best", SessionGeneration: 1, Score: 1, Now: h.now, HeartbeatTTL: h.cfg.HeartbeatTTL}
		if _, ok := h.applyRaw(fsm.EncodeReserve(r)).(*fsm.ReserveResult); !ok {
			t.Error("the competing reservation was refused")
		}
	}
	if n, _ := h.pass(); n != 1 {
		t.Fatalf("decided %d", n)
	}
	c := h.lastCommit(0)
	if c.reserves[0].NodeID != "best" || c.accepted != 0 || len(c.rejected) != 1 {
		t.Fatalf("first commit %+v: want the reservation on best rejected", c)
	}
	if state, _ := h.taskState("t1"); state != fsm.TaskPending {
		t.Fatalf("t1 is %s after its reservation was rejected", state)
	}
	before := h.commitCount()
	if n, _ := h.pass(); n != 1 {
		t.Fatalf("second pass decided %d", n)
	}
	c = h.lastCommit(before)
	if c.reserves[0].TaskID != "t1" || c.reserves[0].NodeID != "other" || c.accepted != 1 {
		t.Fatalf("second commit %+v: want t1 on other, accepted", c)
	}
	if state, _ := h.taskState("t1"); state != fsm.TaskScheduled {
		t.Fatalf("t1 is %s, want SCHEDULED", state)
	}
}

// A backlog of one shape that fits no node costs a pass one decision,
// not one per task: the pass still explains every task of it (within its
// bounds) and places what comes after it.
func TestPassDecidesAnUnplaceableShapeOnce(t *testing.T) {
	h := newPassHarness(t)
	h.node("n1", 4000, 3, nil)
	nowhere := func(id string) {
		h.apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: fsm.TaskSpec{Name: "backlog", TaskShape: &fsm.TaskShape{
			Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", Resources: scheduler.Resources{CPUMillis: 10},
			RequiredLabels: map[string]string{"zone": "nowhere"}, TimeoutSeconds: 60, MaxAttempts: 3,
		}}})
	}
	for i := range 200 {
		nowhere(fmt.Sprintf("b-%03d", i))
	}
	h.now = h.now.Add(time.Second)
	for i := range 3 {
		h.submit(fmt.Sprintf("p-%d", i), 100, nil)
	}
	p := &pass{cfg: h.cfg, wakeTimeout: h.wakeWait, view: h, out: h, stats: &SchedulerStats{}, logger: hclog.NewNullLogger(), ps: h.ps}
	if n, _ := p.run(context.Background(), nil); n != 3 {
		t.Fatalf("placed %d, want the 3 placeable tasks behind the backlog", n)
	}
	h.ps.commits.Wait()
	if len(p.unplaceable) != 1 {
		t.Fatalf("%d unplaceable keys, want the backlog's one shape", len(p.unplaceable))
	}
	if p.explainN != 1 {
		t.Fatalf("the nodes were evaluated for %d explanations, want 1 (the rest repeat it)", p.explainN)
	}
	for i := range 200 {
		state, why := h.taskState(fmt.Sprintf("b-%03d", i))
		if state != fsm.TaskPending || !strings.Contains(why, "required label") {
			t.Fatalf("backlog task %d: %s, explained %q", i, state, why)
		}
	}
	for i := range 3 {
		if state, _ := h.taskState(fmt.Sprintf("p-%d", i)); state != fsm.TaskScheduled {
			t.Fatalf("placeable task %d is %s", i, state)
		}
	}
}

// A submitter whose every waiting task is of a shape that fits nowhere is
// skipped whole, however deep its backlog and wherever it stands in the
// queue: the pass reaches the tasks behind it without reading the
// backlog task by task, and still explains every skipped task, within
// its bounds per pass, as though it had read it. A submitter with a task
// that failed on a node is read task by task.
func TestPassSkipsABacklogThatFitsNowhere(t *testing.T) {
	h := newPassHarness(t)
	h.node("n1", 4000, 10, nil) // never full: every pass places or skips
	const backlog = 1500
	nowhere := func(id, submitter string) {
		h.apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: h.now, Spec: fsm.TaskSpec{Name: "backlog", TaskShape: &fsm.TaskShape{
			Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", Resources: scheduler.Resources{CPUMillis: 10},
			RequiredLabels: map[string]string{"zone": "nowhere"}, TimeoutSeconds: 60, MaxAttempts: 3, Priority: 90, Submitter: submitter,
		}}})
	}
	for i := range backlog {
		nowhere(fmt.Sprintf("b-%04d", i), "batch")
	}
	h.now = h.now.Add(time.Second)
	for i := range 3 {
		h.submit(fmt.Sprintf("p-%d", i), 100, nil)
	}
	stats := &SchedulerStats{}
	run := func() int {
		t.Helper()
		p := &pass{cfg: h.cfg, wakeTimeout: h.wakeWait, view: h, out: h, stats: stats, logger: hclog.NewNullLogger(), ps: h.ps}
		n, _ := p.run(context.Background(), nil)
		h.ps.commits.Wait()
		return n
	}
	if n := run(); n != 3 {
		t.Fatalf("placed %d, want the 3 placeable tasks behind the backlog", n)
	}
	if got := stats.Scanned.Load(); got > 10 {
		t.Fatalf("the pass read %d tasks; the backlog's submitter should have been skipped after its first", got)
	}
	// The first pass explained as many as its bounds allow, the next the
	// rest, each from the summary of the first; skipped tasks are
	// explained at most every explainScanInterval, however often passes
	// run.
	explained := func() (n int) {
		for i := range backlog {
			if state, why := h.taskState(fmt.Sprintf("b-%04d", i)); state == fsm.TaskPending && strings.Contains(why, "required label") {
				n++
			}
		}
		return n
	}
	first := explained()
	if first == 0 || first == backlog {
		t.Fatalf("the first pass explained %d of %d skipped tasks; its bounds allow %d", first, backlog, maxExplainsPerPass+maxRepeatExplainsPerPass)
	}
	run()
	if got := explained(); got != first {
		t.Fatalf("%d backlog tasks explained by a pass at once after the first's %d", got, first)
	}
	h.now = h.now.Add(explainScanInterval(h.cfg))
	run()
	if got := explained(); got != backlog {
		t.Fatalf("%d of %d backlog tasks explained after two passes", got, backlog)
	}
	// Explanations fall due again after ExplainInterval, skipped or not.
	before := stats.Explains.Load()
	h.now = h.now.Add(h.cfg.ExplainInterval)
	run()
	h.now = h.now.Add(explainScanInterval(h.cfg))
	run()
	if again := stats.Explains.Load() - before; again != backlog {
		t.Fatalf("%d explanations after the interval, want the backlog's %d again", again, backlog)
	}

	// One task of the submitter's that may fit keeps it from being
	// skipped: the pass reads the backlog to reach it, and places it.
	readBefore := stats.Scanned.Load()
	h.apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: "f-1", SubmittedAt: h.now, Spec: fsm.TaskSpec{Name: "fits", TaskShape: &fsm.TaskShape{
		Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1", Resources: scheduler.Resources{CPUMillis: 100},
		TimeoutSeconds: 60, MaxAttempts: 3, Priority: 90, Submitter: "batch",
	}}})
	if n := run(); n != 1 {
		t.Fatalf("placed %d, want f-1", n)
	}
	if state, _ := h.taskState("f-1"); state != fsm.TaskScheduled {
		t.Fatalf("f-1 is %s", state)
	}
	if read := stats.Scanned.Load() - readBefore; read <= backlog {
		t.Fatalf("the pass read %d tasks to reach f-1 behind its submitter's backlog of %d", read, backlog)
	}
}

// The list of explanations due gives fresh tasks first, then explained
// ones as they fall due, and stays as large as the backlog however often
// the same tasks are listed again and explained.
func TestExplainDueStaysAsLargeAsTheBacklog(t *testing.T) {
	queued := map[string]bool{}
	explained := map[string]bool{}
	for i := range 100 {
		queued[fmt.Sprint("t", i)] = true
	}
	has := func(id string) bool { return queued[id] }
	wasExplained := func(id string) bool { return explained[id] }
	var d explainDue
	ids := slices.Sorted(maps.Keys(queued))
	for range 50 {
		d.add(ids, len(queued), has, wasExplained)
		for _, id := range ids[:10] {
			explained[id] = true
			d.again = append(d.again, dueExplain{id: id, at: passEpoch.Add(time.Minute)})
		}
		if n := len(d.fresh) + len(d.again); n > 2*len(queued)+1024+len(ids)+10 {
			t.Fatalf("%d entries for %d queued tasks", n, len(queued))
		}
	}
	delete(queued, "t50")
	d.add(nil, len(queued), has, wasExplained)
	d.limit = 0
	d.add(make([]string, 2000), len(queued), has, wasExplained) // forces a pruning
	if len(d.fresh) != 89 || len(d.again) != 10 {
		t.Fatalf("after pruning: %d fresh (want the 89 queued never explained), %d again (want one each for 10)", len(d.fresh), len(d.again))
	}
	var got []string
	for {
		id, ok := d.next(passEpoch)
		if !ok {
			break
		}
		got = append(got, id)
	}
	if len(got) != 89 {
		t.Fatalf("%d due before the explained ones fall due, want the 89 fresh", len(got))
	}
	if id, ok := d.next(passEpoch.Add(time.Minute)); !ok || !explained[id] {
		t.Fatalf("at the due time: %q %v, want an explained task", id, ok)
	}
}

// A pass's explanations are written one command per reason and time (at
// most maxExplainManyTasks tasks each, in the order they first appear)
// once every server reads that form, and one per task before; either
// way every task gets its reason.
func TestExplanationsAreWrittenOnePerReason(t *testing.T) {
	const many = maxExplainManyTasks + 88
	for _, perReason := range []bool{true, false} {
		h := newPassHarness(t)
		var explains []fsm.ExplainRequest
		for i := range many {
			id := fmt.Sprintf("a-%04d", i)
			h.submit(id, 100, nil)
			explains = append(explains, fsm.ExplainRequest{TaskID: id, Summary: "reason a", Now: h.now})
			if i%200 == 0 {
				id := fmt.Sprintf("b-%04d", i)
				h.submit(id, 100, nil)
				explains = append(explains, fsm.ExplainRequest{TaskID: id, Summary: "reason b", Now: h.now})
			}
		}
		h.submit("later", 100, nil)
		explains = append(explains, fsm.ExplainRequest{TaskID: "later", Summary: "reason a", Now: h.now.Add(time.Second)})
		cmds := encodeExplains(explains, perReason)
		var types []fsm.MessageType
		for _, c := range cmds {
			types = append(types, fsm.MessageType(c[0]))
			h.applyRaw(c)
		}
		switch {
		case perReason && (len(cmds) != 4 || types[0] != fsm.MsgExplainMany || types[3] != fsm.MsgExplainMany):
			t.Fatalf("%d commands %v, want one for reason a's first %d tasks, one for b, one for a's rest, one for a at a later time", len(cmds), types, maxExplainManyTasks)
		case !perReason && (len(cmds) != len(explains) || types[0] != fsm.MsgExplain):
			t.Fatalf("%d commands (first %v) for %d explanations, want one explain each", len(cmds), types[0], len(explains))
		}
		for _, e := range explains {
			if _, why := h.taskState(e.TaskID); why != e.Summary {
				t.Fatalf("per reason %v: %s explained %q, want %q", perReason, e.TaskID, why, e.Summary)
			}
		}
	}
}
