package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"herd/fsm"
	"herd/scheduler"
)

// Options are what a run may change besides the scenario: the profile
// settings to judge with (the defaults when nil), and the oracle run,
// which leaves every bad node out of the fleet (it knows the truth).
type Options struct {
	Settings *fsm.ProfileSettings
	Oracle   bool
}

// The leader's timings the simulation follows.
const (
	tick           = time.Second
	healthAnswer   = 2 * time.Second        // an agent answers a health check
	healthRecheck  = 30 * time.Second       // a failed check is asked again
	fastFailure    = 50 * time.Millisecond  // a black hole's attempt
	badTaskFailure = 200 * time.Millisecond // a bad task's attempt
	retryBackoff   = 2 * time.Second
)

// epoch is the simulated clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// taskTruth is what a task truly is.
type taskTruth int

const (
	taskGood      taskTruth = iota
	taskBad                 // fails everywhere
	taskSmallFail           // fails on nodes under 4 cores
)

type simNode struct {
	id    string
	group NodeGroup
	down  bool
	// onset is when its defect begins (a bad kind's; before it, healthy).
	onset time.Time
	// known are the classes it succeeded at before its onset (what a
	// new-class hole still runs).
	known map[string]bool
	// What the cluster judged, and when.
	firstQuarantine time.Time
	quarantines     int
	demoted         bool
	firstDemotion   time.Time
	wasQuarantined  bool
	// failedBefore counts the attempts of good tasks that failed here
	// through the node's fault before its first quarantine (the attempts
	// a black hole ate); afterEvidence those of them placed after the
	// first such failure ended, when the cluster had evidence.
	failedBefore  int
	afterEvidence int
	firstFailure  time.Time
}

type simTask struct {
	id      string
	class   string
	truth   taskTruth
	arrived time.Time
	median  time.Duration
	done    time.Time
	state   fsm.TaskState
}

// event is something due at a simulated time.
type event struct {
	at   time.Time
	seq  uint64
	kind int
	// For ends: the attempt, how it ends, when it started and whether
	// the node's fault ended it.
	attempt string
	lease   uint64
	state   fsm.AttemptState
	node    string
	started time.Time
	fault   bool
	check   uint64
	passed  bool
}

const (
	evEnd = iota
	evCheck
	evFlapDown
	evFlapUp
)

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// runner is one simulation.
type runner struct {
	sc      Scenario
	opt     Options
	f       *fsm.FSM
	index   uint64
	now     time.Time
	rng     *rand.Rand
	queue   events
	seq     uint64
	nodes   map[string]*simNode
	order   []string // node ids, sorted
	tasks   map[string]*simTask
	taskIDs []string
	// hung attempts: start time and class median, to score the flag.
	hung     map[string]hungAttempt
	slowSeen map[string]bool
	settings fsm.ProfileSettings
	cfg      scheduler.Config
	// counts
	attempts, failedAttempts int
	commands                 int
	backups                  int
}

type hungAttempt struct {
	start time.Time
	flag  time.Duration // from start to the slow mark, 0 until marked
	// limit is the highest slow threshold in force while it ran (5× the
	// class's fleet median, or the floor): the median moves as runs end.
	limit time.Duration
	// median is the class's true median on a node of speed 1.
	median time.Duration
}

// Run simulates a scenario and scores the cluster's judgements.
func Run(sc Scenario, opt Options) (*Report, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	r := &runner{
		sc: sc, opt: opt, f: fsm.New(nil), now: epoch,
		rng:   rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15)),
		nodes: map[string]*simNode{}, tasks: map[string]*simTask{}, hung: map[string]hungAttempt{}, slowSeen: map[string]bool{},
		settings: fsm.DefaultProfileSettings(),
		cfg:      scheduler.Config{ProfileScale: 200_000, ProfileWeights: scheduler.DefaultProfileWeights(), RandomTopK: 3, SpreadWindow: 20_000},
	}
	if opt.Settings != nil {
		if err := opt.Settings.Validate(); err != nil {
			return nil, err
		}
		r.settings = *opt.Settings
	}
	if err := r.setup(); err != nil {
		return nil, err
	}
	if err := r.loop(); err != nil {
		return nil, err
	}
	// The judgements are only worth scoring over a state that kept the
	// promise.
	if err := r.f.State().CheckInvariants(); err != nil {
		return nil, fmt.Errorf("the simulated cluster's state broke an invariant: %w", err)
	}
	return r.report(), nil
}

// apply commits one command to the simulated cluster's FSM.
func (r *runner) apply(t fsm.MessageType, payload any) (any, error) {
	b, err := fsm.Encode(t, payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	r.index++
	r.commands++
	res := r.f.ApplyBytes(r.index, b)
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

func (r *runner) push(e *event) {
	r.seq++
	e.seq = r.seq
	heap.Push(&r.queue, e)
}

func (r *runner) setup() error {
	if _, err := r.apply(fsm.MsgProfileSettings, fsm.ProfileSettingsRequest{Settings: r.settings, Now: r.now}); err != nil {
		return fmt.Errorf("profile settings: %w", err)
	}
	for gi, g := range r.sc.Nodes {
		if r.opt.Oracle && bad(g.Kind) {
			continue
		}
		for i := 0; i < g.Count; i++ {
			id := fmt.Sprintf("%s-%02d-%03d", g.Kind, gi, i)
			sn := &simNode{id: id, group: g, onset: r.now, known: map[string]bool{}}
			if g.OnsetWithin > 0 {
				sn.onset = r.now.Add(time.Duration(r.rng.Int64N(int64(g.OnsetWithin))))
			}
			r.nodes[id] = sn
			r.order = append(r.order, id)
			if err := r.register(id); err != nil {
				return err
			}
			if g.Kind == KindFlapping {
				// Staggered, so the flapping nodes do not all go at once.
				first := time.Duration(r.rng.Int64N(int64(r.sc.FlapEvery)))
				r.push(&event{at: r.now.Add(first), kind: evFlapDown, node: id})
			}
		}
	}
	slices.Sort(r.order)
	return nil
}

func (r *runner) register(id string) error {
	g := r.nodes[id].group
	_, err := r.apply(fsm.MsgRegisterNode, fsm.RegisterNodeRequest{Now: r.now, Node: fsm.Node{
		ID: id, Capabilities: map[string][]string{"exec": {"1"}}, Slots: g.Slots,
		Resources: scheduler.Resources{CPUMillis: int64(g.Cores) * 1000, MemoryMB: g.MemoryMB, DiskMB: 100_000},
	}})
	if err != nil {
		return fmt.Errorf("register %s: %w", id, err)
	}
	return nil
}

// loop advances the clock a tick at a time: arrivals, due events, the
// leader's duties, placements; until every task is done after the
// arrivals end, or the drain time is over.
func (r *runner) loop() error {
	end := epoch.Add(time.Duration(r.sc.Duration))
	limit := end.Add(time.Duration(r.sc.Drain))
	perTick := r.sc.ArrivalsPerMinute / 60 * tick.Seconds()
	for r.now.Before(limit) {
		if r.now.Before(end) {
			for n := poisson(r.rng, perTick); n > 0; n-- {
				if err := r.arrive(); err != nil {
					return err
				}
			}
		} else if r.allDone() {
			break
		}
		next := r.now.Add(tick)
		for len(r.queue) > 0 && r.queue[0].at.Before(next) {
			e := heap.Pop(&r.queue).(*event)
			r.now = e.at
			if err := r.handle(e); err != nil {
				return err
			}
		}
		r.now = next
		if err := r.leaderDuties(); err != nil {
			return err
		}
		if err := r.place(); err != nil {
			return err
		}
		r.observe()
	}
	return nil
}

func (r *runner) allDone() bool {
	for _, t := range r.tasks {
		if !t.state.Terminal() {
			return false
		}
	}
	return true
}

// poisson draws from a Poisson distribution of mean lambda (Knuth's
// method for small means, a rounded normal for large ones).
func poisson(rng *rand.Rand, lambda float64) int {
	if lambda > 30 {
		return max(int(math.Round(lambda+math.Sqrt(lambda)*rng.NormFloat64())), 0)
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// arrive submits a new task, of a class drawn by share, with its truth.
func (r *runner) arrive() error {
	id := "t" + strconv.Itoa(len(r.taskIDs)+1)
	st := &simTask{id: id, arrived: r.now}
	x := r.rng.Float64()
	switch {
	case x < r.sc.BadTaskShare:
		st.truth = taskBad
	case x < r.sc.BadTaskShare+r.sc.SmallFailShare:
		st.truth = taskSmallFail
	}
	var total float64
	for _, c := range r.sc.Classes {
		total += c.Share
	}
	pick := r.rng.Float64() * total
	c := r.sc.Classes[len(r.sc.Classes)-1]
	for _, cc := range r.sc.Classes {
		if pick < cc.Share {
			c = cc
			break
		}
		pick -= cc.Share
	}
	st.class, st.median = c.Name, time.Duration(c.Median)
	if r.sc.NewClassShare > 0 && r.rng.Float64() < r.sc.NewClassShare {
		// A class's runs take alike: each new class borrows one base
		// class's time.
		gen := int(r.now.Sub(epoch) / time.Duration(r.sc.NewClassEvery))
		st.class = freshPrefix + strconv.Itoa(gen)
		st.median = time.Duration(r.sc.Classes[gen%len(r.sc.Classes)].Median)
	}
	timeout := max(10*st.median, time.Minute)
	spec := fsm.TaskSpec{Name: st.class, TaskShape: &fsm.TaskShape{
		Priority: 50, Command: []string{"work"}, Capability: "exec", CapabilityVersion: "1",
		Resources: scheduler.Resources{CPUMillis: 1000, MemoryMB: 512}, TimeoutSeconds: int64(timeout / time.Second),
		MaxAttempts: r.sc.MaxAttempts, Submitter: "sim", Class: st.class,
		Speculative: r.rng.Float64() < r.sc.SpeculativeShare,
	}}
	if _, err := r.apply(fsm.MsgSubmitTask, fsm.SubmitTaskRequest{ID: id, SubmittedAt: r.now, Spec: spec}); err != nil {
		return fmt.Errorf("submit %s: %w", id, err)
	}
	st.state = fsm.TaskPending
	r.tasks[id] = st
	r.taskIDs = append(r.taskIDs, id)
	return nil
}

// handle applies a due event.
func (r *runner) handle(e *event) error {
	switch e.kind {
	case evEnd:
		a, err := r.f.State().Attempt(e.attempt)
		if err != nil || a.LeaseVersion != e.lease || a.State.Terminal() {
			return nil // reclaimed meanwhile (a flap)
		}
		retry := r.now.Add(retryBackoff)
		res, err := r.apply(fsm.MsgAttemptEnd, fsm.AttemptEndRequest{AttemptID: e.attempt, LeaseVersion: e.lease, State: e.state, ExitCode: exitCode(e.state), Now: r.now, RetryAt: retry})
		if err != nil {
			return nil // stale: the attempt was taken back
		}
		if e.state != fsm.AttemptSucceeded {
			r.failedAttempts++
			if n := r.nodes[e.node]; n != nil && e.fault && n.firstQuarantine.IsZero() {
				n.failedBefore++
				if n.firstFailure.IsZero() {
					n.firstFailure = r.now
				} else if e.started.After(n.firstFailure) || e.started.Equal(n.firstFailure) {
					n.afterEvidence++
				}
			}
		}
		if n := r.nodes[e.node]; n != nil && e.state == fsm.AttemptSucceeded && e.started.Before(n.onset) {
			if t := res.(*fsm.AttemptResult).Task; t != nil {
				n.known[t.Spec.ClassOf()] = true
			}
		}
		if t := res.(*fsm.AttemptResult).Task; t != nil {
			st := r.tasks[t.ID]
			st.state = t.State
			if t.State.Terminal() {
				st.done = r.now
			}
		}
	case evCheck:
		_, _ = r.apply(fsm.MsgNodeHealthCheck, fsm.NodeHealthCheckRequest{NodeID: e.node, Op: fsm.HealthCheckResult, Seq: e.check, Passed: e.passed, Now: r.now})
	case evFlapDown:
		n := r.nodes[e.node]
		n.down = true
		_, _ = r.apply(fsm.MsgNodeDown, fsm.NodeDownRequest{NodeID: e.node, Reason: "link lost (simulated)", Now: r.now})
		r.refreshTasks()
		r.push(&event{at: r.now.Add(time.Duration(r.sc.FlapFor)), kind: evFlapUp, node: e.node})
	case evFlapUp:
		r.nodes[e.node].down = false
		if err := r.register(e.node); err != nil {
			return err
		}
		r.push(&event{at: r.now.Add(time.Duration(r.sc.FlapEvery)), kind: evFlapDown, node: e.node})
	}
	return nil
}

func exitCode(s fsm.AttemptState) int {
	if s == fsm.AttemptSucceeded {
		return 0
	}
	return 1
}

// refreshTasks reads every unfinished task's state back (a node's
// verdict of DOWN requeues its tasks without an event of ours).
func (r *runner) refreshTasks() {
	st := r.f.State()
	for _, id := range r.taskIDs {
		t := r.tasks[id]
		if t.state.Terminal() {
			continue
		}
		if ft, err := st.Task(id); err == nil {
			t.state = ft.State
		}
	}
}

// leaderDuties does what the leader's profile loop does: health checks
// and promotions that time makes due, answers to the checks asked, and
// slow marks of running attempts past their class's threshold.
func (r *runner) leaderDuties() error {
	st := r.f.State()
	nodes, _ := st.Nodes()
	for _, n := range nodes {
		if hc := n.HealthCheck; hc.Requested > hc.Answered && !r.slowSeen["check-"+n.ID+strconv.FormatUint(hc.Requested, 10)] {
			r.slowSeen["check-"+n.ID+strconv.FormatUint(hc.Requested, 10)] = true
			sn := r.nodes[n.ID]
			passed := sn.group.Kind != KindBlackHole || r.now.Before(sn.onset)
			r.push(&event{at: r.now.Add(healthAnswer), kind: evCheck, node: n.ID, check: hc.Requested, passed: passed})
		}
		op, why := fsm.ProfileDue(n, time.Duration(r.settings.DwellMs)*time.Millisecond, healthRecheck, r.now)
		switch op {
		case fsm.TierOpPromote:
			_, _ = r.apply(fsm.MsgNodeTier, fsm.NodeTierRequest{NodeID: n.ID, Op: fsm.TierOpPromote, Now: r.now})
		case fsm.HealthCheckRequest:
			_, _ = r.apply(fsm.MsgNodeHealthCheck, fsm.NodeHealthCheckRequest{NodeID: n.ID, Op: fsm.HealthCheckRequest, Why: why, Now: r.now})
		}
	}
	running, _ := st.AttemptsInState(fsm.AttemptRunning)
	for _, a := range running {
		t, err := st.Task(a.TaskID)
		if err != nil {
			continue
		}
		if t.CurrentSlow() {
			if t.Spec.Speculative && t.CurrentAttempt() == a.ID && st.BackupAttempt(t) == "" {
				if err := r.backup(t, a); err != nil {
					return err
				}
			}
			continue
		}
		if r.slowSeen[a.ID] || t.CurrentAttempt() != a.ID {
			continue
		}
		limit, ok := st.SlowThreshold(t.Spec.ClassOf(), a.NodeID)
		if h, hung := r.hung[a.ID]; hung && ok && limit > h.limit {
			h.limit = limit
			r.hung[a.ID] = h
		}
		if !ok || r.now.Sub(a.StartedAt.Time()) < limit {
			continue
		}
		r.slowSeen[a.ID] = true
		if _, err := r.apply(fsm.MsgAttemptSlow, fsm.AttemptSlowRequest{AttemptID: a.ID, Now: r.now}); err == nil {
			if h, ok := r.hung[a.ID]; ok {
				h.flag = r.now.Sub(h.start)
				r.hung[a.ID] = h
			}
		}
	}
	return nil
}

// backup does what the leader does for a speculative task whose attempt
// is slow: a backup attempt on the best other node that fits.
func (r *runner) backup(t *fsm.Task, slow *fsm.Attempt) error {
	st := r.f.State()
	nodes, _ := st.Nodes()
	views := make([]*scheduler.Node, 0, len(nodes))
	for _, n := range nodes {
		v := n.View()
		views = append(views, &v)
	}
	req := t.Request(r.now, 0)
	req.Blacklist = map[string]bool{slow.NodeID: true}
	req.ClassMedianMillis = st.Class(req.Class).Median()
	cand, err := scheduler.Select(views, &req, &r.cfg)
	if err != nil {
		return nil // no node fits: the next look tries again
	}
	r.backups++
	return r.startAttempt(t, cand, true)
}

// place does what the leader's placement pass does: every pending task
// whose backoff is over, oldest first, goes to the node the scheduler
// selects, reserved and started through the FSM.
func (r *runner) place() error {
	st := r.f.State()
	pending, _ := st.PendingTasks(nil)
	if len(pending) == 0 {
		return nil
	}
	nodes, _ := st.Nodes()
	views := make([]*scheduler.Node, 0, len(nodes))
	byID := make(map[string]*fsm.Node, len(nodes))
	free := 0
	for _, n := range nodes {
		v := n.View()
		views = append(views, &v)
		byID[n.ID] = n
		if v.Management == scheduler.ManagementActive && v.Liveness == scheduler.LivenessReady && v.Quarantine == "" {
			free += max(v.Slots-v.RunningAttempts, 0)
		}
	}
	if free == 0 {
		return nil
	}
	medians := map[string]int64{}
	for _, t := range pending {
		if free == 0 {
			break
		}
		if t.NotBefore().After(fsm.StampOf(r.now)) {
			continue
		}
		req := t.Request(r.now, 0)
		req.Blacklist = t.Blacklist(func(id string) *fsm.Node { return byID[id] })
		m, ok := medians[req.Class]
		if !ok {
			m = st.Class(req.Class).Median()
			medians[req.Class] = m
		}
		req.ClassMedianMillis = m
		cand, err := scheduler.Select(views, &req, &r.cfg)
		if err != nil {
			continue
		}
		if err := r.start(t, cand); err != nil {
			return err
		}
		cand.Node.RunningAttempts++
		cand.Node.Reserved = cand.Node.Reserved.Add(req.Resources)
		free--
	}
	return nil
}

// start reserves and starts the task's next attempt on the chosen node
// and schedules its end as the truth decides.
func (r *runner) start(t *fsm.Task, cand scheduler.Candidate) error {
	return r.startAttempt(t, cand, false)
}

func (r *runner) startAttempt(t *fsm.Task, cand scheduler.Candidate, backup bool) error {
	number := int(t.Attempts) + 1
	attempt := t.ID + "-" + strconv.Itoa(number)
	n, err := r.f.State().Node(cand.Node.ID)
	if err != nil {
		return err
	}
	res, err := r.apply(fsm.MsgReserve, fsm.ReserveRequest{TaskID: t.ID, AttemptID: attempt, Number: number, NodeID: n.ID, SessionGeneration: n.SessionGeneration, Score: cand.Score, Now: r.now, Backup: backup})
	if err != nil {
		return nil // refused at apply: the next pass tries again
	}
	lease := res.(*fsm.ReserveResult).Attempt.LeaseVersion
	if _, err := r.apply(fsm.MsgAttemptStart, fsm.AttemptStartRequest{AttemptID: attempt, LeaseVersion: lease, Now: r.now}); err != nil {
		return fmt.Errorf("start %s: %w", attempt, err)
	}
	r.attempts++
	st := r.tasks[t.ID]
	st.state = fsm.TaskRunning
	sn := r.nodes[n.ID]
	d, state, fault := r.outcome(st, sn, t.Spec.TimeoutSeconds)
	if sn.group.Kind == KindHung && fault {
		// Scored against the class's median as the cluster knew it when
		// the attempt started; a class without one cannot be judged.
		if limit, ok := r.f.State().SlowThreshold(t.Spec.ClassOf(), n.ID); ok {
			r.hung[attempt] = hungAttempt{start: r.now, limit: limit, median: st.median}
		}
	}
	r.push(&event{at: r.now.Add(d), kind: evEnd, attempt: attempt, lease: lease, state: state, node: n.ID, started: r.now, fault: fault})
	return nil
}

// outcome is the truth of an attempt of task on node: how long it takes,
// how it ends, and whether the node's defect ended it (a good task the
// node should have run).
func (r *runner) outcome(t *simTask, n *simNode, timeoutSeconds int64) (time.Duration, fsm.AttemptState, bool) {
	timeout := time.Duration(timeoutSeconds) * time.Second
	defect := !r.now.Before(n.onset)
	good := t.truth == taskGood || (t.truth == taskSmallFail && n.group.Cores >= 4)
	switch {
	case t.truth == taskBad, t.truth == taskSmallFail && n.group.Cores < 4:
		return badTaskFailure, fsm.AttemptFailed, false
	case defect && (n.group.Kind == KindBlackHole ||
		n.group.Kind == KindClassHole && t.class == n.group.Class ||
		n.group.Kind == KindNewClassHole && !n.known[t.class]):
		return fastFailure, fsm.AttemptFailed, good
	case defect && n.group.Kind == KindHung:
		return timeout, fsm.AttemptTimedOut, good
	}
	jitter := 0.9 + 0.2*r.rng.Float64()
	d := time.Duration(float64(t.median) / n.group.Speed * jitter)
	if d >= timeout {
		return timeout, fsm.AttemptTimedOut, false
	}
	return d, fsm.AttemptSucceeded, false
}

// observe records the judgements standing now: quarantines and
// demotions, first times and counts.
func (r *runner) observe() {
	st := r.f.State()
	for _, id := range r.order {
		n, err := st.Node(id)
		if err != nil {
			continue
		}
		sn := r.nodes[id]
		q := n.Quarantine != nil
		if q && !sn.wasQuarantined {
			sn.quarantines++
			if sn.firstQuarantine.IsZero() {
				sn.firstQuarantine = r.now
			}
		}
		sn.wasQuarantined = q
		if n.Tier.Demotions > 0 && !sn.demoted {
			sn.demoted, sn.firstDemotion = true, r.now
		}
	}
}
