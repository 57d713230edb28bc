package fsm

import (
	"fmt"
	"herd/internal/check"
	"slices"
	"strings"
	"time"

	"herd/scheduler"
)

// ProfileSettingsRequest commits the rules that turn history into tiers.
type ProfileSettingsRequest struct {
	Settings ProfileSettings `json:"settings"`
	Now      time.Time       `json:"now"`
}

// NodeProfileRequest commits a node's measured profile (a rebench).
type NodeProfileRequest struct {
	NodeID            string      `json:"node_id"`
	SessionGeneration uint64      `json:"session_generation"`
	Profile           NodeProfile `json:"profile"`
	Now               time.Time   `json:"now"`
}

// NodeDatasetsRequest replaces the datasets a node holds.
type NodeDatasetsRequest struct {
	NodeID            string              `json:"node_id"`
	SessionGeneration uint64              `json:"session_generation"`
	Datasets          []scheduler.Dataset `json:"datasets"`
	Now               time.Time           `json:"now"`
}

// Node tier operations.
const (
	TierOpPin     = "pin"     // an operator fixes the tier
	TierOpAuto    = "auto"    // the tier follows profile and history again
	TierOpPromote = "promote" // the leader proposes a promotion; Apply checks it
	TierOpRebench = "rebench" // ask the agent to measure its node again
)

// NodeTierRequest pins, unpins or promotes a node's tier, or asks for a
// rebench.
type NodeTierRequest struct {
	NodeID string         `json:"node_id"`
	Op     string         `json:"op"`
	Tier   scheduler.Tier `json:"tier,omitempty"`
	Now    time.Time      `json:"now"`
}

// Health check operations.
const (
	HealthCheckRequest = "request" // the leader asks the node to run its check
	HealthCheckResult  = "result"  // the node's answer
)

// NodeHealthCheckRequest asks a node for a health check, or records its
// answer.
type NodeHealthCheckRequest struct {
	NodeID string    `json:"node_id"`
	Op     string    `json:"op"`
	Seq    uint64    `json:"seq,omitempty"`
	Passed bool      `json:"passed,omitempty"`
	Output string    `json:"output,omitempty"`
	Why    string    `json:"why,omitempty"`
	Now    time.Time `json:"now"`
}

// Limits on what agents report, enforced at the API and again at apply.
const (
	MaxDatasets           = 64
	MaxHealthCheckOutput  = 512
	minSamplesForMedian   = 3
	maxProfileFigureValue = 1 << 40
)

func applyProfileSettings(db *store, index uint64, r *ProfileSettingsRequest) (any, error) {
	if err := r.Settings.Validate(); err != nil {
		return nil, reject(RejectInvalid, "%v", err)
	}
	ps := r.Settings
	db.profile = &ps
	// Base tiers follow the thresholds: re-rank every node.
	var changed []*Node
	db.nodes.Ascend(func(n *Node) bool {
		c := n.clone()
		retier(c, ps, index, r.Now, "profile settings changed")
		if c.Tier != n.Tier {
			c.ModifyIndex = index
			changed = append(changed, c)
		}
		return true
	})
	for _, n := range changed {
		db.putNode(n)
	}
	return ps, nil
}

// ProfileSettings are the committed profile settings (the defaults until
// a leader committed its own).
func (s *State) ProfileSettings() ProfileSettings { return s.st.profileSettings() }

// Class returns the fleet's record of a task class, nil when none ran.
func (s *State) Class(name string) *ClassStats { return s.st.class(name) }

// Classes returns every class the fleet has run, by name.
func (s *State) Classes() []*ClassStats {
	var out []*ClassStats
	s.st.classes.Ascend(func(c *ClassStats) bool { out = append(out, c); return true })
	return out
}

func checkProfile(p *NodeProfile) error {
	for _, v := range []int64{p.CPUScore, p.MemoryMBps, p.FsyncMicros, int64(p.Cores), p.MemoryMB, p.DiskFreeMB, p.BenchMillis,
		int64(p.Rounds), p.CPUSpreadPct, p.MemorySpreadPct, p.RTTMicros, p.NetworkMBps} {
		if v < 0 || v > maxProfileFigureValue {
			return reject(RejectInvalid, "profile figure %d is outside 0..%d", v, int64(maxProfileFigureValue))
		}
	}
	return nil
}

func profileSummary(p *NodeProfile) string {
	if !p.Benchmarked {
		return fmt.Sprintf("static figures: %d cores, %d MB memory, %d MB disk free", p.Cores, p.MemoryMB, p.DiskFreeMB)
	}
	s := fmt.Sprintf("measured in %d ms: cpu %d MB/s per core × %d cores, memory %d MB/s, fsync %d µs, %d MB memory, %d MB disk free",
		p.BenchMillis, p.CPUScore, p.Cores, p.MemoryMBps, p.FsyncMicros, p.MemoryMB, p.DiskFreeMB)
	if p.Rounds > 0 {
		s += fmt.Sprintf(" (medians of %d round(s); spread cpu %d%%, memory %d%%)", p.Rounds, p.CPUSpreadPct, p.MemorySpreadPct)
	}
	if p.RTTMicros > 0 {
		s += fmt.Sprintf("; link to the servers %d µs round trip, %d MB/s", p.RTTMicros, p.NetworkMBps)
	}
	return s
}

func applyNodeProfile(db *store, index uint64, r *NodeProfileRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session is %d, profile is for %d: register again", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	if err := checkProfile(&r.Profile); err != nil {
		return nil, err
	}
	n := node.clone()
	p := r.Profile
	p.MeasuredAt = StampOf(r.Now)
	n.Profile = &p
	n.addEvent(index, r.Now, EventProfile, profileSummary(&p))
	retier(n, db.profileSettings(), index, r.Now, "profile measured")
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

// normalDatasets checks reported datasets and sorts them by name.
func normalDatasets(in []scheduler.Dataset) ([]scheduler.Dataset, error) {
	if len(in) > MaxDatasets {
		return nil, reject(RejectInvalid, "%d datasets reported, at most %d", len(in), MaxDatasets)
	}
	out := slices.Clone(in)
	for _, d := range out {
		if err := check.DatasetName(d.Name); err != nil {
			return nil, reject(RejectInvalid, "%v", err)
		}
		if d.Bytes < 0 {
			return nil, reject(RejectInvalid, "dataset %s: negative size", d.Name)
		}
	}
	slices.SortFunc(out, func(a, b scheduler.Dataset) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, reject(RejectInvalid, "dataset %s reported twice", out[i].Name)
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

func applyNodeDatasets(db *store, index uint64, r *NodeDatasetsRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	if node.SessionGeneration != r.SessionGeneration {
		return nil, reject(RejectSessionChanged, "node %s session is %d, datasets are for %d: register again", node.ID, node.SessionGeneration, r.SessionGeneration)
	}
	ds, err := normalDatasets(r.Datasets)
	if err != nil {
		return nil, err
	}
	if slices.Equal(ds, node.Datasets) {
		return node, nil
	}
	n := node.clone()
	n.Datasets = ds
	n.ModifyIndex = index
	db.putNode(n)
	return n, nil
}

func applyNodeTier(db *store, index uint64, r *NodeTierRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	ps := db.profileSettings()
	n := node.clone()
	n.ModifyIndex = index
	switch r.Op {
	case TierOpPin:
		if r.Tier < scheduler.TierL1 || r.Tier > scheduler.TierL3 {
			return nil, reject(RejectInvalid, "tier %q: want L1, L2 or L3", r.Tier)
		}
		n.Tier.Pin = r.Tier
		retier(n, ps, index, r.Now, "pinned by an operator")
		if n.Tier.Tier == r.Tier && node.Tier.Pin != r.Tier {
			n.addEvent(index, r.Now, EventTier, fmt.Sprintf("tier pinned at %s by an operator", r.Tier))
		}
	case TierOpAuto:
		if node.Tier.Pin == scheduler.TierUnknown {
			return node, nil
		}
		n.Tier.Pin = scheduler.TierUnknown
		n.addEvent(index, r.Now, EventTier, "tier unpinned: it follows profile and history again")
		retier(n, ps, index, r.Now, "unpinned")
	case TierOpPromote:
		why, err := promotable(db, n, ps, r.Now)
		if err != nil {
			return nil, err
		}
		n.Tier.Demotions--
		for i := range n.History.Classes {
			n.History.Classes[i].Recent = nil
		}
		retier(n, ps, index, r.Now, why)
	case TierOpRebench:
		db.touch(topicNodePre + n.ID) // the agent's assignments watch wakes
		n.RebenchRequested++
		n.addEvent(index, r.Now, EventProfile, "rebench requested")
	default:
		return nil, reject(RejectInvalid, "tier operation %q is not pin, auto, promote or rebench", r.Op)
	}
	db.putNode(n)
	return n, nil
}

// promotable says why a demoted node may move up a tier now, or refuses:
// the dwell time must have passed since its tier last changed, with no
// run of any class over the promote factor of the fleet median and no
// blamed failure since (hysteresis: a node demoted at 2.5× comes back
// only when it runs under 1.5×). n is a copy; its history is cloned so
// the caller may reset it.
func promotable(db *store, n *Node, ps ProfileSettings, now time.Time) (string, error) {
	if n.Tier.Pin != scheduler.TierUnknown {
		return "", reject(RejectConflict, "node %s: tier pinned at %s", n.ID, n.Tier.Pin)
	}
	if n.Tier.Demotions <= 0 {
		return "", reject(RejectConflict, "node %s: not demoted", n.ID)
	}
	if n.Quarantine != nil {
		return "", reject(RejectConflict, "node %s: quarantined", n.ID)
	}
	dwell := ms(ps.DwellMs)
	since := n.Tier.ChangedAt
	if held := StampOf(now).Sub(since); held < dwell {
		return "", reject(RejectConflict, "node %s: tier changed %s ago, dwell is %s", n.ID, held.Round(time.Millisecond), dwell)
	}
	n.History = n.History.clone()
	for _, o := range n.History.Outcomes {
		if o.Blamed && !o.At.Before(since) {
			return "", reject(RejectConflict, "node %s: a failure of class %s (which succeeds elsewhere) since its tier changed", n.ID, o.Class)
		}
	}
	for _, c := range n.History.Classes {
		median, k := db.class(c.Class).median(n.ID)
		if k >= minSamplesForMedian && median > 0 && slowRuns(c.Recent, median, ps.PromoteFactorPercent) > 0 {
			return "", reject(RejectConflict, "node %s: a run of class %s over %s the fleet median since its tier changed", n.ID, c.Class, factorText(ps.PromoteFactorPercent))
		}
	}
	return fmt.Sprintf("healthy for %s since the last change (no run over %s the fleet median, no failure of work that succeeds elsewhere)", dwell, factorText(ps.PromoteFactorPercent)), nil
}

// ProfileDue says what time alone makes due for n at now, for the
// leader to propose: a promotion (TierOpPromote) once a demoted node held
// its tier for dwell, a health check (HealthCheckRequest, with why) of a
// quarantined node whose quarantine ran out or whose failed check is
// recheck old, or nothing. Apply decides whether a promotion is earned.
func ProfileDue(n *Node, dwell, recheck time.Duration, now time.Time) (op, why string) {
	if n.Liveness == scheduler.LivenessDown {
		return "", ""
	}
	if q := n.Quarantine; q != nil {
		hc := n.HealthCheck
		if hc.Requested != hc.Answered {
			return "", "" // one is asked and not answered yet
		}
		switch {
		case !now.Before(q.Until.Time()) && (hc.At.Before(q.Until) || q.CheckFailed):
			if q.CheckFailed && now.Sub(hc.At.Time()) < recheck {
				return "", ""
			}
			return HealthCheckRequest, "quarantine time over"
		case q.CheckFailed && now.Sub(hc.At.Time()) >= recheck:
			return HealthCheckRequest, "the last check failed"
		}
		return "", ""
	}
	if n.Tier.Demotions > 0 && n.Tier.Pin == scheduler.TierUnknown && now.Sub(n.Tier.ChangedAt.Time()) >= dwell {
		return TierOpPromote, ""
	}
	return "", ""
}

// slowRuns counts the runs in recent over percent of median and at least
// slowRunFloorMs past it.
func slowRuns(recent []int64, median int64, percent int) int {
	slow := 0
	for _, d := range recent {
		if d*100 > median*int64(percent) && d-median >= slowRunFloorMs {
			slow++
		}
	}
	return slow
}

// slowRunFloorMs is how far past the fleet median a run must also be to
// count as slow: a class of millisecond tasks runs several times its
// median whenever a busy box schedules the process late, which says
// nothing of the node's hardware, while a node that takes a second where
// the fleet takes a fifth of one is slow.
const slowRunFloorMs = 250

func factorText(percent int) string {
	return fmt.Sprintf("%d.%d×", percent/100, percent%100/10)
}

func applyNodeHealthCheck(db *store, index uint64, r *NodeHealthCheckRequest) (any, error) {
	node, err := getNode(db, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := node.clone()
	n.ModifyIndex = index
	switch r.Op {
	case HealthCheckRequest:
		why := r.Why
		if why == "" {
			why = "asked by an operator"
		}
		requestCheck(db, n, index, r.Now, why)
	case HealthCheckResult:
		hc := n.HealthCheck
		if r.Seq <= hc.Answered || r.Seq > hc.Requested {
			return nil, reject(RejectStale, "node %s: health check %d answered, but %d was asked and %d answered", n.ID, r.Seq, hc.Requested, hc.Answered)
		}
		if len(r.Output) > MaxHealthCheckOutput {
			r.Output = r.Output[:MaxHealthCheckOutput]
		}
		hc.Answered, hc.Passed, hc.Output, hc.At = r.Seq, r.Passed, r.Output, StampOf(r.Now)
		n.HealthCheck = hc
		msg := "health check passed"
		if !r.Passed {
			msg = "health check failed"
		}
		if r.Output != "" {
			msg += ": " + r.Output
		}
		n.addEvent(index, r.Now, EventHealthCheck, msg)
		if n.Quarantine == nil && !r.Passed && n.History != nil && max(n.History.FastStreak, n.History.NewStreak) >= db.profileSettings().BlackHoleFailures {
			// A suspect's own check confirms what its failures said.
			ps := db.profileSettings()
			q := &Quarantine{Level: QuarantineSuspected, Since: StampOf(r.Now), Until: StampOf(r.Now.Add(ms(ps.QuarantineSuspectMs))), CheckFailed: true,
				Tasks:  slices.Clone(n.History.StreakTasks),
				Reason: fmt.Sprintf("suspected black hole: %d tasks failed fast in a row here and its health check fails", max(n.History.FastStreak, n.History.NewStreak))}
			n.Quarantine = q
			n.addEvent(index, r.Now, EventQuarantine, fmt.Sprintf("quarantined until a health check passes: %s", q.Reason))
		}
		if q := n.Quarantine; q != nil {
			switch {
			case !r.Passed:
				c := *q
				c.CheckFailed = true
				n.Quarantine = &c
			case q.CheckFailed:
				n.Quarantine = nil
				n.addEvent(index, r.Now, EventQuarantine, "released: the health check passes again after failing")
				resetStreaks(n)
			case !StampOf(r.Now).Before(q.Until):
				n.Quarantine = nil
				n.addEvent(index, r.Now, EventQuarantine, fmt.Sprintf("released: quarantined %s and the health check passes", StampOf(r.Now).Sub(q.Since).Round(time.Second)))
				resetStreaks(n)
			}
		}
	default:
		return nil, reject(RejectInvalid, "health check operation %q is not request or result", r.Op)
	}
	db.putNode(n)
	return n, nil
}

// requestCheck asks n's agent for a health check; n is a copy. The
// agent's blocking query for its assignments wakes for it.
func requestCheck(db *store, n *Node, index uint64, now time.Time, why string) {
	db.touch(topicNodePre + n.ID)
	n.HealthCheck.Requested++
	n.HealthCheck.Why = why
	n.addEvent(index, now, EventHealthCheck, "health check requested: "+why)
}

// resetStreaks forgets the fast-failure streaks of a released node: it
// starts afresh.
func resetStreaks(n *Node) {
	if n.History == nil {
		return
	}
	n.History = n.History.clone()
	for i := range n.History.Classes {
		n.History.Classes[i].FastStreak = 0
		n.History.Classes[i].StreakTasks = nil
	}
	n.History.FastStreak, n.History.StreakTasks = 0, nil
	n.History.NewStreak, n.History.NewStreakTasks = 0, nil
	n.History.Holds = nil
}

// recordOutcome derives, from one attempt's end, the node's history of the
// task's class and the fleet's; and from them, at once, the demotions and
// quarantines the settings call for. n is the node's copy being changed;
// na the ended attempt; task the task as it was before this end. Times
// are the commands' (StartedAt, r.Now), so every replica derives the same.
// It returns a note for the task's timeline when the evidence made the
// task the suspect.
func recordOutcome(db *store, index uint64, n *Node, na *Attempt, task *Task, now time.Time) string {
	if na.State != AttemptSucceeded && na.State != AttemptFailed && na.State != AttemptTimedOut {
		return "" // cancelled or lost: nothing about the node or the work
	}
	var runMs int64
	if !na.StartedAt.IsZero() {
		runMs = max(int64(na.FinishedAt.Sub(na.StartedAt)/time.Millisecond), 1)
	}
	if na.State == AttemptSucceeded {
		db.w.succeeding = task.ID
		recordSuccess(db, index, n, na, task, runMs, now)
		db.w.succeeding = ""
		return ""
	}
	note := suspectTaskNote(task, n.ID)
	recordFailure(db, index, n, na, task, runMs, now)
	return note
}

// recordSuccess is recordOutcome for a success.
func recordSuccess(db *store, index uint64, n *Node, na *Attempt, task *Task, runMs int64, now time.Time) {
	ps := db.profileSettings()
	class := task.Spec.ClassOf()
	stats := db.class(class)
	h := n.History.clone()
	// A success of an attempt that began before a streak did says nothing
	// of the node since the streak began: it ends no streak (a node that
	// just went bad still finishes well what it started before).
	after := func(tasks []string) bool { return !na.StartedAt.Before(h.streakSince(tasks)) }
	c := &h.Classes[h.class(class)]
	if after(h.StreakTasks) {
		h.FastStreak, h.StreakTasks = 0, nil
	}
	if c.Runs == 0 && after(h.NewStreakTasks) {
		h.NewStreak, h.NewStreakTasks = 0, nil
	}
	if after(c.StreakTasks) {
		c.ConsecutiveFailures, c.FastStreak, c.StreakTasks = 0, 0, nil
	}
	c.Runs++
	if runMs > 0 {
		if c.EWMAMilli == 0 {
			c.EWMAMilli = runMs
		} else {
			c.EWMAMilli += (runMs - c.EWMAMilli) * 2 / (ewmaSpan + 1)
		}
	}
	h.addOutcome(Outcome{At: StampOf(now), Class: class, Task: task.ID, OK: true}, ms(ps.FailureWindowMs))
	h.syncTimes()
	n.History = h
	// A slow attempt's time already counted when it was marked slow.
	if runMs > 0 && !task.CurrentSlow() {
		noteRun(db, n, ps, class, runMs, na.StartedAt, index, now)
	}
	refreshHolds(db, n, ps)
	next := stats.withRun(class, ClassRun{Node: n.ID, Millis: runMs, At: StampOf(now)}, index)
	suspects := next.Suspects
	next.Suspects = nil
	db.putClass(next)
	// Nodes whose fast failures of this class came before any success
	// elsewhere are suspects now.
	for _, s := range suspects {
		if s.Node == n.ID {
			continue
		}
		if other, ok := db.node(s.Node); ok {
			o := other.clone()
			if quarantineIfStreak(db, o, ps, class, index, now) {
				o.ModifyIndex = index
				db.putNode(o)
			}
		}
	}
	fleetSucceeded(db, index, n.ID, ps, now)
	confirmElsewhere(db, index, n.ID, task, ps, now)
}

// noteRun adds a run time of class to n's recent runs (n is a copy whose
// history is its own) and demotes n when too many of them are over the
// slow factor of the fleet median. A run that began before the tier last
// changed says nothing of the node since, and is left out: the dwell
// before a promotion counts what the node does after its demotion, not
// what was in flight.
func noteRun(db *store, n *Node, ps ProfileSettings, class string, runMs int64, started Stamp, index uint64, now time.Time) {
	if started.Before(n.Tier.ChangedAt) {
		return
	}
	c := &n.History.Classes[n.History.class(class)]
	c.Recent = append(c.Recent[:len(c.Recent):len(c.Recent)], runMs) // a new array, sized once
	if len(c.Recent) > ps.SlowWindow {
		c.Recent = c.Recent[len(c.Recent)-ps.SlowWindow:]
	}
	median, k := db.class(class).median(n.ID)
	if k < minSamplesForMedian || median <= 0 {
		return
	}
	slow := slowRuns(c.Recent, median, ps.SlowFactorPercent)
	if slow < ps.SlowRuns {
		return
	}
	why := fmt.Sprintf("%d of the last %d runs of class %s took over %s the fleet median (%d ms)", slow, len(c.Recent), class, factorText(ps.SlowFactorPercent), median)
	if demoteNode(n, ps, index, now, why) {
		for i := range n.History.Classes {
			n.History.Classes[i].Recent = nil
		}
	}
}

// recordFailure is recordOutcome for a failure or a timeout.
func recordFailure(db *store, index uint64, n *Node, na *Attempt, task *Task, runMs int64, now time.Time) {
	ps := db.profileSettings()
	class := task.Spec.ClassOf()
	window := ms(ps.FailureWindowMs)
	stats := db.class(class)
	h := n.History.clone()
	c := &h.Classes[h.class(class)]
	c.Failures++
	c.ConsecutiveFailures++
	// A task that failed on another node too is the suspect: its failures
	// are taken back from every node it failed on (exonerate, below) and
	// this one counts against nobody.
	elsewhere := failedElsewhere(task, n.ID)
	fast := na.State == AttemptFailed && runMs <= ps.FastFailureMs
	switch {
	case elsewhere:
	case fast:
		addToStreaks(h, c, task.ID)
	default:
		c.FastStreak, c.StreakTasks = 0, nil
		h.FastStreak, h.StreakTasks = 0, nil
		h.NewStreak, h.NewStreakTasks = 0, nil
	}
	// Blame waits for the evidence: the failure counts against the node
	// once the same task succeeds on another node (confirmElsewhere).
	h.addOutcome(Outcome{At: StampOf(now), Class: class, Task: task.ID, Fast: fast}, window)
	h.syncTimes()
	n.History = h
	if elsewhere {
		exonerate(db, index, n, task, ps, now)
		return
	}
	suspect := false
	if c.FastStreak >= ps.BlackHoleFailures && n.Quarantine == nil && !quarantineIfStreak(db, n, ps, class, index, now) {
		// No success elsewhere yet: the first one decides (see above).
		db.putClass(stats.withSuspect(class, n.ID, StampOf(now), index))
		suspect = true
	}
	if max(h.FastStreak, h.NewStreak) >= ps.BlackHoleFailures && n.Quarantine == nil && !quarantineIfNodeStreak(db, n, ps, index, now) {
		db.fleet = db.fleet.withSuspect("", n.ID, StampOf(now), index)
		suspect = true
	}
	refreshHolds(db, n, ps)
	if suspect && n.HealthCheck.Requested == n.HealthCheck.Answered {
		// No evidence yet that the work runs elsewhere (none of the tasks
		// succeeded elsewhere yet): the node's own health check decides
		// meanwhile, and it takes no new work until it answers (see the
		// probation in View).
		requestCheck(db, n, index, now, fmt.Sprintf("%d tasks failed fast in a row here, none of them succeeded elsewhere yet", max(c.FastStreak, h.FastStreak, h.NewStreak)))
	}
}

// demoteIfFailing demotes n (a copy being changed) when, over the failure
// window, enough of its results are blamed failures, and asks for its
// health check; it reports whether it did.
func demoteIfFailing(db *store, n *Node, ps ProfileSettings, index uint64, now time.Time) bool {
	window := ms(ps.FailureWindowMs)
	b, total := n.History.BlamedRate(now, window)
	if total < ps.FailureMinAttempts || b*100 < ps.FailureRatePercent*total {
		return false
	}
	why := fmt.Sprintf("%d of its last %d attempts in %s failed at work that then succeeded elsewhere (over %d%%)", b, total, window, ps.FailureRatePercent)
	if !demoteNode(n, ps, index, now, why) {
		return false
	}
	n.History = n.History.clone()
	n.History.Outcomes = nil
	requestCheck(db, n, index, now, "failure rate: "+why)
	return true
}

// demoteNode moves n down a tier with why, unless it is pinned or at L3
// already; it reports whether it did.
func demoteNode(n *Node, ps ProfileSettings, index uint64, now time.Time, why string) bool {
	if n.Tier.Pin != scheduler.TierUnknown || effectiveTier(n.Tier) >= scheduler.TierL3 {
		return false
	}
	n.Tier.Demotions++
	retier(n, ps, index, now, why)
	return true
}

// quarantineIfStreak quarantines n (a copy being changed) on suspicion of
// being a black hole for class: its latest attempts of the class failed
// fast in a row while the class succeeded on another node within the
// failure window, and at least one of those tasks has succeeded
// elsewhere since. A class that fails everywhere quarantines nobody: that
// is bad work, not a bad node. It reports whether it quarantined n.
func quarantineIfStreak(db *store, n *Node, ps ProfileSettings, class string, index uint64, now time.Time) bool {
	if n.Quarantine != nil || n.History == nil {
		return false
	}
	i, ok := slices.BinarySearchFunc(n.History.Classes, class, func(c ClassHistory, name string) int { return strings.Compare(c.Class, name) })
	if !ok {
		return false
	}
	c := n.History.Classes[i]
	if c.FastStreak < ps.BlackHoleFailures || !db.class(class).succeededElsewhere(n.ID, StampOf(now.Add(-ms(ps.FailureWindowMs)))) {
		return false
	}
	q := &Quarantine{
		Level: QuarantineSuspected, Class: class, Since: StampOf(now), Until: StampOf(now.Add(ms(ps.QuarantineSuspectMs))),
		Tasks:  slices.Clone(c.StreakTasks),
		Reason: fmt.Sprintf("suspected black hole: %d tasks of class %s failed in a row here, each within %s, while the class succeeds on other nodes", c.FastStreak, class, ms(ps.FastFailureMs)),
	}
	// Tasks of the streak that already succeeded elsewhere confirm it; a
	// streak none of whose tasks did yet is only a suspicion, which the
	// node's own health check or the first confirmation decides (a burst
	// of bad tasks makes such streaks on healthy nodes).
	q.Confirmed = confirmedTasks(db, q.Tasks)
	if q.Confirmed == 0 {
		return false
	}
	beginQuarantine(db, n, q, ps, index, now)
	return true
}

// beginQuarantine puts n (a copy being changed) in quarantine q, confirmed
// at once when most of its tasks succeeded elsewhere, and asks for its
// health check.
func beginQuarantine(db *store, n *Node, q *Quarantine, ps ProfileSettings, index uint64, now time.Time) {
	n.Quarantine = q
	n.addEvent(index, now, EventQuarantine, fmt.Sprintf("quarantined until %s: %s", q.Until.Time().UTC().Format(time.RFC3339), q.Reason))
	if q.Confirmed*2 > len(q.Tasks) {
		confirmQuarantine(n, ps, index, now)
	}
	requestCheck(db, n, index, now, "quarantined")
}

// confirmElsewhere puts task's success on succeededOn as evidence
// against the other nodes it failed on: their failures of it become
// blamed (which may demote them for their failure rate), and it counts
// toward confirming their suspected quarantines (most of a streak's tasks
// succeeding elsewhere confirms the black hole).
func confirmElsewhere(db *store, index uint64, succeededOn string, task *Task, ps ProfileSettings, now time.Time) {
	if len(task.nodeFailures()) == 0 {
		return
	}
	ids := make([]string, 0, len(task.nodeFailures()))
	for id := range task.nodeFailures() {
		ids = append(ids, id)
	}
	slices.Sort(ids) // map order must not decide anything
	for _, id := range ids {
		if id == succeededOn {
			continue
		}
		node, ok := db.node(id)
		if !ok {
			continue
		}
		n := node.clone()
		changed := blameOutcomes(n, task.ID)
		if changed && demoteIfFailing(db, n, ps, index, now) {
			changed = true
		}
		if restoreStreak(db, n, task, task.nodeFailures()[id], ps, index, now) {
			changed = true
		}
		// The success may be the first confirmation a suspect's streak
		// waited for.
		if n.Quarantine == nil && (quarantineIfStreak(db, n, ps, task.Spec.ClassOf(), index, now) || quarantineIfNodeStreak(db, n, ps, index, now)) {
			changed = true
		}
		if refreshHolds(db, n, ps) {
			changed = true
		}
		if q := n.Quarantine; q != nil && q.Level == QuarantineSuspected && slices.Contains(q.Tasks, task.ID) && q.Confirmed != confirmedTasks(db, q.Tasks) {
			c := *q
			c.Confirmed = confirmedTasks(db, q.Tasks) // counted afresh: the quarantine may be this success's own
			n.Quarantine = &c
			if c.Confirmed*2 > len(c.Tasks) {
				confirmQuarantine(n, ps, index, now)
			}
			changed = true
		}
		if changed {
			n.ModifyIndex = index
			db.putNode(n)
		}
	}
}

// restoreStreak gives a task's fast failure on n back to n's streaks once
// the task succeeded elsewhere, unless n succeeded at anything since (its
// streaks began again): a good task that failed on two black holes was
// taken for the suspect, and its success clears it. n is a copy being
// changed; it reports whether it changed n.
func restoreStreak(db *store, n *Node, task *Task, f NodeFailure, ps ProfileSettings, index uint64, now time.Time) bool {
	h := n.History
	if h == nil || n.HealthyIndex >= f.LastIndex || !slices.ContainsFunc(h.Outcomes, func(o Outcome) bool { return o.Task == task.ID && !o.OK && o.Fast }) {
		return false
	}
	class := task.Spec.ClassOf()
	i, ok := slices.BinarySearchFunc(h.Classes, class, func(c ClassHistory, name string) int { return strings.Compare(c.Class, name) })
	if !ok || (slices.Contains(h.Classes[i].StreakTasks, task.ID) && slices.Contains(h.StreakTasks, task.ID)) {
		return false
	}
	h = h.clone()
	addToStreaks(h, &h.Classes[i], task.ID)
	n.History = h
	if h.Classes[i].FastStreak >= ps.BlackHoleFailures && n.Quarantine == nil {
		quarantineIfStreak(db, n, ps, class, index, now)
	}
	if max(h.FastStreak, h.NewStreak) >= ps.BlackHoleFailures && n.Quarantine == nil {
		quarantineIfNodeStreak(db, n, ps, index, now)
	}
	return true
}

// addToStreaks adds a fast failure of task (of the class c keeps) to h's
// streaks: the class's, the node's, and the new classes' when the node
// never succeeded at the class.
func addToStreaks(h *NodeHistory, c *ClassHistory, task string) {
	c.FastStreak, c.StreakTasks = addStreak(c.FastStreak, c.StreakTasks, task)
	h.FastStreak, h.StreakTasks = addStreak(h.FastStreak, h.StreakTasks, task)
	if c.Runs == 0 {
		h.NewStreak, h.NewStreakTasks = addStreak(h.NewStreak, h.NewStreakTasks, task)
	}
}

// blameOutcomes marks n's failures of task as blamed; n is a copy being
// changed. It reports whether any was.
func blameOutcomes(n *Node, task string) bool {
	if n.History == nil || !slices.ContainsFunc(n.History.Outcomes, func(o Outcome) bool { return o.Task == task && !o.OK && !o.Blamed }) {
		return false
	}
	n.History = n.History.clone()
	n.History.Outcomes = slices.Clone(n.History.Outcomes)
	for i := range n.History.Outcomes {
		if o := &n.History.Outcomes[i]; o.Task == task && !o.OK {
			o.Blamed = true
		}
	}
	return true
}

// confirmQuarantine makes n's suspected quarantine a confirmed, longer one.
func confirmQuarantine(n *Node, ps ProfileSettings, index uint64, now time.Time) {
	q := *n.Quarantine
	q.Level = QuarantineConfirmed
	q.Until = StampOf(now.Add(ms(ps.QuarantineConfirmedMs)))
	q.Reason = fmt.Sprintf("confirmed black hole: %d of the %d tasks that failed fast here succeeded elsewhere", q.Confirmed, len(q.Tasks))
	n.Quarantine = &q
	n.addEvent(index, now, EventQuarantine, fmt.Sprintf("quarantine confirmed, until %s: %s", q.Until.Time().UTC().Format(time.RFC3339), q.Reason))
}
