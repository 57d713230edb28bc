package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"herd/internal/check"
	"herd/internal/stageid"
)

// Job states. A job is PENDING until its first stage runs, RUNNING while
// any stage is live, and ends SUCCEEDED (every stage did), FAILED (a
// stage exhausted its attempts) or CANCELLED.
const (
	// JobScheduled is a job with a schedule: it runs nothing itself, and
	// each firing starts a run of it, a job of its own.
	JobScheduled = "SCHEDULED"
	JobPending   = "PENDING"
	JobRunning   = "RUNNING"
	JobSucceeded = "SUCCEEDED"
	JobFailed    = "FAILED"
	JobCancelled = "CANCELLED"
)

// Stage states. A stage WAITS for what it depends on, RUNS once its
// tasks exist, and ends SUCCEEDED (every instance did), FAILED,
// CANCELLED, or SKIPPED (something it depends on failed and the job goes
// on with its independent branches).
const (
	StageWaiting   = "WAITING"
	StageRunning   = "RUNNING"
	StageSucceeded = "SUCCEEDED"
	StageFailed    = "FAILED"
	StageCancelled = "CANCELLED"
	StageSkipped   = "SKIPPED"
)

// OnFailureContinue lets a job's independent branches finish after a
// stage failed; by default a failed stage cancels the rest.
const OnFailureContinue = "continue"

// Limits on a job, so one submit cannot bloat every replica's state.
const (
	MaxStages         = 64
	MaxStageInstances = 256
	MaxJobTasks       = 1024
)

// JobSpec is a DAG of stages, as submitted (each stage's task with
// defaults applied by the leader).
type JobSpec struct {
	Name           string      `json:"name"`
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	OnFailure      string      `json:"on_failure,omitempty"`
	Stages         []StageSpec `json:"stages"`
	Schedule       *Schedule   `json:"schedule,omitempty"`
}

// Schedule fires a job periodically: Cron is a cron expression (seconds
// optional) or a descriptor such as "@every 30s", read in TimeZone (UTC
// when empty). CatchUp says what becomes of slots missed while no leader
// could fire them: skip them (the default), or run_once. Overlap says
// what a firing does while the previous run is still live: forbid (the
// default: skip this slot), allow, or replace (cancel the previous run).
// The leader checks the expression and zone at submission.
type Schedule struct {
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone,omitempty"`
	CatchUp  string `json:"catch_up,omitempty"`
	Overlap  string `json:"overlap,omitempty"`
}

// Schedule policies.
const (
	CatchUpSkip    = "skip"
	CatchUpRunOnce = "run_once"
	OverlapForbid  = "forbid"
	OverlapAllow   = "allow"
	OverlapReplace = "replace"
)

// Firing is one slot of a schedule as it was handled: the run it started
// (none when skipped) and why.
type Firing struct {
	Slot    Stamp  `json:"slot"`
	At      Stamp  `json:"at"`
	Run     string `json:"run,omitempty"`
	Outcome string `json:"outcome"`
}

// maxFirings bounds the firings a scheduled job keeps.
const maxFirings = 20

// StageSpec is one stage: a task spec, what it depends on, how many
// instances it fans out to (Count, or one per ForEach item, with the item
// in HERD_ITEM), the files it leaves (Outputs) and the outputs of earlier
// stages it reads (Inputs, as "stage.output").
type StageSpec struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	Count     int      `json:"count,omitempty"`
	ForEach   []string `json:"for_each,omitempty"`
	Outputs   []string `json:"outputs,omitempty"`
	Inputs    []string `json:"inputs,omitempty"`
	Task      TaskSpec `json:"task"`
}

// Instances is how many tasks the stage fans out to.
func (s *StageSpec) Instances() int {
	switch {
	case len(s.ForEach) > 0:
		return len(s.ForEach)
	case s.Count > 0:
		return s.Count
	}
	return 1
}

// Job is the replicated record of a submitted job.
type Job struct {
	ID     string        `json:"id"`
	Spec   JobSpec       `json:"spec"`
	State  string        `json:"state"`
	Stages []StageStatus `json:"stages"`
	// For a scheduled job: the latest slot handled (no slot at or before
	// it ever fires again), the latest firings, and the live run. For a
	// run: the scheduled job it belongs to.
	LastSlot    Stamp           `json:"last_slot,omitzero"`
	Firings     []Firing        `json:"firings,omitempty"`
	LastRun     string          `json:"last_run,omitempty"`
	ScheduledBy string          `json:"scheduled_by,omitempty"`
	CreateIndex uint64          `json:"create_index"`
	ModifyIndex uint64          `json:"modify_index"`
	Timeline    []TimelineEvent `json:"timeline"`
}

// StageStatus is where a stage stands, with its tasks (one per instance,
// once created).
type StageStatus struct {
	Name    string   `json:"name"`
	State   string   `json:"state"`
	TaskIDs []string `json:"task_ids,omitempty"`
	// Gen counts the stage's reruns (its tasks' ids carry it).
	Gen int `json:"gen,omitempty"`
}

func (j *Job) clone() *Job {
	c := *j
	c.Firings = slices.Clone(j.Firings)
	c.Stages = slices.Clone(j.Stages)
	for i := range c.Stages {
		c.Stages[i].TaskIDs = slices.Clone(j.Stages[i].TaskIDs)
	}
	return &c
}

func (j *Job) addEvent(index uint64, at time.Time, kind EventKind, msg string) {
	j.Timeline = appendEvent(j.Timeline, TimelineEvent{Index: index, Time: StampOf(at), Kind: kind, Message: msg}, maxTimeline, 1)
}

// Terminal reports whether a job state is final.
func JobTerminal(state string) bool {
	return state == JobSucceeded || state == JobFailed || state == JobCancelled
}

// StageTaskID is the id of a stage instance's task (see stageid).
func StageTaskID(jobID string, stage, instance, gen int) string {
	return stageid.TaskID(jobID, stage, instance, gen)
}

// JobOfTask returns the job, stage position and instance a task belongs
// to; false for a task submitted on its own.
func JobOfTask(taskID string) (job string, stage, instance int, ok bool) {
	return stageid.Parse(taskID)
}

// OutputDataset is the dataset name a stage instance's output is held
// under on its node.
func OutputDataset(taskID, output string) string { return stageid.Output(taskID, output) }

// Validate checks a job whole: stage names unique, dependencies known
// and acyclic, inputs naming an output of a stage depended on (directly
// or not), fan-out bounded, and every stage's task valid. Each error
// names its stage.
func (s *JobSpec) Validate() error {
	var errs []error
	if len(s.Stages) == 0 {
		errs = append(errs, errors.New("a job needs at least one stage"))
	}
	if len(s.Stages) > MaxStages {
		errs = append(errs, fmt.Errorf("%d stages, at most %d", len(s.Stages), MaxStages))
	}
	if len(s.Name) > MaxNameLen || len(s.IdempotencyKey) > MaxNameLen {
		errs = append(errs, fmt.Errorf("name and idempotency_key must be at most %d bytes", MaxNameLen))
	}
	if sc := s.Schedule; sc != nil {
		if sc.Cron == "" || len(sc.Cron) > MaxNameLen || len(sc.TimeZone) > MaxNameLen {
			errs = append(errs, errors.New("schedule: cron must be 1 to 256 bytes"))
		}
		if sc.CatchUp != "" && sc.CatchUp != CatchUpSkip && sc.CatchUp != CatchUpRunOnce {
			errs = append(errs, fmt.Errorf("schedule: catch_up %q must be %s or %s", sc.CatchUp, CatchUpSkip, CatchUpRunOnce))
		}
		if sc.Overlap != "" && sc.Overlap != OverlapForbid && sc.Overlap != OverlapAllow && sc.Overlap != OverlapReplace {
			errs = append(errs, fmt.Errorf("schedule: overlap %q must be %s, %s or %s", sc.Overlap, OverlapForbid, OverlapAllow, OverlapReplace))
		}
	}
	if s.OnFailure != "" && s.OnFailure != OnFailureContinue {
		errs = append(errs, fmt.Errorf("on_failure %q must be fail or %s", s.OnFailure, OnFailureContinue))
	}
	byName := map[string]int{}
	total := 0
	for i, st := range s.Stages {
		if st.Name == "" || len(st.Name) > MaxNameLen || strings.ContainsAny(st.Name, ".:/ \x00") {
			errs = append(errs, fmt.Errorf("stage %d: name %q must be 1 to %d bytes without '.', ':', '/' or spaces", i, st.Name, MaxNameLen))
			continue
		}
		if _, dup := byName[st.Name]; dup {
			errs = append(errs, fmt.Errorf("stage %s: the name is used twice", st.Name))
			continue
		}
		byName[st.Name] = i
		if st.Count < 0 || st.Instances() > MaxStageInstances || (st.Count > 0 && len(st.ForEach) > 0) {
			errs = append(errs, fmt.Errorf("stage %s: count %d with %d for_each items: give one of them, at most %d instances", st.Name, st.Count, len(st.ForEach), MaxStageInstances))
		}
		total += st.Instances()
		for _, o := range st.Outputs {
			// A stage's output is also named in other stages' inputs as
			// STAGE:OUTPUT: no ':' in it.
			if err := check.DatasetName(o); err != nil {
				errs = append(errs, fmt.Errorf("stage %s: output: %w", st.Name, err))
			} else if strings.Contains(o, ":") {
				errs = append(errs, fmt.Errorf("stage %s: output %q: no ':' in a stage's output, which inputs name as STAGE:OUTPUT", st.Name, o))
			}
		}
		if err := st.Task.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("stage %s: %w", st.Name, err))
		}
	}
	if total > MaxJobTasks {
		errs = append(errs, fmt.Errorf("the stages fan out to %d tasks, at most %d", total, MaxJobTasks))
	}
	for _, st := range s.Stages {
		if _, ok := byName[st.Name]; !ok {
			continue
		}
		for _, d := range st.DependsOn {
			if _, ok := byName[d]; !ok {
				errs = append(errs, fmt.Errorf("stage %s: depends on unknown stage %q", st.Name, d))
			} else if d == st.Name {
				errs = append(errs, fmt.Errorf("stage %s: depends on itself", st.Name))
			}
		}
	}
	if len(errs) == 0 {
		if cycle := findCycle(s.Stages, byName); cycle != nil {
			errs = append(errs, fmt.Errorf("stage %s: dependency cycle %s", cycle[0], strings.Join(cycle, " → ")))
		}
	}
	if len(errs) == 0 {
		for _, st := range s.Stages {
			for _, in := range st.Inputs {
				from, output, ok := strings.Cut(in, ".")
				src, known := byName[from]
				switch {
				case !ok || output == "":
					errs = append(errs, fmt.Errorf("stage %s: input %q must be stage.output", st.Name, in))
				case !known:
					errs = append(errs, fmt.Errorf("stage %s: input %q names unknown stage %q", st.Name, in, from))
				case !slices.Contains(s.Stages[src].Outputs, output):
					errs = append(errs, fmt.Errorf("stage %s: input %q: stage %s declares no output %q", st.Name, in, from, output))
				case !dependsOn(s.Stages, byName, st.Name, from):
					errs = append(errs, fmt.Errorf("stage %s: input %q: the stage does not depend on %s", st.Name, in, from))
				}
			}
		}
	}
	return check.JoinSorted(errs)
}

// findCycle returns the stages of a dependency cycle, first repeated
// last, or nil; stages are visited in order, so the answer is stable.
func findCycle(stages []StageSpec, byName map[string]int) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]int, len(stages))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = onPath
		path = append(path, stages[i].Name)
		for _, d := range stages[i].DependsOn {
			j := byName[d]
			switch mark[j] {
			case onPath:
				start := slices.Index(path, d)
				return append(slices.Clone(path[start:]), d)
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range stages {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// dependsOn reports whether stage a depends on b, directly or through
// others.
func dependsOn(stages []StageSpec, byName map[string]int, a, b string) bool {
	seen := map[string]bool{}
	var walk func(name string) bool
	walk = func(name string) bool {
		for _, d := range stages[byName[name]].DependsOn {
			if d == b {
				return true
			}
			if !seen[d] {
				seen[d] = true
				if walk(d) {
					return true
				}
			}
		}
		return false
	}
	return walk(a)
}
