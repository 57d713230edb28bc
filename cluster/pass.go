package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"herd/config"
	"herd/fsm"
	"herd/scheduler"
)

// passView is what a scheduling pass reads. The Server implements it over
// its FSM, its clock and its liveness monitor; tests implement it over an
// in-memory FSM.
type passView interface {
	// State is the latest committed state.
	State() *fsm.State
	// Now is the leader's clock; every time a pass writes into a command
	// comes from it.
	Now() time.Time
	// Hibernating reports whether a node sleeps, from what the leader
	// observed of it and its committed last heartbeat and session start.
	Hibernating(nodeID string, lastHeartbeat, sessionStart, now time.Time) bool
}

// passCommitter carries a pass's decisions out of it.
type passCommitter interface {
	// Wake asks a hibernating node to wake up.
	Wake(nodeID string) error
	// Commit proposes one pass's reservations and explanations and returns
	// how many reservations the FSM accepted. It blocks until raft answers
	// or ctx ends; a pass calls it on a goroutine of its own, and the
	// calls of passes in flight at once may run concurrently.
	Commit(ctx context.Context, reserves []fsm.ReserveRequest, explains []fsm.ExplainRequest) int
}

// maxExplainsPerPass bounds how many waiting tasks one pass explains by
// checking every node against the task: a task with nodes of its own to
// avoid, or the first in the pass to ask what it asks of a node.
// maxRepeatExplainsPerPass bounds those whose requirements the pass has
// already summarized, a lookup each: a backlog of one kind is explained in a pass or a few, not in
// one pass (a view of every node, a summary over them, a commit) per 64
// tasks.
const (
	maxExplainsPerPass       = 64
	maxRepeatExplainsPerPass = 1024
)

// wakeTracker remembers, for the leader's term, which hibernating nodes
// it woke and when, and which nodes it passed over for which task.
type wakeTracker struct {
	requested  map[string]time.Time         // node → when the wake was first sent
	lastSent   map[string]time.Time         // node → last wake message
	passedOver map[string]map[string]string // task → node → why
}

// passState is what the leader's passes keep from one to the next, for
// one term. It is used by one pass at a time (the scheduling loop's
// goroutine); only the inflight record is shared with the commits.
type passState struct {
	queue     *leaderQueue
	explained map[string]time.Time // task → when its wait was last explained
	sleepers  *wakeTracker
	fl        *inflight // placements proposed and not yet answered
	commits   sync.WaitGroup
	// explainScanAfter is when a pass that finds every slot taken next
	// looks over the waiting tasks for explanations to record, so that a
	// full cluster's passes (one per finished attempt) do not each walk
	// the waiting tasks only to find them explained lately.
	explainScanAfter time.Time
	// due is when the waiting tasks' explanations are next due, for the
	// tasks a pass skips without reading them (see pass.ruleOut), and
	// skippedAfter when a pass next explains from it: at most every
	// explainScanInterval, so that a deep backlog's first explanations are
	// spread out however often passes run, as a full cluster's are.
	due          explainDue
	skippedAfter time.Time
}

func newPassState(cfg config.Scheduler) *passState {
	return &passState{
		queue:     newLeaderQueue(scheduler.QueueConfig{AgingGrace: cfg.AgingGrace, AgingInterval: cfg.AgingInterval, AgingCap: cfg.AgingCap, FailurePenalty: cfg.FailurePenalty}),
		explained: map[string]time.Time{},
		sleepers:  &wakeTracker{requested: map[string]time.Time{}, lastSent: map[string]time.Time{}, passedOver: map[string]map[string]string{}},
		fl:        newInflight(),
	}
}

// explainScanInterval is how often a full cluster's waiting tasks are
// looked over for explanations due; a task that starts waiting is
// explained within it.
func explainScanInterval(cfg config.Scheduler) time.Duration {
	return min(cfg.ExplainInterval, time.Second)
}

// forget drops what was noted about a task that left the pending set.
func (ps *passState) forget(id string) {
	delete(ps.explained, id)
	delete(ps.sleepers.passedOver, id)
}

// pass is one scheduling pass: it reads the committed state once, decides
// placements in queue order against a working copy of the nodes (so that
// it never overbooks a node itself), notes why tasks wait, and hands what
// it decided to the committer. A pass is used once, on one goroutine.
type pass struct {
	cfg         config.Scheduler
	profiles    config.Profiles
	wakeTimeout time.Duration
	view        passView
	out         passCommitter
	stats       *SchedulerStats
	logger      hclog.Logger
	ps          *passState

	// What the pass read.
	now      time.Time
	st       *fsm.State
	queue    *scheduler.Queue
	flTasks  map[string]struct{} // tasks whose placement is in flight
	flNodes  map[string]booking  // what in-flight placements book per node
	nodeByID func(string) *fsm.Node
	sessions map[string]uint64 // node → session generation
	placer   *scheduler.Placer
	fleet    *fleetView
	free     int // free slots on nodes that could take work

	// unplaceable holds the shapes and classes of tasks that fit no node
	// this pass (see consider).
	unplaceable map[unplaceableKey]bool
	// order is the pass's reading of the queue; open counts, for each
	// submitter a shape was ruled out for, its queued tasks not ruled
	// out (see ruleOut); atEnd is whether the reading ran out.
	order *scheduler.QueueIter
	open  map[string]int
	atEnd bool

	// What the pass decided.
	reserves    []fsm.ReserveRequest
	proposals   []proposal
	explains    []fsm.ExplainRequest
	explainN    int  // tasks explained by checking every node (whether or not their reason changed)
	repeatN     int  // tasks explained from a summary the pass already had
	explainScan bool // looked over waiting tasks with every slot taken
	scanned     int
	wake        time.Time // when the pass wants to run again, if sooner
}

// run runs the pass: it adds to ws what the next pass waits on, hands its
// placements to the committer (answered in the background, tracked in the
// inflight record until then) and returns how many it decided and when
// the next pass is due at the latest (zero: no deadline).
func (p *pass) run(ctx context.Context, ws fsm.WatchSet) (int, time.Time) {
	// In-flight placements are read before the view (see inflight).
	p.flTasks, p.flNodes = p.ps.fl.snapshot()
	p.st = p.view.State()
	p.now = p.view.Now().UTC()
	p.stats.Passes.Add(1)
	p.st.WatchPending(ws)
	if err := p.st.WatchNodes(ws); err != nil {
		p.logger.Error("watch nodes", "error", err)
	}
	if err := p.syncQueue(); err != nil {
		p.logger.Error("sync the pending queue", "error", err)
		return 0, time.Time{}
	}
	p.recordGauges()
	// The pass reads the queue in order only as far as it gets: placing
	// until the slots are full, then only explaining why tasks wait.
	order := p.queue.Iter(p.now)
	p.wake = p.queue.NextDue()
	if p.queue.Len() == 0 {
		return 0, p.wake
	}
	if err := p.viewNodes(); err != nil {
		p.logger.Error("list nodes", "error", err)
		return 0, p.wake
	}
	p.order = order
	p.place(order)
	if p.atEnd {
		p.explainSkipped()
	}
	p.stats.Scanned.Add(uint64(p.scanned))
	if p.explainScan && !p.explainsFull() {
		// Every task looked at was explained lately or is now; had the
		// pass stopped at its bounds on explanations, the next one goes on.
		p.ps.explainScanAfter = p.now.Add(explainScanInterval(p.cfg))
	}
	p.dispatch(ctx)
	return len(p.reserves), p.wake
}

// syncQueue brings the leader's queue up to the view.
func (p *pass) syncQueue() error {
	rebuilt, err := p.ps.queue.sync(p.st, p.ps.forget)
	if err != nil {
		return err
	}
	p.queue = p.ps.queue.q
	if rebuilt {
		// A rebuilt queue lists every task it holds as fresh.
		p.ps.due = explainDue{}
	}
	p.ps.due.add(p.ps.queue.takeFresh(), p.queue.Len(), p.queue.Has, func(id string) bool {
		_, ok := p.ps.explained[id]
		return ok
	})
	if rebuilt {
		for id := range p.ps.explained {
			if !p.queue.Has(id) {
				p.ps.forget(id)
			}
		}
		for id := range p.ps.sleepers.passedOver {
			if !p.queue.Has(id) {
				p.ps.forget(id)
			}
		}
	}
	return nil
}

// recordGauges sets the queue's depth and oldest wait.
func (p *pass) recordGauges() {
	p.stats.QueueDepth.Store(int64(p.queue.Len()))
	if oldest := p.queue.OldestQueuedAt(); !oldest.IsZero() {
		p.stats.OldestWaitMs.Store(max(p.now.Sub(oldest), 0).Milliseconds())
	} else {
		p.stats.OldestWaitMs.Store(0)
	}
}

// viewNodes builds the working copy of the nodes: each as the scheduler
// sees it, with what in-flight placements book on it and whether it
// sleeps, and counts the free slots of those that could take work.
// Counting too many only costs time; never too few.
func (p *pass) viewNodes() error {
	nodes, nodeByID, fleet, err := nodeViews(p.st, p.now, p.profiles)
	if err != nil {
		return err
	}
	p.fleet = fleet
	p.nodeByID = nodeByID
	p.sessions = make(map[string]uint64, len(nodes))
	for _, n := range nodes {
		rec := nodeByID(n.ID)
		p.sessions[n.ID] = rec.SessionGeneration
		n.Hibernating = p.view.Hibernating(n.ID, rec.LastHeartbeat.Time(), rec.SessionStartedAt.Time(), p.now)
		if b, ok := p.flNodes[n.ID]; ok {
			n.Reserved = n.Reserved.Add(b.resources)
			n.RunningAttempts += b.attempts
		}
		if !n.Hibernating {
			delete(p.ps.sleepers.requested, n.ID)
		}
		if n.Management == scheduler.ManagementActive && n.Scheduling == scheduler.SchedulingEligible && n.Liveness != scheduler.LivenessDown {
			p.free += max(n.Slots-n.RunningAttempts, 0)
		}
	}
	// Tasks with the same requirements share one ranking of the nodes for
	// the pass, kept current as the pass books nodes.
	scoring := scoringConfig(p.cfg)
	p.placer = scheduler.NewPlacer(nodes, &scoring)
	return nil
}

// place walks the queue in order until the pass has placed as many tasks
// as it may, or has nothing left to do.
func (p *pass) place(order *scheduler.QueueIter) {
	for len(p.reserves) < p.cfg.MaxPassPlacements {
		next, ok := order.Next()
		if !ok {
			p.atEnd = true
			return
		}
		if _, proposed := p.flTasks[next.ID]; proposed {
			continue // its placement is still in flight
		}
		p.scanned++
		full := p.free <= 0
		if full {
			// Every slot is taken: only explanations are left to do, for
			// tasks not explained lately, within as many tasks as a pass
			// may place, and at most every explainScanInterval.
			if p.now.Before(p.ps.explainScanAfter) {
				p.wake = earliest(p.wake, p.ps.explainScanAfter)
				return
			}
			p.explainScan = true
			if p.explainsFull() || p.scanned > p.cfg.MaxPassPlacements {
				return
			}
			if p.now.Sub(p.ps.explained[next.ID]) < p.cfg.ExplainInterval {
				continue
			}
		}
		// The queue holds each task's record as of the view (every change
		// to a pending task is in the pending feed it was synced from).
		t, ok := next.Ref.(*fsm.Task)
		if !ok {
			continue // the queue only holds records: cannot happen
		}
		p.consider(t, full)
	}
}

// unplaceableKey is what a task's fit depends on when it has no failures
// on a node: its shape (a stored spec's shared part, by identity: equal
// pointers are equal shapes) and, while a node is on probation for some
// class, its class.
type unplaceableKey struct {
	shape *fsm.TaskShape
	class string
}

// consider decides one task: a reservation on the best node, a wake-up of
// the sleeping node it waits for, or an explanation of why it waits. With
// every slot taken (full) it only explains.
func (p *pass) consider(t *fsm.Task, full bool) {
	// A task whose requirements are its spec's alone (no failures on a
	// node, no node passed over) fits nowhere this pass once another task
	// of the same shape and class did not: the pass only books nodes,
	// never frees them. Such a task is only explained, and when it needs
	// no explanation either, not even looked at, so a deep backlog nothing
	// can take costs a pass little more than walking it.
	key, keyed := unplaceableKey{}, !full && !t.HasNodeFailures() && len(p.ps.sleepers.passedOver[t.ID]) == 0
	known := false
	if keyed {
		key.shape = t.Spec.TaskShape
		if p.placer.ByClass() {
			key.class = t.Spec.ClassOf()
		}
		known = p.unplaceable[key]
		if known && (p.explainsFull() || p.now.Sub(p.ps.explained[t.ID]) < p.cfg.ExplainInterval) {
			return
		}
	}
	req := t.Request(p.now, p.cfg.HeartbeatTTL)
	p.fleet.fill(&req)
	req.Blacklist = t.Blacklist(p.nodeByID)
	req.PassedOver = p.ps.sleepers.passedOver[t.ID]
	if known {
		p.explain(t, &req)
		return
	}
	var cand scheduler.Candidate
	err := scheduler.ErrNoEligibleNode
	if !full {
		cand, err = p.placer.Select(&req)
		if keyed && errors.Is(err, scheduler.ErrNoEligibleNode) {
			// Only a refusal of the whole fleet counts for the shape: one
			// after passing a sleeping node over is this task's alone.
			if p.unplaceable == nil {
				p.unplaceable = map[unplaceableKey]bool{}
			}
			p.unplaceable[key] = true
			if !p.placer.ByClass() {
				p.ruleOut(key.shape)
			}
		}
	}
	if err == nil && cand.Node.Hibernating {
		var goOn bool
		if cand, goOn, err = p.wakeFor(t, &req, cand); !goOn {
			return
		}
	}
	if errors.Is(err, scheduler.ErrNoEligibleNode) {
		p.explain(t, &req)
		return
	}
	if err != nil {
		p.logger.Error("select", "task", t.ID, "error", err)
		return
	}
	p.reserve(t, cand)
}

// wakeFor handles a best node that sleeps: the node is woken (a message
// at most every second) and the task waits for it until WakeTimeout has
// passed since the first wake; then the node is passed over for this task
// and the task chooses again. It reports whether the pass goes on with
// the returned choice.
func (p *pass) wakeFor(t *fsm.Task, req *scheduler.Request, cand scheduler.Candidate) (scheduler.Candidate, bool, error) {
	sl := p.ps.sleepers
	id := cand.Node.ID
	first, asked := sl.requested[id]
	if !asked {
		first = p.now
		sl.requested[id] = p.now
	}
	if p.now.Sub(first) < p.wakeTimeout {
		if p.now.Sub(sl.lastSent[id]) >= time.Second {
			sl.lastSent[id] = p.now
			if err := p.out.Wake(id); err != nil {
				p.logger.Warn("could not wake node", "node", id, "error", err)
			} else {
				p.logger.Info("waking hibernating node for a task", "node", id, "task", t.ID)
			}
		}
		p.wake = earliest(p.wake, first.Add(p.wakeTimeout))
		return cand, false, nil
	}
	if sl.passedOver[t.ID] == nil {
		sl.passedOver[t.ID] = map[string]string{}
	}
	sl.passedOver[t.ID][id] = fmt.Sprintf("hibernating, did not wake within %s", p.wakeTimeout)
	p.logger.Warn("passing over a node that did not wake", "node", id, "task", t.ID)
	req.PassedOver = sl.passedOver[t.ID]
	cand, err := p.placer.Select(req)
	if err == nil && cand.Node.Hibernating {
		return cand, false, nil // the next best sleeps too: it gets woken next pass
	}
	return cand, true, err
}

// explain records why a task waits, at most every ExplainInterval per
// task, within the pass's bounds, and only when the reason changed.
func (p *pass) explain(t *fsm.Task, req *scheduler.Request) {
	if p.explainsFull() || p.now.Sub(p.ps.explained[t.ID]) < p.cfg.ExplainInterval {
		return
	}
	summary, evaluated := p.placer.Summarize(req)
	if evaluated {
		p.explainN++
	} else {
		p.repeatN++
	}
	p.stats.Explains.Add(1)
	p.ps.explained[t.ID] = p.now
	p.ps.due.again = append(p.ps.due.again, dueExplain{id: t.ID, at: p.now.Add(p.cfg.ExplainInterval)})
	if summary != t.LastExplain() {
		p.explains = append(p.explains, fsm.ExplainRequest{TaskID: t.ID, Summary: summary, Now: p.now})
	}
}

// ruleOut notes that no task of shape fits anywhere for the rest of the
// pass (the pass only books nodes), and skips in the pass's reading every
// submitter with no other task waiting: a deep backlog that fits nowhere
// costs a pass a seek, not a step per task, and the tasks queued behind
// it are reached at once. Tasks with failures on a node are never ruled
// out this way (their requirements are their own), so a submitter with
// one is always read. The skipped tasks' explanations are kept due by
// explainSkipped.
func (p *pass) ruleOut(shape *fsm.TaskShape) {
	if p.order == nil {
		return
	}
	c := p.ps.queue.shapes[shape]
	if c == nil {
		return
	}
	c.each(func(sub string, n int) {
		if p.open == nil {
			p.open = map[string]int{}
		}
		left, seen := p.open[sub]
		if !seen {
			left = p.ps.queue.subs[sub]
		}
		left -= n
		p.open[sub] = left
		if left == 0 {
			p.order.Skip(sub)
		}
	})
}

// explainSkipped explains, within the pass's bounds, the waiting tasks
// whose explanation is due and whose shape the pass found fits nowhere:
// the tasks ruleOut skipped are explained as though the pass had read
// them, oldest due first. It runs once the reading is done, so every
// task it explains was either skipped or read and left waiting.
func (p *pass) explainSkipped() {
	if len(p.unplaceable) == 0 || p.now.Before(p.ps.skippedAfter) {
		return
	}
	p.ps.skippedAfter = p.now.Add(explainScanInterval(p.cfg))
	var reserved map[string]bool
	for pops := 0; pops < maxExplainsPerPass+maxRepeatExplainsPerPass && !p.explainsFull(); pops++ {
		id, ok := p.ps.due.next(p.now)
		if !ok {
			return
		}
		ref, queued := p.queue.Ref(id)
		if !queued {
			continue
		}
		if p.now.Sub(p.ps.explained[id]) < p.cfg.ExplainInterval {
			continue // explained since: a later entry is due for it
		}
		t, _ := ref.(*fsm.Task)
		key := unplaceableKey{shape: t.Spec.TaskShape}
		if _, inflight := p.flTasks[id]; inflight || t.HasNodeFailures() || !p.unplaceable[key] {
			// Decided by reading it, now or in a later pass: due again.
			p.ps.due.again = append(p.ps.due.again, dueExplain{id: id, at: p.now.Add(p.cfg.ExplainInterval)})
			continue
		}
		if reserved == nil {
			reserved = make(map[string]bool, len(p.proposals))
			for _, pr := range p.proposals {
				reserved[pr.taskID] = true
			}
		}
		if reserved[id] {
			continue // placed by this pass before its shape ran out of room
		}
		req := t.Request(p.now, p.cfg.HeartbeatTTL)
		p.fleet.fill(&req)
		req.PassedOver = p.ps.sleepers.passedOver[id]
		p.explain(t, &req)
	}
}

// explainsFull reports whether the pass has explained all it may.
func (p *pass) explainsFull() bool {
	return p.explainN >= maxExplainsPerPass || p.repeatN >= maxRepeatExplainsPerPass
}

// reserve decides a placement and books it in the working copy, so that
// the rest of the pass sees it.
func (p *pass) reserve(t *fsm.Task, cand scheduler.Candidate) {
	p.reserves = append(p.reserves, fsm.ReserveRequest{
		TaskID: t.ID, AttemptID: newID(p.now), Number: int(t.Attempts) + 1, NodeID: cand.Node.ID,
		SessionGeneration: p.sessions[cand.Node.ID], Score: cand.Score, Now: p.now, HeartbeatTTL: p.cfg.HeartbeatTTL,
	})
	p.proposals = append(p.proposals, proposal{taskID: t.ID, nodeID: cand.Node.ID, resources: t.Spec.Resources})
	p.placer.Book(cand.Node, t.Spec.Resources)
	p.free--
}

// dispatch hands the pass's decisions to the committer on a goroutine of
// their own, tracked in the inflight record until answered.
func (p *pass) dispatch(ctx context.Context) {
	if len(p.reserves) == 0 && len(p.explains) == 0 {
		return
	}
	ps, out, reserves, explains, proposals := p.ps, p.out, p.reserves, p.explains, p.proposals
	ps.fl.add(proposals)
	ps.commits.Add(1)
	go func() {
		defer ps.commits.Done()
		ps.fl.done(proposals, out.Commit(ctx, reserves, explains))
	}()
}

// explainDue holds when the waiting tasks' explanations are due: the
// tasks queued and not explained yet (due at once), then the explained
// ones by when ExplainInterval has passed since. An entry may be stale
// (its task left or was explained again since); a reader checks.
type explainDue struct {
	fresh []string
	again []dueExplain // in the order explained, so by due time
	limit int          // the size past which add prunes (see add)
}

type dueExplain struct {
	id string
	at time.Time
}

// add lists newly queued tasks. Once the lists hold more than twice the
// queued tasks (and twice what the last pruning left) it drops the entries
// of tasks no longer queued, the fresh entries of tasks explained since
// and all but the latest entry of each task, so that they stay as large as
// the backlog however many tasks pass through it and however often each is
// explained, at a cost that is spread over the entries added.
func (d *explainDue) add(ids []string, queued int, has, explained func(id string) bool) {
	d.fresh = append(d.fresh, ids...)
	if n := len(d.fresh) + len(d.again); n <= 2*queued+1024 || n <= d.limit {
		return
	}
	seen := make(map[string]bool, len(d.fresh))
	d.fresh = slices.DeleteFunc(d.fresh, func(id string) bool {
		drop := seen[id] || !has(id) || explained(id)
		seen[id] = true
		return drop
	})
	latest := make(map[string]int, len(d.again))
	for i, e := range d.again {
		latest[e.id] = i
	}
	kept := d.again[:0]
	for i, e := range d.again {
		if latest[e.id] == i && has(e.id) {
			kept = append(kept, e)
		}
	}
	clear(d.again[len(kept):])
	d.again = kept
	d.limit = 2*(len(d.fresh)+len(d.again)) + 1024
}

// next takes the next entry due at now.
func (d *explainDue) next(now time.Time) (string, bool) {
	if len(d.fresh) > 0 {
		id := d.fresh[0]
		d.fresh[0] = ""
		d.fresh = d.fresh[1:]
		return id, true
	}
	if len(d.again) > 0 && !d.again[0].at.After(now) {
		id := d.again[0].id
		d.again[0] = dueExplain{}
		d.again = d.again[1:]
		return id, true
	}
	return "", false
}
