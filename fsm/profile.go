package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"herd/scheduler"
)

// NodeProfile is what an agent measured of its node. The figures are the
// agent's; the time is the cluster's (when the report committed), since
// agents' clocks are not trusted.
type NodeProfile struct {
	// CPUScore is single-core compute: MB/s of SHA-256 on one core.
	CPUScore int64 `json:"cpu_score"`
	// MemoryMBps is memory bandwidth (MB/s copied).
	MemoryMBps int64 `json:"memory_mbps"`
	// FsyncMicros is the median latency of a small write and fsync in the
	// agent's data directory.
	FsyncMicros int64 `json:"fsync_us"`
	Cores       int   `json:"cores"`
	MemoryMB    int64 `json:"memory_mb"`
	DiskFreeMB  int64 `json:"disk_free_mb"`
	// Benchmarked is false for static figures only (herd agent -no-bench).
	Benchmarked bool `json:"benchmarked"`
	// BenchMillis is how long the measurement took on the node.
	BenchMillis int64 `json:"bench_ms,omitempty"`
	MeasuredAt  Stamp `json:"measured_at"`
	// Rounds of samples taken; each figure is its last round's median,
	// with the samples' spread ((max - min) / median, percent).
	Rounds          int   `json:"rounds,omitempty"`
	CPUSpreadPct    int64 `json:"cpu_spread_pct,omitempty"`
	MemorySpreadPct int64 `json:"memory_spread_pct,omitempty"`
	// The link to the servers: median round trip and throughput.
	RTTMicros   int64 `json:"rtt_us,omitempty"`
	NetworkMBps int64 `json:"network_mbps,omitempty"`
}

// Power is the profile's compute: single-core score times cores (0 when
// not benchmarked).
func (p *NodeProfile) Power() int64 {
	if p == nil || !p.Benchmarked {
		return 0
	}
	return p.CPUScore * int64(max(p.Cores, 1))
}

// TierState is a node's tier: Base from its profile, moved by Demotions
// (history), unless an operator pinned it.
type TierState struct {
	Tier      scheduler.Tier `json:"tier"`
	Base      scheduler.Tier `json:"base"`
	Pin       scheduler.Tier `json:"pin,omitempty"`
	Demotions int            `json:"demotions,omitempty"`
	// ChangedAt is when the tier in force last changed (the dwell time
	// before a promotion counts from it).
	ChangedAt Stamp `json:"changed_at,omitzero"`
}

// Quarantine levels.
const (
	QuarantineSuspected = "suspected"
	QuarantineConfirmed = "confirmed"
)

// Quarantine keeps new work off a node suspected of being a black hole:
// its attempts of Class failed fast, in a row, while the class succeeded
// on other nodes. Confirmed once most of those tasks then succeeded
// elsewhere.
type Quarantine struct {
	Level  string `json:"level"`
	Class  string `json:"class"`
	Reason string `json:"reason"`
	Since  Stamp  `json:"since"`
	Until  Stamp  `json:"until"`
	// CheckFailed is set once the node's health check failed during the
	// quarantine: it then holds until a check passes, and a passing check
	// releases it at once (the check saw the fault, and now does not).
	CheckFailed bool `json:"check_failed,omitempty"`
	// Tasks are the tasks whose failures began it; Confirmed how many of
	// them succeeded elsewhere since.
	Tasks     []string `json:"tasks,omitempty"`
	Confirmed int      `json:"confirmed,omitempty"`
}

// HealthCheckState is the health check asked of a node and its answer.
type HealthCheckState struct {
	// Requested counts the checks asked; Answered is the last one the
	// agent answered.
	Requested uint64 `json:"requested,omitempty"`
	Answered  uint64 `json:"answered,omitempty"`
	Passed    bool   `json:"passed,omitempty"`
	Output    string `json:"output,omitempty"`
	At        Stamp  `json:"at,omitzero"`
	// Why is why the last check was asked for.
	Why string `json:"why,omitempty"`
}

// NodeHistory is what a node's attempts showed.
type NodeHistory struct {
	// Classes by class name; Times the same EWMAs as the scheduler reads
	// them (kept in step, so a placement pass shares them).
	Classes []ClassHistory        `json:"classes"`
	Times   []scheduler.ClassTime `json:"-"`
	// Outcomes are the node's attempt results within the failure window,
	// oldest first.
	Outcomes []Outcome `json:"outcomes,omitempty"`
	// FastStreak counts the distinct tasks, of any class, whose attempts
	// failed fast here since the node's last success, with the tasks in
	// StreakTasks: a node that fails everything it is given, new classes
	// included, is a black-hole suspect without per-class history.
	FastStreak  int      `json:"fast_streak,omitempty"`
	StreakTasks []string `json:"streak_tasks,omitempty"`
	// NewStreak counts the same of tasks of classes the node never
	// succeeded at, reset only by a success at such a class: a node that
	// fails whatever it has not run before, while it still runs what it
	// knows, is a suspect too.
	NewStreak      int      `json:"new_streak,omitempty"`
	NewStreakTasks []string `json:"new_streak_tasks,omitempty"`
	// Holds are the classes the node is suspected of failing while the
	// evidence is awaited (streaks at the black-hole count, none of their
	// tasks succeeded elsewhere yet): "=NAME" a class, "+new" every class
	// it never ran. The scheduler gives it none of them meanwhile.
	Holds []string `json:"holds,omitempty"`
}

// ClassHistory is a node's record for one task class.
type ClassHistory struct {
	Class     string `json:"class"`
	Runs      int64  `json:"runs"`
	Failures  int64  `json:"failures"`
	EWMAMilli int64  `json:"ewma_ms"`
	// Recent holds the run times (ms) of the latest successful runs since
	// the node's tier last changed, at most the slow window's length.
	Recent []int64 `json:"recent_ms,omitempty"`
	// ConsecutiveFailures counts failures since the last success;
	// FastStreak the distinct tasks among the latest that failed fast, in
	// a row, with the tasks in StreakTasks. A task that failed on another
	// node too is the suspect, not this node: it leaves the streak.
	ConsecutiveFailures int      `json:"consecutive_failures,omitempty"`
	FastStreak          int      `json:"fast_streak,omitempty"`
	StreakTasks         []string `json:"streak_tasks,omitempty"`
}

// Outcome is one attempt result. Blamed marks a failure of a task that
// then succeeded on another node: such a failure says something about
// the node, not the work. A failure of a task that fails elsewhere too,
// or never succeeds anywhere, is never blamed.
type Outcome struct {
	At     Stamp  `json:"at"`
	Class  string `json:"class"`
	Task   string `json:"task,omitempty"`
	OK     bool   `json:"ok"`
	Blamed bool   `json:"blamed,omitempty"`
	// Fast marks a failure within the fast-failure time of its start.
	Fast bool `json:"fast,omitempty"`
}

// UptimeMark records that the node came up or went down at At.
type UptimeMark struct {
	At Stamp `json:"at"`
	Up bool  `json:"up"`
}

// ClassStats is the fleet's record for one task class: the latest
// successful runs (for the fleet median) and the latest success per node
// (does the class succeed elsewhere?).
type ClassStats struct {
	Class     string     `json:"class"`
	Runs      []ClassRun `json:"runs"`
	Successes []ClassRun `json:"successes"`
	// Suspects are nodes whose attempts of the class failed fast in a
	// row before the class had succeeded anywhere else: the first success
	// elsewhere quarantines them.
	Suspects []ClassRun `json:"suspects,omitempty"`
	Index    uint64     `json:"index"`
}

// ClassRun is one successful run of a class: where, how long, when.
type ClassRun struct {
	Node   string `json:"node"`
	Millis int64  `json:"ms,omitempty"`
	At     Stamp  `json:"at"`
}

// Bounds of the derived records, so history never grows without limit.
const (
	classRunsKept      = 32
	classSuccessesKept = 16
	maxOutcomesKept    = 64
	maxUptimeMarks     = 64
	maxStreakTasks     = 16
	maxClassesPerNode  = 32
	// ewmaSpan is the number of runs the EWMA of run times spans: alpha
	// is 2/(span+1), in integers.
	ewmaSpan     = 10
	uptimeWindow = 24 * time.Hour
)

// ProfileSettings are the rules that turn history into tiers and
// quarantines. They are replicated (the leader commits its configured
// ones), so every replica derives the same tiers from the same facts.
// Durations are milliseconds and factors percent: integers keep the
// derivation exact on every platform.
type ProfileSettings struct {
	// Base tiers from the profile: L1 needs both L1 minimums, L2 both L2
	// ones; anything less is L3.
	L1MinCores    int   `json:"l1_min_cores"`
	L1MinMemoryMB int64 `json:"l1_min_memory_mb"`
	L2MinCores    int   `json:"l2_min_cores"`
	L2MinMemoryMB int64 `json:"l2_min_memory_mb"`
	// Demotion for slowness: SlowRuns of the last SlowWindow runs of a
	// class over SlowFactorPercent of the fleet median. Promotion after
	// DwellMs without a run over PromoteFactorPercent nor a blamed
	// failure.
	SlowFactorPercent    int   `json:"slow_factor_percent"`
	SlowRuns             int   `json:"slow_runs"`
	SlowWindow           int   `json:"slow_window"`
	PromoteFactorPercent int   `json:"promote_factor_percent"`
	DwellMs              int64 `json:"dwell_ms"`
	// Demotion for failures: over FailureWindowMs, at least
	// FailureMinAttempts results and FailureRatePercent of them blamed.
	FailureWindowMs    int64 `json:"failure_window_ms"`
	FailureMinAttempts int   `json:"failure_min_attempts"`
	FailureRatePercent int   `json:"failure_rate_percent"`
	// Black holes: BlackHoleFailures failures of a class in a row, each
	// within FastFailureMs of its start, while the class succeeded on
	// another node within the failure window.
	BlackHoleFailures     int   `json:"black_hole_failures"`
	FastFailureMs         int64 `json:"fast_failure_ms"`
	QuarantineSuspectMs   int64 `json:"quarantine_suspect_ms"`
	QuarantineConfirmedMs int64 `json:"quarantine_confirmed_ms"`
	// Slow attempts: one running over SlowAttemptPercent of its class's
	// fleet median (taken over at least 3 runs on other nodes), and at
	// least SlowAttemptFloorMs, is marked slow and its time so far counts
	// as a slow run of its node. 0 turns it off (settings committed
	// before it existed).
	SlowAttemptPercent int   `json:"slow_attempt_percent,omitempty"`
	SlowAttemptFloorMs int64 `json:"slow_attempt_floor_ms,omitempty"`
}

// DefaultProfileSettings: L1 from 4 cores and
// 8 GiB, L2 from 2 cores and 2 GiB; 3 of the last 5 runs over 2.5× the
// fleet median demote; a failure rate over 50% in 5 minutes demotes; 10
// minutes healthy promote; 3 fast failures (under 30 s) make a black hole,
// quarantined 2 minutes on suspicion and 30 once confirmed; an attempt
// running over 5× its class's median, and 10 s, is slow.
func DefaultProfileSettings() ProfileSettings {
	return ProfileSettings{
		L1MinCores: 4, L1MinMemoryMB: 8192, L2MinCores: 2, L2MinMemoryMB: 2048,
		SlowFactorPercent: 250, SlowRuns: 3, SlowWindow: 5, PromoteFactorPercent: 150, DwellMs: 10 * 60 * 1000,
		FailureWindowMs: 5 * 60 * 1000, FailureMinAttempts: 4, FailureRatePercent: 50,
		BlackHoleFailures: 3, FastFailureMs: 30 * 1000,
		QuarantineSuspectMs: 2 * 60 * 1000, QuarantineConfirmedMs: 30 * 60 * 1000,
		SlowAttemptPercent: 500, SlowAttemptFloorMs: 10 * 1000,
	}
}

// Validate checks settings before they are committed.
func (p ProfileSettings) Validate() error {
	var bad []string
	check := func(ok bool, what string) {
		if !ok {
			bad = append(bad, what)
		}
	}
	check(p.L1MinCores >= p.L2MinCores && p.L2MinCores >= 0, "l1_min_cores must be at least l2_min_cores, both at least 0")
	check(p.L1MinMemoryMB >= p.L2MinMemoryMB && p.L2MinMemoryMB >= 0, "l1_min_memory_mb must be at least l2_min_memory_mb, both at least 0")
	check(p.SlowWindow >= 1 && p.SlowWindow <= 16, "slow_window must be 1..16")
	check(p.SlowRuns >= 1 && p.SlowRuns <= p.SlowWindow, "slow_runs must be 1..slow_window")
	check(p.SlowFactorPercent > 100, "slow_factor must be over 1")
	check(p.PromoteFactorPercent >= 100 && p.PromoteFactorPercent <= p.SlowFactorPercent, "promote_factor must be 1..slow_factor")
	check(p.DwellMs >= 0 && p.FailureWindowMs > 0, "dwell must not be negative and failure_window must be positive")
	check(p.FailureMinAttempts >= 1 && p.FailureRatePercent >= 1 && p.FailureRatePercent <= 100, "failure_min_attempts must be at least 1 and failure_rate 1..100%")
	check(p.BlackHoleFailures >= 1 && p.BlackHoleFailures <= maxStreakTasks, fmt.Sprintf("black_hole_failures must be 1..%d", maxStreakTasks))
	check(p.FastFailureMs > 0 && p.QuarantineSuspectMs > 0 && p.QuarantineConfirmedMs >= p.QuarantineSuspectMs, "fast_failure and quarantine times must be positive, confirmed at least suspected")
	check(p.SlowAttemptPercent == 0 || p.SlowAttemptPercent > 100, "slow_attempt_factor must be over 1")
	check(p.SlowAttemptFloorMs >= 0, "slow_attempt_floor must not be negative")
	if len(bad) > 0 {
		return fmt.Errorf("profile settings: %s", strings.Join(bad, "; "))
	}
	return nil
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// BaseTier is the tier a profile earns (the static resources stand in
// for an unmeasured node's).
func (p ProfileSettings) BaseTier(n *Node) scheduler.Tier {
	cores, mem := int(n.Resources.CPUMillis/1000), n.Resources.MemoryMB
	if n.Profile != nil {
		if n.Profile.Cores > 0 {
			cores = n.Profile.Cores
		}
		if n.Profile.MemoryMB > 0 {
			mem = n.Profile.MemoryMB
		}
	}
	switch {
	case cores >= p.L1MinCores && mem >= p.L1MinMemoryMB:
		return scheduler.TierL1
	case cores >= p.L2MinCores && mem >= p.L2MinMemoryMB:
		return scheduler.TierL2
	}
	return scheduler.TierL3
}

// effectiveTier is the tier in force: the pin, or the base moved down by
// the demotions (never below L3).
func effectiveTier(ts TierState) scheduler.Tier {
	if ts.Pin != scheduler.TierUnknown {
		return ts.Pin
	}
	return min(ts.Base+scheduler.Tier(max(ts.Demotions, 0)), scheduler.TierL3)
}

// retier recomputes n's tier from its profile and records a change as an
// event with why; n must be a copy being changed.
func retier(n *Node, ps ProfileSettings, index uint64, now time.Time, why string) {
	n.Tier.Base = ps.BaseTier(n)
	// Demotions beyond what reaches L3 mean nothing: keep them bounded.
	n.Tier.Demotions = min(n.Tier.Demotions, int(scheduler.TierL3-n.Tier.Base))
	next := effectiveTier(n.Tier)
	if next == n.Tier.Tier {
		return
	}
	if n.Tier.Tier != scheduler.TierUnknown {
		n.addEvent(index, now, EventTier, fmt.Sprintf("%s → %s: %s", n.Tier.Tier, next, why))
	}
	n.Tier.Tier = next
	n.Tier.ChangedAt = StampOf(now)
}

// ClassOf is the class a task's history is kept under: its class, or
// its name when it declares none.
func (s *TaskSpec) ClassOf() string {
	if s.TaskShape != nil && s.Class != "" {
		return s.Class
	}
	return s.Name
}

// clone copies a history for changing it; its slices are copied when
// they change.
func (h *NodeHistory) clone() *NodeHistory {
	if h == nil {
		return &NodeHistory{}
	}
	c := *h
	c.Classes = slices.Clone(h.Classes)
	return &c
}

// class returns the index of class in h.Classes, adding it (sorted) when
// missing; -1 when the node already keeps as many classes as it may (the
// least run one is then replaced).
func (h *NodeHistory) class(name string) int {
	i, ok := slices.BinarySearchFunc(h.Classes, name, func(c ClassHistory, n string) int { return strings.Compare(c.Class, n) })
	if ok {
		return i
	}
	if len(h.Classes) >= maxClassesPerNode {
		least := 0
		for j, c := range h.Classes {
			if c.Runs+c.Failures < h.Classes[least].Runs+h.Classes[least].Failures {
				least = j
			}
		}
		h.Classes = slices.Delete(h.Classes, least, least+1)
		i, _ = slices.BinarySearchFunc(h.Classes, name, func(c ClassHistory, n string) int { return strings.Compare(c.Class, n) })
	}
	h.Classes = slices.Insert(h.Classes, i, ClassHistory{Class: name})
	return i
}

// syncTimes rebuilds the scheduler's copy of the EWMAs.
func (h *NodeHistory) syncTimes() {
	h.Times = make([]scheduler.ClassTime, 0, len(h.Classes))
	for _, c := range h.Classes {
		if c.EWMAMilli > 0 {
			h.Times = append(h.Times, scheduler.ClassTime{Class: c.Class, EWMAMillis: c.EWMAMilli})
		}
	}
}

// addOutcome appends o and drops what fell out of the window.
func (h *NodeHistory) addOutcome(o Outcome, window time.Duration) {
	cut := StampOf(o.At.Time().Add(-window))
	n := 1
	for _, x := range h.Outcomes {
		if !x.At.Before(cut) {
			n++
		}
	}
	// One array of the size kept: the history is copied on every result
	// a replica applies, so growing it an element at a time would cost
	// several arrays per result.
	skip := max(n-maxOutcomesKept, 0)
	keep := make([]Outcome, 0, n-skip)
	for _, x := range h.Outcomes {
		if !x.At.Before(cut) {
			if skip > 0 {
				skip--
				continue
			}
			keep = append(keep, x)
		}
	}
	h.Outcomes = append(keep, o)
}

// streakSince is when the earliest fast failure of the tasks of a streak
// ended, as the node's outcomes within the window show (zero when none
// does): the time the streak began.
func (h *NodeHistory) streakSince(tasks []string) Stamp {
	if h == nil || len(tasks) == 0 {
		return 0
	}
	for _, o := range h.Outcomes { // oldest first
		if !o.OK && o.Fast && slices.Contains(tasks, o.Task) {
			return o.At
		}
	}
	return 0
}

// BlamedRate returns the blamed failures and all results within window
// before now.
func (h *NodeHistory) BlamedRate(now time.Time, window time.Duration) (blamed, total int) {
	if h == nil {
		return 0, 0
	}
	cut := StampOf(now.Add(-window))
	for _, o := range h.Outcomes {
		if o.At.Before(cut) {
			continue
		}
		total++
		if o.Blamed {
			blamed++
		}
	}
	return blamed, total
}

// OnlineRatio is the share of the last day (or of the time since the
// node registered, when shorter) that the node was up, from its marks.
func (n *Node) OnlineRatio(now time.Time) float64 {
	from := now.Add(-uptimeWindow)
	if reg := n.RegisteredAt.Time(); reg.After(from) {
		from = reg
	}
	span := now.Sub(from)
	if span <= 0 || len(n.Uptime) == 0 {
		return 1
	}
	var up time.Duration
	state, at := false, from
	for _, m := range n.Uptime {
		t := m.At.Time()
		if t.After(now) {
			break
		}
		if t.After(from) {
			if state {
				up += t.Sub(at)
			}
			at = t
		}
		state = m.Up
	}
	if state {
		up += now.Sub(at)
	}
	return min(float64(up)/float64(span), 1)
}

// markUptime records that n came up or went down, keeping a day of marks
// (and the one before, which says how the day began).
func (n *Node) markUptime(now time.Time, up bool) {
	if k := len(n.Uptime); k > 0 && n.Uptime[k-1].Up == up {
		return
	}
	cut := StampOf(now.Add(-uptimeWindow))
	marks := make([]UptimeMark, 0, len(n.Uptime)+1)
	for i, m := range n.Uptime {
		if m.At.Before(cut) && i+1 < len(n.Uptime) && n.Uptime[i+1].At.Before(cut) {
			continue
		}
		marks = append(marks, m)
	}
	marks = append(marks, UptimeMark{At: StampOf(now), Up: up})
	if len(marks) > maxUptimeMarks {
		marks = marks[len(marks)-maxUptimeMarks:]
	}
	n.Uptime = marks
}

// median returns the median run time of the class's latest runs on nodes
// other than except, and how many runs it is taken over.
func (c *ClassStats) median(except string) (int64, int) {
	if c == nil {
		return 0, 0
	}
	var buf [classRunsKept]int64 // the runs kept fit: no allocation
	vals := buf[:0]
	for _, r := range c.Runs {
		if r.Node != except && r.Millis > 0 {
			vals = append(vals, r.Millis)
		}
	}
	if len(vals) == 0 {
		return 0, 0
	}
	slices.Sort(vals)
	return vals[len(vals)/2], len(vals)
}

// Median is the class's median run time over the fleet's latest runs.
func (c *ClassStats) Median() int64 {
	m, _ := c.median("")
	return m
}

// succeededElsewhere reports whether the class succeeded on a node other
// than node at or after since.
func (c *ClassStats) succeededElsewhere(node string, since Stamp) bool {
	if c == nil {
		return false
	}
	for _, s := range c.Successes {
		if s.Node != node && !s.At.Before(since) {
			return true
		}
	}
	return false
}

// withRun returns a copy of c with a successful run added.
func (c *ClassStats) withRun(class string, run ClassRun, index uint64) *ClassStats {
	out := &ClassStats{Class: class, Index: index}
	if c != nil {
		// Room for the run each adds: cloned at their length, both would
		// be copied again by the append below.
		out.Runs = append(make([]ClassRun, 0, len(c.Runs)+1), c.Runs...)
		out.Successes = append(make([]ClassRun, 0, len(c.Successes)+1), c.Successes...)
		out.Suspects = c.Suspects
	}
	if run.Millis > 0 {
		out.Runs = append(out.Runs, run)
		if len(out.Runs) > classRunsKept {
			out.Runs = slices.Delete(out.Runs, 0, len(out.Runs)-classRunsKept)
		}
	}
	out.Successes = slices.DeleteFunc(out.Successes, func(s ClassRun) bool { return s.Node == run.Node })
	out.Successes = append(out.Successes, ClassRun{Node: run.Node, At: run.At})
	if len(out.Successes) > classSuccessesKept {
		out.Successes = slices.Delete(out.Successes, 0, len(out.Successes)-classSuccessesKept)
	}
	return out
}

// withSuspect returns a copy of c with node among the suspects.
func (c *ClassStats) withSuspect(class, node string, at Stamp, index uint64) *ClassStats {
	out := &ClassStats{Class: class, Index: index}
	if c != nil {
		*out = *c
		out.Index = index
		if slices.ContainsFunc(c.Suspects, func(s ClassRun) bool { return s.Node == node }) {
			return c
		}
	}
	out.Suspects = append(slices.Clone(out.Suspects), ClassRun{Node: node, At: at})
	if len(out.Suspects) > classSuccessesKept {
		out.Suspects = slices.Delete(out.Suspects, 0, len(out.Suspects)-classSuccessesKept)
	}
	return out
}
