package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"herd/fsm"
)

// KindRow is what the cluster judged of the nodes of one kind.
type KindRow struct {
	Kind  string `json:"kind"`
	Nodes int    `json:"nodes"`
	// Quarantined and Demoted count nodes judged so at least once;
	// Right counts those judged as their kind deserves (see rightly).
	Quarantined int `json:"quarantined"`
	Demoted     int `json:"demoted"`
	Right       int `json:"right"`
	// For the kinds to catch: the most attempts of good tasks one ate
	// before its first quarantine; the most of them placed once its first
	// failure was known (the rest were in flight then); and the longest
	// time from its first failure to the quarantine.
	MaxWasted       int           `json:"max_wasted,omitempty"`
	MaxAfterFailure int           `json:"max_after_first_failure,omitempty"`
	MaxTimeCatch    time.Duration `json:"max_time_to_catch_ns,omitempty"`
	Missed          int           `json:"missed,omitempty"`
	// Unseen counts bad nodes whose defect failed fewer attempts of good
	// tasks than the black-hole count (it began late, or little such work
	// came their way): too little evidence to judge them by.
	Unseen int `json:"unseen,omitempty"`
}

// Report scores one run.
type Report struct {
	Scenario  string        `json:"scenario"`
	Seed      uint64        `json:"seed"`
	Oracle    bool          `json:"oracle"`
	Simulated time.Duration `json:"simulated_ns"`
	// Tasks by truth and fate.
	Tasks          int `json:"tasks"`
	GoodTasks      int `json:"good_tasks"`
	GoodSucceeded  int `json:"good_succeeded"`
	BadTasks       int `json:"bad_tasks"`
	BadTasksBlamed int `json:"bad_tasks_blamed"`
	// GoodTasksBlamed counts good tasks the evidence made suspects (they
	// failed on two bad nodes).
	GoodTasksBlamed int `json:"good_tasks_blamed"`
	// SmallFailTasks fail on nodes under 4 cores alone; those blamed
	// failed on two small nodes before a big one ran them.
	SmallFailTasks   int `json:"small_fail_tasks"`
	SmallFailBlamed  int `json:"small_fail_blamed"`
	SmallFailSucceed int `json:"small_fail_succeeded"`
	Attempts         int `json:"attempts"`
	FailedAttempts   int `json:"failed_attempts"`
	Commands         int `json:"commands"`
	// Backups counts the backup attempts of speculative tasks.
	Backups int `json:"backups"`
	// Makespan is when the last good task ended, from the start.
	Makespan time.Duration `json:"makespan_ns"`
	// OracleMakespan and MakespanRatio compare with the oracle's run
	// (filled by Compare).
	OracleMakespan time.Duration `json:"oracle_makespan_ns,omitempty"`
	MakespanRatio  float64       `json:"makespan_ratio,omitempty"`
	Kinds          []KindRow     `json:"kinds"`
	// Hung attempts (of classes with a median when they started): how
	// many, how many flagged slow, the latest flag as a multiple of the
	// class's fleet median (the threshold in force, over 5, one look of
	// the leader aside), and as a multiple of the class's true median.
	HungAttempts     int     `json:"hung_attempts"`
	HungFlagged      int     `json:"hung_flagged"`
	MaxFlagRatio     float64 `json:"max_flag_ratio"`
	MaxFlagTrueRatio float64 `json:"max_flag_true_ratio"`
}

// rightly says whether the judgements of a node of kind were right: bad
// nodes kept off (quarantined; a hung one demoted or quarantined), slow
// ones demoted and not quarantined, the others left alone. A bad node
// whose defect never showed is right when left alone (see Unseen).
func rightly(kind string, quarantined, demoted bool) bool {
	switch kind {
	case KindBlackHole, KindClassHole, KindNewClassHole:
		return quarantined
	case KindHung:
		return quarantined || demoted
	case KindSlow:
		return demoted && !quarantined
	}
	return !quarantined && !demoted
}

func (r *runner) report() *Report {
	rep := &Report{Scenario: r.sc.Name, Seed: r.sc.Seed, Oracle: r.opt.Oracle, Simulated: r.now.Sub(epoch),
		Attempts: r.attempts, FailedAttempts: r.failedAttempts, Commands: r.commands, Backups: r.backups}
	rows := map[string]*KindRow{}
	for _, id := range r.order {
		n := r.nodes[id]
		row := rows[n.group.Kind]
		if row == nil {
			row = &KindRow{Kind: n.group.Kind}
			rows[n.group.Kind] = row
		}
		row.Nodes++
		q := !n.firstQuarantine.IsZero()
		if q {
			row.Quarantined++
		}
		if n.demoted {
			row.Demoted++
		}
		unseen := bad(n.group.Kind) && n.group.Kind != KindHung && n.failedBefore < r.settings.BlackHoleFailures && !q && !n.demoted
		if unseen {
			row.Unseen++
		}
		if unseen || rightly(n.group.Kind, q, n.demoted) {
			row.Right++
		}
		switch n.group.Kind {
		case KindBlackHole, KindClassHole, KindNewClassHole:
			if !q {
				if !unseen {
					row.Missed++
				}
				continue
			}
			row.MaxWasted = max(row.MaxWasted, n.failedBefore)
			row.MaxAfterFailure = max(row.MaxAfterFailure, n.afterEvidence)
			if !n.firstFailure.IsZero() {
				row.MaxTimeCatch = max(row.MaxTimeCatch, n.firstQuarantine.Sub(n.firstFailure))
			}
		}
	}
	for _, kind := range []string{KindHealthy, KindSlow, KindFlapping, KindBlackHole, KindClassHole, KindNewClassHole, KindHung} {
		if row := rows[kind]; row != nil {
			rep.Kinds = append(rep.Kinds, *row)
		}
	}
	st := r.f.State()
	for _, id := range r.taskIDs {
		t := r.tasks[id]
		rep.Tasks++
		blamed := false
		if ft, err := st.Task(id); err == nil {
			blamed = slices.ContainsFunc(ft.Timeline(), func(e fsm.TimelineEvent) bool { return e.Kind == fsm.EventBlame })
		}
		switch t.truth {
		case taskGood:
			rep.GoodTasks++
			if t.state == fsm.TaskSucceeded {
				rep.GoodSucceeded++
				rep.Makespan = max(rep.Makespan, t.done.Sub(epoch))
			}
			if blamed {
				rep.GoodTasksBlamed++
			}
		case taskSmallFail:
			rep.SmallFailTasks++
			if blamed {
				rep.SmallFailBlamed++
			}
			if t.state == fsm.TaskSucceeded {
				rep.SmallFailSucceed++
			}
		default:
			rep.BadTasks++
			if blamed {
				rep.BadTasksBlamed++
			}
		}
	}
	ids := make([]string, 0, len(r.hung))
	for id := range r.hung {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		h := r.hung[id]
		rep.HungAttempts++
		if h.flag > 0 {
			rep.HungFlagged++
			// Less the tick the leader looks on, and never under what the
			// floor allows.
			late := max(h.flag-tick, 0)
			rep.MaxFlagRatio = max(rep.MaxFlagRatio, 5*float64(late)/float64(h.limit))
			rep.MaxFlagTrueRatio = max(rep.MaxFlagTrueRatio, float64(h.flag)/float64(h.median))
		}
	}
	return rep
}

// Row returns the report's row for a kind (zero when the fleet had none).
func (rep *Report) Row(kind string) KindRow {
	for _, k := range rep.Kinds {
		if k.Kind == kind {
			return k
		}
	}
	return KindRow{Kind: kind}
}

// Compare fills the makespan ratio against the oracle's run.
func (rep *Report) Compare(oracle *Report) {
	rep.OracleMakespan = oracle.Makespan
	if oracle.Makespan > 0 {
		rep.MakespanRatio = float64(rep.Makespan) / float64(oracle.Makespan)
	}
}

// Check lists the targets the report misses: no healthy or flapping node
// quarantined or demoted, every black hole caught within 3 failed
// attempts, every hung attempt flagged within 5× its class's median plus
// a tick, and a makespan within 1.2× the oracle's.
func (rep *Report) Check() []string {
	var miss []string
	for _, kind := range []string{KindHealthy, KindFlapping} {
		if row := rep.Row(kind); row.Quarantined+row.Demoted > 0 {
			miss = append(miss, fmt.Sprintf("%s nodes judged bad: %d quarantined, %d demoted", kind, row.Quarantined, row.Demoted))
		}
	}
	if row := rep.Row(KindSlow); row.Quarantined > 0 {
		miss = append(miss, fmt.Sprintf("slow nodes quarantined: %d", row.Quarantined))
	}
	for _, kind := range []string{KindBlackHole, KindClassHole, KindNewClassHole} {
		row := rep.Row(kind)
		if row.Missed > 0 {
			miss = append(miss, fmt.Sprintf("%s: %d of %d never caught", kind, row.Missed, row.Nodes))
		}
		// The first failure is the first evidence; attempts already in
		// flight then could not be kept off.
		if 1+row.MaxAfterFailure > 3 {
			miss = append(miss, fmt.Sprintf("%s: one ate %d attempts placed after its first failure before it was caught (target: caught by its third failure)", kind, row.MaxAfterFailure))
		}
	}
	if rep.HungAttempts > 0 && rep.HungFlagged == 0 {
		miss = append(miss, "no hung attempt flagged")
	}
	if rep.MaxFlagRatio > 5 {
		miss = append(miss, fmt.Sprintf("a hung attempt flagged at %.1f× its class's median (target 5×, the floor aside)", rep.MaxFlagRatio))
	}
	if rep.MakespanRatio > 1.2 {
		miss = append(miss, fmt.Sprintf("makespan %.2f× the oracle's (target 1.2×)", rep.MakespanRatio))
	}
	return miss
}

// Write prints the report for people.
func (rep *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "scenario %s (seed %d): %s simulated, %d tasks (%d good, %d bad, %d failing on small nodes), %d attempts (%d failed), %d commands\n",
		rep.Scenario, rep.Seed, rep.Simulated.Round(time.Second), rep.Tasks, rep.GoodTasks, rep.BadTasks, rep.SmallFailTasks, rep.Attempts, rep.FailedAttempts, rep.Commands)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNODES\tQUARANTINED\tDEMOTED\tRIGHT\tMISSED\tUNSEEN\tMAX EATEN\tPLACED AFTER 1ST FAILURE\tMAX TIME TO CATCH")
	for _, k := range rep.Kinds {
		catch := "-"
		if k.MaxTimeCatch > 0 || k.Kind == KindBlackHole || k.Kind == KindClassHole || k.Kind == KindNewClassHole {
			catch = k.MaxTimeCatch.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d/%d\t%d\t%d\t%d\t%d\t%s\n", k.Kind, k.Nodes, k.Quarantined, k.Demoted, k.Right, k.Nodes, k.Missed, k.Unseen, k.MaxWasted, k.MaxAfterFailure, catch)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "good tasks succeeded: %d of %d; bad tasks blamed: %d of %d; good tasks blamed: %d; tasks failing on small nodes: %d, %d succeeded on a big one, %d blamed\n",
		rep.GoodSucceeded, rep.GoodTasks, rep.BadTasksBlamed, rep.BadTasks, rep.GoodTasksBlamed, rep.SmallFailTasks, rep.SmallFailSucceed, rep.SmallFailBlamed)
	fmt.Fprintf(w, "backup attempts of speculative tasks: %d\n", rep.Backups)
	fmt.Fprintf(w, "hung attempts flagged slow: %d of %d (of classes with a median when they started), the latest at %.1f× the fleet median (%.1f× the class's true median)\n", rep.HungFlagged, rep.HungAttempts, rep.MaxFlagRatio, rep.MaxFlagTrueRatio)
	fmt.Fprintf(w, "makespan %s", rep.Makespan.Round(time.Second))
	if rep.OracleMakespan > 0 {
		fmt.Fprintf(w, ", oracle %s: %.2f×", rep.OracleMakespan.Round(time.Second), rep.MakespanRatio)
	}
	fmt.Fprintln(w)
	if miss := rep.Check(); len(miss) > 0 {
		fmt.Fprintf(w, "targets missed: %s\n", strings.Join(miss, "; "))
	} else {
		fmt.Fprintln(w, "targets met")
	}
}
