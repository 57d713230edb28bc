package spec

import (
	"slices"
	"strconv"
	"strings"

	"herd/internal/check"
)

// Job is a job as a user declares it: a named DAG of stages, run once, or
// fired by its schedule.
type Job struct {
	Name           string `json:"name"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// OnFailure "continue" lets the independent branches finish after a
	// stage failed; by default ("fail") the rest is cancelled.
	OnFailure string  `json:"on_failure,omitempty"`
	Stages    []Stage `json:"stages"`
	// Schedule, when set, makes the job periodic: it runs nothing itself,
	// and each firing starts a run of it (a job of its own).
	Schedule *Schedule `json:"schedule,omitempty"`
}

// Schedule fires a job: Cron is a cron expression (seconds optional) or a
// descriptor such as "@every 30s", read in TimeZone (UTC when empty).
// CatchUp says what becomes of slots missed while no leader could fire
// them: skip them (the default), or run_once. Overlap says what a firing
// does while the previous run is still live: forbid (the default: skip
// this slot), allow, or replace (cancel the previous run). The leader
// parses the expression and zone at submission.
type Schedule struct {
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone,omitempty"`
	CatchUp  string `json:"catch_up,omitempty"`
	Overlap  string `json:"overlap,omitempty"`
}

// Stage is one stage: a task, the stages it depends on, its fan-out
// (Count, or one instance per ForEach item, the item in HERD_ITEM), the
// files it leaves in its working directory (Outputs) and the outputs of
// earlier stages it reads (Inputs, "stage.output"), found at
// $HERD_INPUTS/<stage>/<output> (<stage>/<instance>/<output> for a stage
// that fans out).
type Stage struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	Count     int      `json:"count,omitempty"`
	ForEach   []string `json:"for_each,omitempty"`
	Outputs   []string `json:"outputs,omitempty"`
	Inputs    []string `json:"inputs,omitempty"`
	Task      Task     `json:"task"`
}

// The values of Job.OnFailure and of a schedule's policies.
const (
	OnFailureFail     = "fail"
	OnFailureContinue = "continue"
	CatchUpSkip       = "skip"
	CatchUpRunOnce    = "run_once"
	OverlapForbid     = "forbid"
	OverlapAllow      = "allow"
	OverlapReplace    = "replace"
)

// Limits on a job, so one submit cannot bloat every replica's state.
const (
	MaxStages         = 64
	MaxStageInstances = 256
	MaxJobTasks       = 1024
)

// Instances is how many tasks the stage fans out to.
func (s *Stage) Instances() int {
	switch {
	case len(s.ForEach) > 0:
		return len(s.ForEach)
	case s.Count > 0:
		return s.Count
	}
	return 1
}

// Normalize returns the job with its defaults: on_failure fail is the
// empty string, and each stage's task is normalized, named after its
// stage when it has no name of its own. The stages are copied, so the
// caller's job is left as it was.
func (j Job) Normalize() Job {
	if j.OnFailure == OnFailureFail {
		j.OnFailure = ""
	}
	j.Stages = slices.Clone(j.Stages)
	for i := range j.Stages {
		st := &j.Stages[i]
		if st.Task.Name == "" {
			st.Task.Name = st.Name
		}
		st.Task = st.Task.Normalize()
	}
	return j
}

// Validate checks a normalized job whole: stage names unique,
// dependencies known and acyclic, inputs naming an output of a stage
// depended on (directly or not), fan-out bounded, and every stage's task
// valid. Each problem names its field, a stage by its name
// ("stages[build].task.command").
func (j *Job) Validate() error {
	p := newProblems()
	if len(j.Stages) == 0 {
		p.addf("stages", "a job needs at least one stage")
	}
	if len(j.Stages) > MaxStages {
		p.addf("stages", "%d stages, at most %d", len(j.Stages), MaxStages)
	}
	if len(j.Name) > MaxNameLen {
		p.addf("name", "is longer than %d bytes", MaxNameLen)
	}
	if len(j.IdempotencyKey) > MaxNameLen {
		p.addf("idempotency_key", "is longer than %d bytes", MaxNameLen)
	}
	if sc := j.Schedule; sc != nil {
		sc.validate(p.under("schedule"))
	}
	if j.OnFailure != "" && j.OnFailure != OnFailureContinue {
		p.addf("on_failure", "%q must be %s or %s", j.OnFailure, OnFailureFail, OnFailureContinue)
	}
	byName := map[string]int{}
	total := 0
	for i, st := range j.Stages {
		if st.Name == "" || len(st.Name) > MaxNameLen || strings.ContainsAny(st.Name, ".:/ \x00") {
			p.addf("stages["+strconv.Itoa(i)+"].name", "%q must be 1 to %d bytes without '.', ':', '/' or spaces", st.Name, MaxNameLen)
			continue
		}
		sp := p.under("stages[" + st.Name + "]")
		if _, dup := byName[st.Name]; dup {
			sp.addf("name", "is used by two stages")
			continue
		}
		byName[st.Name] = i
		if st.Count < 0 || st.Instances() > MaxStageInstances || (st.Count > 0 && len(st.ForEach) > 0) {
			sp.addf("count", "%d with %d for_each items: give one of them, at most %d instances", st.Count, len(st.ForEach), MaxStageInstances)
		}
		total += st.Instances()
		for k, o := range st.Outputs {
			// The dataset a stage's output becomes is named TASK:OUTPUT.
			path := "outputs[" + strconv.Itoa(k) + "]"
			if err := check.DatasetName(o); err != nil {
				sp.addf(path, "%v", err)
			} else if strings.Contains(o, ":") {
				sp.addf(path, "%q: no ':' in a stage's output, whose dataset is named TASK:OUTPUT", o)
			}
		}
		st.Task.validate(sp.under("task"))
	}
	if total > MaxJobTasks {
		p.addf("stages", "fan out to %d tasks, at most %d", total, MaxJobTasks)
	}
	for _, st := range j.Stages {
		if _, ok := byName[st.Name]; !ok {
			continue
		}
		for _, d := range st.DependsOn {
			if _, ok := byName[d]; !ok {
				p.addf("stages["+st.Name+"].depends_on", "unknown stage %q", d)
			} else if d == st.Name {
				p.addf("stages["+st.Name+"].depends_on", "the stage depends on itself")
			}
		}
	}
	if len(*p.errs) > 0 {
		return p.err()
	}
	if cycle := j.findCycle(byName); cycle != nil {
		p.addf("stages["+cycle[0]+"].depends_on", "dependency cycle %s", strings.Join(cycle, " → "))
		return p.err()
	}
	for _, st := range j.Stages {
		for _, in := range st.Inputs {
			from, output, ok := strings.Cut(in, ".")
			src, known := byName[from]
			path := "stages[" + st.Name + "].inputs"
			switch {
			case !ok || output == "":
				p.addf(path, "%q must be stage.output", in)
			case !known:
				p.addf(path, "%q names unknown stage %q", in, from)
			case !slices.Contains(j.Stages[src].Outputs, output):
				p.addf(path, "%q: stage %s declares no output %q", in, from, output)
			case !j.DependsOn(byName, st.Name, from):
				p.addf(path, "%q: the stage does not depend on %s", in, from)
			}
		}
	}
	return p.err()
}

func (sc *Schedule) validate(p *problems) {
	if sc.Cron == "" || len(sc.Cron) > MaxNameLen {
		p.addf("cron", "must be 1 to %d bytes", MaxNameLen)
	}
	if len(sc.TimeZone) > MaxNameLen {
		p.addf("time_zone", "is longer than %d bytes", MaxNameLen)
	}
	if sc.CatchUp != "" && sc.CatchUp != CatchUpSkip && sc.CatchUp != CatchUpRunOnce {
		p.addf("catch_up", "%q must be %s or %s", sc.CatchUp, CatchUpSkip, CatchUpRunOnce)
	}
	if sc.Overlap != "" && sc.Overlap != OverlapForbid && sc.Overlap != OverlapAllow && sc.Overlap != OverlapReplace {
		p.addf("overlap", "%q must be %s, %s or %s", sc.Overlap, OverlapForbid, OverlapAllow, OverlapReplace)
	}
}

// StageIndex maps each stage's name to its position.
func (j *Job) StageIndex() map[string]int {
	byName := make(map[string]int, len(j.Stages))
	for i, st := range j.Stages {
		byName[st.Name] = i
	}
	return byName
}

// findCycle returns the stages of a dependency cycle, first repeated
// last, or nil; stages are visited in order, so the answer is stable.
func (j *Job) findCycle(byName map[string]int) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]int, len(j.Stages))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = onPath
		path = append(path, j.Stages[i].Name)
		for _, d := range j.Stages[i].DependsOn {
			k := byName[d]
			switch mark[k] {
			case onPath:
				start := slices.Index(path, d)
				return append(slices.Clone(path[start:]), d)
			case unseen:
				if c := visit(k); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range j.Stages {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// DependsOn reports whether stage a depends on b, directly or through
// others; byName is the job's StageIndex.
func (j *Job) DependsOn(byName map[string]int, a, b string) bool {
	seen := map[string]bool{}
	var walk func(name string) bool
	walk = func(name string) bool {
		for _, d := range j.Stages[byName[name]].DependsOn {
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
