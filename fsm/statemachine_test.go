package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"pgregory.net/rapid"

	"herd/scheduler"
)

// machine drives one FSM through generated interleavings of everything
// the cluster asks of it, the way the leader and agents do, with some
// requests stale or wrong on purpose. Every apply is followed by
// CheckInvariants (the harness), and every step by the checks of
// checkStep.
type machine struct {
	h        *harness
	nodes    []string
	capacity map[string]scheduler.Resources
	slots    map[string]int
	cfg      scheduler.Config
	now      time.Time
	tasks    int
	attempts int
	// final holds the state of each task that reached a terminal state:
	// it never changes again (until retention forgets the task).
	final map[string]TaskState
	// done counts what the run really did, so that the generator is seen
	// to reach each part of the state.
	done map[string]int
}

func newMachine(rt *rapid.T) *machine {
	m := &machine{
		h: &harness{t: rt, f: New(nil)}, nodes: []string{"n0", "n1", "n2", "n3"},
		capacity: map[string]scheduler.Resources{}, slots: map[string]int{},
		cfg: scheduler.Config{RandomTopK: 1}, now: epoch,
		final: map[string]TaskState{}, done: map[string]int{},
	}
	for _, id := range m.nodes {
		m.capacity[id] = scheduler.Resources{
			CPUMillis: rapid.Int64Range(1000, 4000).Draw(rt, "cpu-"+id),
			MemoryMB:  rapid.Int64Range(512, 2048).Draw(rt, "mem-"+id),
			GPU:       rapid.Int64Range(0, 1).Draw(rt, "gpu-"+id),
		}
		m.slots[id] = rapid.IntRange(1, 3).Draw(rt, "slots-"+id)
		m.register(id)
	}
	// One quick success per node gives the tasks' class a fleet median,
	// so that attempts can be judged slow.
	for i, id := range m.nodes {
		task, attempt := fmt.Sprintf("w%d", i), fmt.Sprintf("w%d-a", i)
		n, _ := m.h.f.State().Node(id)
		m.h.apply(MsgSubmitTask, SubmitTaskRequest{ID: task, SubmittedAt: m.now, Spec: testSpec("")})
		m.h.applyBatch(EncodeReserve(ReserveRequest{TaskID: task, AttemptID: attempt, Number: 1, NodeID: id, SessionGeneration: n.SessionGeneration, Now: m.now, HeartbeatTTL: ttl}))
		lease := leaseOf(rt, m.h, attempt)
		m.h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: attempt, LeaseVersion: lease, Now: m.now})
		m.now = m.now.Add(time.Second)
		if r, ok := m.h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: attempt, LeaseVersion: lease, State: AttemptSucceeded, Now: m.now}).(*AttemptResult); !ok || r.Task.State != TaskSucceeded {
			rt.Fatalf("warm-up task %s on %s did not succeed: %#v", task, id, r)
		}
	}
	return m
}

func (m *machine) register(id string) {
	m.h.apply(MsgRegisterNode, RegisterNodeRequest{Now: m.now, Node: Node{
		ID: id, Capabilities: map[string][]string{"exec": {"1"}}, Resources: m.capacity[id], Slots: m.slots[id],
	}})
}

// task draws one of the tasks submitted so far (or none).
func (m *machine) task(rt *rapid.T) *Task {
	if m.tasks == 0 {
		return nil
	}
	t, _ := m.h.f.State().Task(fmt.Sprintf("t%d", rapid.IntRange(1, m.tasks).Draw(rt, "task")))
	return t
}

func (m *machine) node(rt *rapid.T) *Node {
	n, _ := m.h.f.State().Node(rapid.SampledFrom(m.nodes).Draw(rt, "node"))
	return n
}

// attempt draws one attempt: mostly a live one, sometimes any attempt
// of a drawn task, ended or live.
func (m *machine) attempt(rt *rapid.T) *Attempt {
	st := m.h.f.State()
	if rapid.IntRange(0, 3).Draw(rt, "any") > 0 {
		var live []*Attempt
		for _, s := range []AttemptState{AttemptReserved, AttemptRunning} {
			as, _ := st.AttemptsInState(s)
			live = append(live, as...)
		}
		if len(live) > 0 {
			return rapid.SampledFrom(live).Draw(rt, "live")
		}
	}
	t := m.task(rt)
	if t == nil {
		return nil
	}
	all, _ := st.AttemptsOfTask(t.ID)
	if len(all) == 0 {
		return nil
	}
	return rapid.SampledFrom(all).Draw(rt, "attempt")
}

func (m *machine) count(what string, ok bool) {
	if ok {
		m.done[what]++
	}
}

func isErr(v any) bool { _, ok := v.(error); return ok }

func (m *machine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"submit": func(rt *rapid.T) {
			m.tasks++
			spec := testSpec("")
			spec.Resources = scheduler.Resources{
				CPUMillis: rapid.Int64Range(0, 1500).Draw(rt, "tcpu"),
				MemoryMB:  rapid.Int64Range(0, 512).Draw(rt, "tmem"),
				GPU:       rapid.Int64Range(0, 1).Draw(rt, "tgpu"),
			}
			spec.MaxAttempts = rapid.IntRange(1, 3).Draw(rt, "max")
			// Mostly speculative, so that slow attempts' backups are
			// common enough to be reached in every run of the test.
			spec.Speculative = rapid.IntRange(0, 3).Draw(rt, "speculative") > 0
			m.h.apply(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprintf("t%d", m.tasks), SubmittedAt: m.now, Spec: spec})
		},
		// place: what the leader's scheduler chooses for a pending task,
		// over the current state, as the leader commits it.
		"place": func(rt *rapid.T) {
			st := m.h.f.State()
			pending, _ := st.PendingTasks(nil)
			if len(pending) == 0 {
				return
			}
			t := rapid.SampledFrom(pending).Draw(rt, "pending")
			if t.NotBefore().After(StampOf(m.now)) {
				return
			}
			nodes, _ := st.Nodes()
			byID := map[string]*Node{}
			views := make([]*scheduler.Node, 0, len(nodes))
			for _, n := range nodes {
				v := n.View()
				views = append(views, &v)
				byID[n.ID] = n
			}
			req := t.Request(m.now, 0)
			req.Blacklist = t.Blacklist(func(id string) *Node { return byID[id] })
			cand, err := scheduler.Select(views, &req, &m.cfg)
			if err != nil {
				return
			}
			n := byID[cand.Node.ID]
			m.attempts++
			r := m.h.applyBatch(EncodeReserve(ReserveRequest{TaskID: t.ID, AttemptID: fmt.Sprintf("a%d", m.attempts), Number: int(t.Attempts) + 1,
				NodeID: n.ID, SessionGeneration: n.SessionGeneration, Score: cand.Score, Now: m.now, HeartbeatTTL: ttl}))
			m.count("placed", !isErr(r[0]))
		},
		// stale place: one or two reservations decided from one view, on
		// any node, sometimes with a wrong attempt number or session.
		"stale place": func(rt *rapid.T) {
			var cmds [][]byte
			for range rapid.IntRange(1, 2).Draw(rt, "deciders") {
				t, n := m.task(rt), m.node(rt)
				if t == nil {
					return
				}
				number, gen := int(t.Attempts)+1-rapid.IntRange(0, 1).Draw(rt, "numoff"), n.SessionGeneration-uint64(rapid.IntRange(0, 1).Draw(rt, "genoff"))
				m.attempts++
				cmds = append(cmds, EncodeReserve(ReserveRequest{TaskID: t.ID, AttemptID: fmt.Sprintf("a%d", m.attempts), Number: number,
					NodeID: n.ID, SessionGeneration: gen, Now: m.now, HeartbeatTTL: ttl}))
			}
			for _, r := range m.h.applyBatch(cmds...) {
				m.count("placed", !isErr(r))
			}
		},
		"start": func(rt *rapid.T) {
			if a := m.attempt(rt); a != nil {
				lease := a.LeaseVersion + uint64(rapid.IntRange(0, 4).Draw(rt, "leaseoff")/4)
				m.count("started", !isErr(m.h.apply(MsgAttemptStart, AttemptStartRequest{AttemptID: a.ID, LeaseVersion: lease, Now: m.now})))
			}
		},
		// report: an agent's result for any attempt, current or not, with
		// the right lease or a stale one; failures retry after a backoff.
		"report": func(rt *rapid.T) {
			if a := m.attempt(rt); a != nil {
				lease := a.LeaseVersion + uint64(rapid.IntRange(0, 4).Draw(rt, "leaseoff")/4)
				state := rapid.SampledFrom([]AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptLost, AttemptCancelled}).Draw(rt, "end")
				r := m.h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: a.ID, LeaseVersion: lease, State: state, ExitCode: 1, Now: m.now,
					RetryAt:          m.now.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, "backoff")) * time.Second),
					InputUnavailable: state == AttemptLost && rapid.Bool().Draw(rt, "input")})
				res, ok := r.(*AttemptResult)
				m.count("reported", ok && !res.Duplicate)
			}
		},
		// run: an agent's start and result in one command, for an
		// attempt that ended before its start was reported.
		"run": func(rt *rapid.T) {
			if a := m.attempt(rt); a != nil {
				lease := a.LeaseVersion + uint64(rapid.IntRange(0, 4).Draw(rt, "leaseoff")/4)
				state := rapid.SampledFrom([]AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut}).Draw(rt, "end")
				r := m.h.apply(MsgAttemptRun, AttemptRunRequest{StartedAt: m.now, End: AttemptEndRequest{AttemptID: a.ID, LeaseVersion: lease, State: state,
					ExitCode: 1, Now: m.now, RetryAt: m.now.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, "backoff")) * time.Second)}})
				res, ok := r.(*AttemptRunResult)
				m.count("ran", ok && res.End != nil && !res.End.Duplicate)
			}
		},
		// reclaim: the leader's end of an attempt never started.
		"reclaim": func(rt *rapid.T) {
			if a := m.attempt(rt); a != nil {
				r := m.h.apply(MsgAttemptEnd, AttemptEndRequest{AttemptID: a.ID, LeaseVersion: a.LeaseVersion, State: AttemptLost, ExitCode: -1,
					Error: "reclaimed: not started", Now: m.now, RetryAt: m.now, OnlyReserved: true})
				m.count("reclaimed", !isErr(r))
			}
		},
		"cancel": func(rt *rapid.T) {
			if t := m.task(rt); t != nil {
				m.count("cancelled", !isErr(m.h.apply(MsgCancelTask, CancelTaskRequest{TaskID: t.ID, Now: m.now})))
			}
		},
		// slow and backup: a speculative task's slow attempt gets a second
		// one on another node.
		"slow": func(rt *rapid.T) {
			// Mostly a running attempt, the only kind that can be slow.
			a := m.attempt(rt)
			if running, _ := m.h.f.State().AttemptsInState(AttemptRunning); len(running) > 0 && rapid.IntRange(0, 3).Draw(rt, "running") > 0 {
				a = rapid.SampledFrom(running).Draw(rt, "slow attempt")
			}
			if a != nil {
				r := m.h.apply(MsgAttemptSlow, AttemptSlowRequest{AttemptID: a.ID, Now: m.now})
				m.count("slow", !isErr(r))
				if res, ok := r.(*AttemptResult); ok && res.Task.Spec.Speculative && rapid.IntRange(0, 3).Draw(rt, "backup now") > 0 {
					m.backup(rt, res.Task)
				}
			}
		},
		"backup": func(rt *rapid.T) {
			// Mostly a task whose current attempt was marked slow.
			t := m.task(rt)
			running, _ := m.h.f.State().AttemptsInState(AttemptRunning)
			for _, a := range running {
				if st, _ := m.h.f.State().Task(a.TaskID); st != nil && st.CurrentSlow() {
					t = st
				}
			}
			if t != nil {
				m.backup(rt, t)
			}
		},
		// node down: gossip's verdict, retried at once; lease expiry: the
		// missed heartbeats', retried once the agent's lease ran out.
		"node down": func(rt *rapid.T) {
			n := m.node(rt)
			r := m.h.apply(MsgNodeDown, NodeDownRequest{NodeID: n.ID, Reason: "gossip: dead", Now: m.now})
			m.count("down", !isErr(r))
		},
		"lease expiry": func(rt *rapid.T) {
			n := m.node(rt)
			r := m.h.apply(MsgNodeDown, NodeDownRequest{NodeID: n.ID, Reason: "5 heartbeats missed", Now: m.now, RetryAt: m.now.Add(ttl)})
			m.count("expired", !isErr(r))
		},
		// node up: the agent registers again, a new session.
		"node up": func(rt *rapid.T) { m.register(m.node(rt).ID) },
		"suspect": func(rt *rapid.T) {
			n := m.node(rt)
			l := rapid.SampledFrom([]scheduler.Liveness{scheduler.LivenessSuspect, scheduler.LivenessReady}).Draw(rt, "liveness")
			m.h.apply(MsgNodeLiveness, NodeLivenessRequest{NodeID: n.ID, SessionGeneration: n.SessionGeneration, Liveness: string(l), Reason: "test", Now: m.now})
		},
		"drain": func(rt *rapid.T) {
			m.h.apply(MsgNodeDrain, NodeDrainRequest{NodeID: m.node(rt).ID, Enable: rapid.Bool().Draw(rt, "drain"), Now: m.now})
		},
		"eligible": func(rt *rapid.T) {
			m.h.apply(MsgNodeEligible, NodeEligibilityRequest{NodeID: m.node(rt).ID, Eligible: rapid.Bool().Draw(rt, "eligible"), Now: m.now})
		},
		// forget: retention drops some tasks, finished or not (Apply
		// keeps those that are not).
		"forget": func(rt *rapid.T) {
			if t := m.task(rt); t != nil {
				m.h.apply(MsgForgetTasks, ForgetTasksRequest{TaskIDs: []string{t.ID}})
				if _, err := m.h.f.State().Task(t.ID); err != nil {
					delete(m.final, t.ID)
					m.done["forgotten"]++
				}
			}
		},
		// Restored from either snapshot version, the state is the same:
		// its version 1 bytes (every field in JSON) and its version 2
		// bytes are the source's.
		"snapshot and restore": func(rt *rapid.T) {
			version := rapid.SampledFrom([]int{snapshotJSON, snapshotFramed}).Draw(rt, "snapshot version")
			var snap, json1 bytes.Buffer
			if err := writeSnapshotAs(&snap, m.h.f.State(), version); err != nil {
				rt.Fatal(err)
			}
			if err := m.h.f.State().Dump(&json1); err != nil {
				rt.Fatal(err)
			}
			restored := New(nil)
			if err := restored.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
				rt.Fatalf("restore version %d: %v", version, err)
			}
			var again, snapAgain bytes.Buffer
			if err := restored.State().Dump(&again); err != nil {
				rt.Fatal(err)
			}
			if err := writeSnapshotAs(&snapAgain, restored.State(), version); err != nil {
				rt.Fatal(err)
			}
			if !bytes.Equal(json1.Bytes(), again.Bytes()) || !bytes.Equal(snap.Bytes(), snapAgain.Bytes()) {
				rt.Fatalf("the state restored from version %d writes different bytes", version)
			}
			if err := restored.State().CheckInvariants(); err != nil {
				rt.Fatalf("restored state: %v", err)
			}
			m.h.f = restored
			m.done["restored"]++
		},
		"time passes": func(rt *rapid.T) {
			m.now = m.now.Add(time.Duration(rapid.IntRange(1, 30).Draw(rt, "seconds")) * time.Second)
		},
	}
}

// backup proposes a backup attempt of t on every node in one batch, as
// leaders that each saw a free node might: at most one wins.
func (m *machine) backup(rt *rapid.T, t *Task) {
	var cmds [][]byte
	for _, id := range m.nodes {
		n, _ := m.h.f.State().Node(id)
		m.attempts++
		cmds = append(cmds, EncodeReserve(ReserveRequest{TaskID: t.ID, AttemptID: fmt.Sprintf("a%d", m.attempts), Number: int(t.Attempts) + 1,
			NodeID: n.ID, SessionGeneration: n.SessionGeneration, Now: m.now, HeartbeatTTL: ttl, Backup: true}))
	}
	won := 0
	for _, r := range m.h.applyBatch(cmds...) {
		if !isErr(r) {
			won++
		}
	}
	if won > 1 {
		rt.Fatalf("task %s got %d backups from one batch", t.ID, won)
	}
	m.count("backups", won == 1)
}

// checkStep verifies what holds between steps beyond CheckInvariants: a
// task that finished stays finished with the same outcome.
func (m *machine) checkStep(rt *rapid.T) {
	st := m.h.f.State()
	for id, want := range m.final {
		t, err := st.Task(id)
		if err != nil {
			rt.Fatalf("finished task %s vanished without retention: %v", id, err)
		}
		if t.State != want {
			rt.Fatalf("task %s finished %s, now %s", id, want, t.State)
		}
	}
	for i := 1; i <= m.tasks; i++ {
		if t, err := st.Task(fmt.Sprintf("t%d", i)); err == nil && t.State.Terminal() {
			m.final[t.ID] = t.State
		}
	}
}

// weights is how often each action is drawn: the work's own path
// (submit, place, start, report) most, faults less, so that tasks get
// far enough for faults to meet them.
var weights = []struct {
	name string
	n    int
}{
	{"place", 8}, {"start", 6}, {"report", 6}, {"run", 2}, {"submit", 4}, {"time passes", 3}, {"stale place", 2},
	{"slow", 4}, {"backup", 2}, {"reclaim", 1}, {"cancel", 1}, {"node down", 1}, {"lease expiry", 1},
	{"node up", 2}, {"suspect", 1}, {"drain", 1}, {"eligible", 1}, {"forget", 1}, {"snapshot and restore", 1},
}

// Property: any interleaving of submit, place (the scheduler's choice and
// stale or wrong proposals), start, report, reclaim, cancel, retries
// after backoff, slow attempts and their backups, node down, lease
// expiry, node up, liveness changes, drain, eligibility, retention and
// snapshot/restore keeps the state's invariants after every apply, a
// restored state identical to its source, and finished tasks finished.
// The runs together take at least 10,000 steps and reach every action's
// effect.
func TestStateMachineProperty(t *testing.T) {
	total := 0
	done := map[string]int{}
	effects := []string{"placed", "started", "reported", "ran", "reclaimed", "cancelled", "slow", "backups", "down", "expired", "forgotten", "restored"}
	missing := func() []string {
		var out []string
		for _, what := range effects {
			if done[what] == 0 {
				out = append(out, what)
			}
		}
		return out
	}
	property := func(rt *rapid.T) {
		m := newMachine(rt)
		actions := m.actions()
		var names []string
		for _, w := range weights {
			for range w.n {
				names = append(names, w.name)
			}
		}
		steps := rapid.IntRange(100, 200).Draw(rt, "steps")
		for range steps {
			m.now = m.now.Add(time.Second)
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
			m.checkStep(rt)
		}
		total += steps
		for k, v := range m.done {
			done[k] += v
		}
	}
	// A backup needs a speculative task whose attempt ran slow while a
	// node was free, which a run of random draws now and then never
	// meets: another run of the property (never fewer checks) goes on
	// until every effect was reached, three runs at most.
	for round := 0; round < 3 && (round == 0 || len(missing()) > 0); round++ {
		rapid.Check(t, property)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d steps; effects %v", total, done)
	if total < 10_000 && !testing.Short() {
		t.Errorf("only %d steps ran (-rapid.checks too low?), want at least 10,000", total)
	}
	for _, what := range missing() {
		t.Errorf("the generator never %s anything: %v", what, done)
	}
}
