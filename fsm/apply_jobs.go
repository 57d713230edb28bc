package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"herd/scheduler"
	"herd/spec"
)

// SubmitJobRequest creates a job. The id and time are the leader's.
type SubmitJobRequest struct {
	ID          string    `json:"id"`
	SubmittedAt time.Time `json:"submitted_at"`
	Spec        spec.Job  `json:"spec"`
}

// CancelJobRequest cancels a job and its live stages.
type CancelJobRequest struct {
	JobID  string    `json:"job_id"`
	Reason string    `json:"reason,omitempty"`
	Now    time.Time `json:"now"`
}

// JobResult answers a job command. Created is false when the
// idempotency key matched an existing job.
type JobResult struct {
	Job     *Job
	Created bool
}

func getJob(db *store, id string) (*Job, error) {
	if j, ok := db.job(id); ok {
		return j, nil
	}
	return nil, reject(RejectNotFound, "job %q not found", id)
}

func applySubmitJob(db *store, index uint64, r *SubmitJobRequest) (any, error) {
	if r.ID == "" || strings.Contains(r.ID, ".") {
		return nil, reject(RejectInvalid, "job id %q: required, without dots", r.ID)
	}
	if err := r.Spec.Validate(); err != nil {
		return nil, reject(RejectInvalid, "%v", err)
	}
	if k := r.Spec.IdempotencyKey; k != "" {
		if existing, ok := db.jobByKey(k); ok {
			return &JobResult{Job: existing}, nil
		}
	}
	if _, exists := db.job(r.ID); exists {
		return nil, reject(RejectConflict, "job id %q already exists", r.ID)
	}
	if r.Spec.Schedule != nil {
		j := &Job{ID: r.ID, Spec: r.Spec, State: JobScheduled, CreateIndex: index, ModifyIndex: index, LastSlot: StampOf(r.SubmittedAt)}
		j.addEvent(index, r.SubmittedAt, EventQueued, fmt.Sprintf("scheduled %q (time zone %s, catch up %s, overlap %s)", r.Spec.Schedule.Cron,
			orDefault(r.Spec.Schedule.TimeZone, "UTC"), orDefault(r.Spec.Schedule.CatchUp, spec.CatchUpSkip), orDefault(r.Spec.Schedule.Overlap, spec.OverlapForbid)))
		db.putJob(j)
		return &JobResult{Job: j, Created: true}, nil
	}
	j, err := newRun(db, index, r.ID, r.Spec, r.SubmittedAt)
	if err != nil {
		return nil, err
	}
	db.putJob(j)
	return &JobResult{Job: j, Created: true}, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// newRun makes a job that runs, its first stages started.
func newRun(db *store, index uint64, id string, spec spec.Job, now time.Time) (*Job, error) {
	j := &Job{ID: id, Spec: spec, State: JobPending, CreateIndex: index, ModifyIndex: index}
	j.Spec.Schedule = nil
	tasks := 0
	for _, st := range spec.Stages {
		j.Stages = append(j.Stages, StageStatus{Name: st.Name, State: StageWaiting})
		tasks += st.Instances()
	}
	j.addEvent(index, now, EventQueued, fmt.Sprintf("submitted: %d stages, %d tasks", len(j.Stages), tasks))
	if err := startReadyStages(db, index, j, now); err != nil {
		return nil, err
	}
	return j, nil
}

// FireJobRequest handles one slot of a scheduled job: Run starts a run
// (subject to the overlap policy), or the slot is recorded as skipped;
// Outcome says why. Slots only move forward: a slot at or before the
// latest handled one is refused, so no leader ever fires one twice.
type FireJobRequest struct {
	JobID   string    `json:"job_id"`
	Slot    time.Time `json:"slot"`
	Run     bool      `json:"run"`
	Outcome string    `json:"outcome"`
	Now     time.Time `json:"now"`
}

func applyFireJob(db *store, index uint64, r *FireJobRequest) (any, error) {
	old, err := getJob(db, r.JobID)
	if err != nil {
		return nil, err
	}
	if old.State != JobScheduled {
		return nil, reject(RejectConflict, "job %s is %s, not scheduled", old.ID, old.State)
	}
	slot := StampOf(r.Slot)
	if !slot.After(old.LastSlot) {
		return nil, reject(RejectConflict, "job %s: slot %s was handled already (latest %s)", old.ID,
			r.Slot.UTC().Format(time.RFC3339), old.LastSlot.Time().Format(time.RFC3339))
	}
	j := old.clone()
	j.ModifyIndex = index
	j.LastSlot = slot
	f := Firing{Slot: slot, At: StampOf(r.Now), Outcome: r.Outcome}
	if r.Run {
		prev, live := db.job(j.LastRun)
		live = live && !JobTerminal(prev.State)
		switch overlap := orDefault(j.Spec.Schedule.Overlap, spec.OverlapForbid); {
		case live && overlap == spec.OverlapForbid:
			f.Outcome = fmt.Sprintf("skipped: run %s is still %s (overlap forbid); %s", prev.ID, prev.State, f.Outcome)
			r.Run = false
		case live && overlap == spec.OverlapReplace:
			c := prev.clone()
			c.State, c.ModifyIndex = JobCancelled, index
			c.addEvent(index, r.Now, EventCancelled, "replaced by the next run (overlap replace)")
			db.putJob(c)
			if err := cancelJobStages(db, index, c, r.Now, "replaced by the next run"); err != nil {
				return nil, err
			}
			db.putJob(c)
			f.Outcome += fmt.Sprintf("; run %s replaced", prev.ID)
		}
	}
	if r.Run {
		id := j.ID + "@" + strconv.FormatInt(r.Slot.Unix(), 10)
		if _, exists := db.job(id); exists {
			return nil, reject(RejectConflict, "run %s exists already", id)
		}
		run, err := newRun(db, index, id, j.Spec, r.Now)
		if err != nil {
			return nil, err
		}
		run.ScheduledBy = j.ID
		db.putJob(run)
		j.LastRun, f.Run = id, id
	}
	j.Firings = append(j.Firings, f)
	if len(j.Firings) > maxFirings {
		j.Firings = slices.Delete(j.Firings, 0, len(j.Firings)-maxFirings)
	}
	msg := "slot " + r.Slot.UTC().Format(time.RFC3339) + ": " + f.Outcome
	if f.Run != "" {
		msg += ", run " + f.Run
	}
	j.addEvent(index, r.Now, EventNodeSelected, msg)
	db.putJob(j)
	return &JobResult{Job: j, Created: f.Run != ""}, nil
}

// startReadyStages creates the tasks of every waiting stage whose
// dependencies all SUCCEEDED, in stage order; j is a copy being changed.
func startReadyStages(db *store, index uint64, j *Job, now time.Time) error {
	for i := range j.Spec.Stages {
		st := &j.Spec.Stages[i]
		if j.Stages[i].State != StageWaiting || !depsSucceeded(j, st) {
			continue
		}
		ids := make([]string, 0, st.Instances())
		for k := 0; k < st.Instances(); k++ {
			t := stageTask(j, i, k, now, index)
			if _, exists := db.task(t.ID); exists {
				return reject(RejectConflict, "task id %q already exists", t.ID)
			}
			db.w.interner.task(t, nil, false)
			db.putTask(t)
			ids = append(ids, t.ID)
		}
		j.Stages[i].State, j.Stages[i].TaskIDs = StageRunning, ids
		j.addEvent(index, now, EventNodeSelected, fmt.Sprintf("stage %s started: %d tasks", st.Name, len(ids)))
		if j.State == JobPending {
			j.State = JobRunning
		}
	}
	return nil
}

func depsSucceeded(j *Job, st *spec.Stage) bool {
	for _, d := range st.DependsOn {
		if j.Stages[stageIndex(j, d)].State != StageSucceeded {
			return false
		}
	}
	return true
}

func stageIndex(j *Job, name string) int {
	return slices.IndexFunc(j.Spec.Stages, func(s spec.Stage) bool { return s.Name == name })
}

// stageTask builds instance k of stage i: the stage's task spec, named
// after the job and stage, with HERD_JOB_ID, HERD_STAGE, HERD_INSTANCE
// (and HERD_ITEM for a for_each stage) in its environment, its outputs,
// and, as inputs, the outputs of the stages it reads from every instance
// of them, each with the path the command finds it at under
// $HERD_INPUTS: <stage>/<output>, or <stage>/<instance>/<output> for a
// stage that fans out.
func stageTask(j *Job, i, k int, now time.Time, index uint64) *Task {
	st := &j.Spec.Stages[i]
	shape := *FromSpec(st.Task).TaskShape
	env := maps.Clone(shape.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["HERD_JOB_ID"], env["HERD_STAGE"], env["HERD_INSTANCE"] = j.ID, st.Name, strconv.Itoa(k)
	if len(st.ForEach) > 0 {
		env["HERD_ITEM"] = st.ForEach[k]
	}
	shape.Env = env
	shape.Outputs = slices.Clone(st.Outputs)
	shape.Inputs, shape.InputPaths = nil, nil
	for _, in := range st.Inputs {
		from, output, _ := strings.Cut(in, ".")
		src := stageIndex(j, from)
		n := j.Spec.Stages[src].Instances()
		for m := 0; m < n; m++ {
			// The task that made instance m's output (a rerun's, if any).
			producer := StageTaskID(j.ID, src, m, 0)
			if ids := j.Stages[src].TaskIDs; m < len(ids) {
				producer = ids[m]
			}
			shape.Inputs = append(shape.Inputs, OutputDataset(producer, output))
			path := from + "/" + output
			if n > 1 {
				path = from + "/" + strconv.Itoa(m) + "/" + output
			}
			shape.InputPaths = append(shape.InputPaths, path)
		}
	}
	if shape.Class == "" {
		shape.Class = j.Spec.Name + "/" + st.Name
	}
	name := j.Spec.Name + "/" + st.Name
	if st.Instances() > 1 {
		name += "/" + strconv.Itoa(k)
	}
	id := StageTaskID(j.ID, i, k, j.Stages[i].Gen)
	return newTask(id, TaskSpec{Name: name, TaskShape: &shape}, index, now,
		fmt.Sprintf("stage %s of job %s (instance %d) by %s with priority %d", st.Name, j.ID, k, shape.Submitter, shape.Priority))
}

// jobTaskEnded moves a task's job on after the task reached a terminal
// state: the stage ends once every instance has, the stages it unblocked
// start, and the job ends with its last stage. A failed stage fails the
// job and cancels its live stages, unless on_failure is continue (then
// the stages that depend on it are skipped and the rest finish).
func jobTaskEnded(db *store, index uint64, t *Task, now time.Time) error {
	jobID, si, _, ok := JobOfTask(t.ID)
	if !ok {
		return nil
	}
	old, ok := db.job(jobID)
	if !ok || JobTerminal(old.State) || si >= len(old.Stages) {
		return nil
	}
	j := old.clone()
	j.ModifyIndex = index
	stage := &j.Stages[si]
	if stage.State != StageRunning {
		db.putJob(j)
		return nil
	}
	done, failed, cancelled := 0, "", true
	for _, id := range stage.TaskIDs {
		tk, ok := db.task(id)
		if !ok {
			continue
		}
		if tk.State.Terminal() {
			done++
			if tk.State != TaskSucceeded {
				if failed == "" {
					failed = fmt.Sprintf("task %s %s", tk.ID, tk.State)
				}
				cancelled = cancelled && tk.State == TaskCancelled
			}
		}
	}
	if done < len(stage.TaskIDs) {
		db.putJob(j)
		return nil
	}
	name := j.Spec.Stages[si].Name
	if failed == "" {
		stage.State = StageSucceeded
		j.addEvent(index, now, EventFinished, fmt.Sprintf("stage %s succeeded", name))
		if err := startReadyStages(db, index, j, now); err != nil {
			return err
		}
	} else {
		stage.State = StageFailed
		if cancelled {
			stage.State = StageCancelled
		}
		j.addEvent(index, now, EventFailed, fmt.Sprintf("stage %s %s: %s", name, strings.ToLower(stage.State), failed))
		if j.Spec.OnFailure == spec.OnFailureContinue {
			skipDependents(j, name, index, now)
		} else {
			// Settled before its tasks are cancelled: their own ends
			// then find the job terminal and leave it be.
			j.State = JobFailed
			if cancelled {
				j.State = JobCancelled
			}
			j.addEvent(index, now, EventFinished, "job "+strings.ToLower(j.State))
			db.putJob(j)
			if err := cancelJobStages(db, index, j, now, "job "+strings.ToLower(j.State)+": stage "+name+" "+strings.ToLower(stage.State)); err != nil {
				return err
			}
		}
	}
	settleJob(j, index, now)
	db.putJob(j)
	return nil
}

// skipDependents marks every waiting stage that depends, directly or not,
// on the failed one as SKIPPED.
func skipDependents(j *Job, failed string, index uint64, now time.Time) {
	byName := j.Spec.StageIndex()
	for i, s := range j.Spec.Stages {
		if j.Stages[i].State == StageWaiting && j.Spec.DependsOn(byName, s.Name, failed) {
			j.Stages[i].State = StageSkipped
			j.addEvent(index, now, EventCancelled, fmt.Sprintf("stage %s skipped: it depends on %s, which failed", s.Name, failed))
		}
	}
}

// cancelJobStages cancels the job's live tasks and marks every stage not
// yet ended CANCELLED; j is a copy being changed.
func cancelJobStages(db *store, index uint64, j *Job, now time.Time, why string) error {
	for i := range j.Stages {
		s := &j.Stages[i]
		switch s.State {
		case StageWaiting:
			s.State = StageCancelled
		case StageRunning:
			for _, id := range s.TaskIDs {
				tk, ok := db.task(id)
				if !ok || tk.State.Terminal() {
					continue
				}
				if _, err := cancelTask(db, index, tk, why, now); err != nil {
					return err
				}
			}
			s.State = StageCancelled
		}
	}
	return nil
}

// settleJob ends the job once no stage is waiting or running: SUCCEEDED
// when all succeeded, else FAILED (or CANCELLED when nothing failed).
func settleJob(j *Job, index uint64, now time.Time) {
	if JobTerminal(j.State) {
		return
	}
	failed, cancelled := false, false
	for _, s := range j.Stages {
		switch s.State {
		case StageWaiting, StageRunning:
			return
		case StageFailed, StageSkipped:
			failed = true
		case StageCancelled:
			cancelled = true
		}
	}
	switch {
	case failed:
		j.State = JobFailed
	case cancelled:
		j.State = JobCancelled
	default:
		j.State = JobSucceeded
	}
	j.addEvent(index, now, EventFinished, "job "+strings.ToLower(j.State))
}

func applyCancelJob(db *store, index uint64, r *CancelJobRequest) (any, error) {
	old, err := getJob(db, r.JobID)
	if err != nil {
		return nil, err
	}
	if JobTerminal(old.State) {
		if old.State == JobCancelled {
			return &JobResult{Job: old}, nil
		}
		return nil, reject(RejectConflict, "job %s already ended %s", old.ID, old.State)
	}
	if old.State == JobScheduled && old.LastRun != "" {
		// Cancelling a schedule cancels its live run too.
		if run, ok := db.job(old.LastRun); ok && !JobTerminal(run.State) {
			if _, err := applyCancelJob(db, index, &CancelJobRequest{JobID: run.ID, Reason: r.Reason, Now: r.Now}); err != nil {
				return nil, err
			}
		}
	}
	j := old.clone()
	j.ModifyIndex = index
	why := r.Reason
	if why == "" {
		why = "cancelled by request"
	}
	j.addEvent(index, r.Now, EventCancelled, why)
	// The job is settled first: the cancelled tasks' own ends then find
	// it terminal and leave it be.
	j.State = JobCancelled
	db.putJob(j)
	if err := cancelJobStages(db, index, j, r.Now, "job cancelled: "+why); err != nil {
		return nil, err
	}
	db.putJob(j)
	return &JobResult{Job: j}, nil
}

// Job returns the job with the given id.
func (s *State) Job(id string) (*Job, error) {
	j, ok := s.st.job(id)
	if !ok {
		return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return j, nil
}

// JobByIdempotencyKey returns the job submitted with key, if any.
func (s *State) JobByIdempotencyKey(key string) (*Job, error) {
	j, ok := s.st.jobByKey(key)
	if !ok {
		return nil, fmt.Errorf("idempotency key %q: %w", key, ErrNotFound)
	}
	return j, nil
}

// Jobs lists jobs in id order after the given id, at most limit (0: all).
func (s *State) Jobs(after string, limit int) []*Job {
	var out []*Job
	s.st.jobs.AscendGreaterOrEqual(&Job{ID: after}, func(j *Job) bool {
		if after != "" && j.ID == after {
			return true
		}
		out = append(out, j)
		return limit <= 0 || len(out) < limit
	})
	return out
}

// ActiveJobs lists the scheduled and running jobs in id order: the ones
// a leader fires or watches, without the finished ones beside them.
func (s *State) ActiveJobs() []*Job {
	out := make([]*Job, 0, s.st.activeJobs.Len())
	s.st.activeJobs.Ascend(func(j *Job) bool {
		out = append(out, j)
		return true
	})
	return out
}

// RerunStageRequest reruns instances of a finished stage whose outputs a
// live stage needs but no live node holds any more (its node is DOWN).
type RerunStageRequest struct {
	JobID     string    `json:"job_id"`
	Stage     string    `json:"stage"`
	Instances []int     `json:"instances"`
	Reason    string    `json:"reason"`
	Now       time.Time `json:"now"`
}

// heldAlive reports whether a node that is not DOWN holds dataset.
func heldAlive(db *store, dataset string) bool {
	held := false
	db.nodes.Ascend(func(n *Node) bool {
		if n.Liveness != scheduler.LivenessDown {
			if _, ok := slices.BinarySearchFunc(n.Datasets, dataset, func(d scheduler.Dataset, name string) int { return strings.Compare(d.Name, name) }); ok {
				held = true
			}
		}
		return !held
	})
	return held
}

// applyRerunStage reruns the named instances of a SUCCEEDED stage, once
// Apply confirms that none of their outputs is held by a live node: each
// gets a new task (the stage's next generation), and every running stage
// that depends on the stage goes back to waiting, its live tasks
// cancelled, to start again, reading the new outputs, once the rerun
// succeeds. Finished stages are otherwise never rerun.
func applyRerunStage(db *store, index uint64, r *RerunStageRequest) (any, error) {
	old, err := getJob(db, r.JobID)
	if err != nil {
		return nil, err
	}
	si := stageIndex(old, r.Stage)
	if JobTerminal(old.State) || old.State == JobScheduled || si < 0 {
		return nil, reject(RejectConflict, "job %s (%s) has no stage %q to rerun", old.ID, old.State, r.Stage)
	}
	if old.Stages[si].State != StageSucceeded {
		return nil, reject(RejectConflict, "stage %s is %s, not SUCCEEDED", r.Stage, old.Stages[si].State)
	}
	st := &old.Spec.Stages[si]
	if len(r.Instances) == 0 {
		return nil, reject(RejectInvalid, "no instance to rerun")
	}
	for _, k := range r.Instances {
		if k < 0 || k >= len(old.Stages[si].TaskIDs) {
			return nil, reject(RejectInvalid, "stage %s has no instance %d", r.Stage, k)
		}
		reachable := len(st.Outputs) == 0
		for _, o := range st.Outputs {
			reachable = reachable || heldAlive(db, OutputDataset(old.Stages[si].TaskIDs[k], o))
		}
		if reachable {
			return nil, reject(RejectConflict, "stage %s instance %d: its outputs are still held by a live node", r.Stage, k)
		}
	}
	j := old.clone()
	j.ModifyIndex = index
	byName := j.Spec.StageIndex()
	// Stages reading the rerun stage wait again; set before their tasks
	// are cancelled, so those tasks' ends leave the job be.
	var cancel []string
	for i, s := range j.Spec.Stages {
		if i == si || j.Stages[i].State != StageRunning || !j.Spec.DependsOn(byName, s.Name, r.Stage) {
			continue
		}
		for _, id := range j.Stages[i].TaskIDs {
			cancel = append(cancel, id)
		}
		j.Stages[i].State, j.Stages[i].TaskIDs = StageWaiting, nil
		j.Stages[i].Gen++
		j.addEvent(index, r.Now, EventQueued, fmt.Sprintf("stage %s waits again for stage %s", s.Name, r.Stage))
	}
	j.Stages[si].State = StageRunning
	j.Stages[si].Gen++
	for _, k := range r.Instances {
		t := stageTask(j, si, k, r.Now, index)
		if _, exists := db.task(t.ID); exists {
			return nil, reject(RejectConflict, "task id %q already exists", t.ID)
		}
		db.w.interner.task(t, nil, false)
		db.putTask(t)
		j.Stages[si].TaskIDs[k] = t.ID
	}
	j.addEvent(index, r.Now, EventQueued, fmt.Sprintf("stage %s reruns (instances %v): %s", r.Stage, r.Instances, r.Reason))
	db.putJob(j)
	for _, id := range cancel {
		if t, ok := db.task(id); ok && !t.State.Terminal() {
			if _, err := cancelTask(db, index, t, "its input is being made again: stage "+r.Stage+" reruns", r.Now); err != nil {
				return nil, err
			}
		}
	}
	return &JobResult{Job: j}, nil
}

// applyForgetJobs deletes finished jobs none of whose stages' tasks is
// still in the state (retention forgets them first); any other is
// skipped. It returns how many jobs were removed.
func applyForgetJobs(db *store, r *ForgetJobsRequest) (any, error) {
	removed := 0
	for _, id := range r.JobIDs {
		j, ok := db.job(id)
		if !ok || !forgettable(db, j) {
			continue
		}
		db.deleteJob(j)
		removed++
	}
	return removed, nil
}

// forgettable tells whether a job is finished and holds no task.
func forgettable(db *store, j *Job) bool {
	if !JobTerminal(j.State) {
		return false
	}
	for _, st := range j.Stages {
		for _, id := range st.TaskIDs {
			if _, ok := db.task(id); ok {
				return false
			}
		}
	}
	return true
}

// FinishedJobs lists finished jobs whose last event is before cutoff and
// whose tasks are all forgotten, at most limit of them, in id order (for
// retention).
func (s *State) FinishedJobs(cutoff time.Time, limit int) []string {
	var out []string
	s.st.jobs.Ascend(func(j *Job) bool {
		if n := len(j.Timeline); n > 0 && j.Timeline[n-1].Time.Before(StampOf(cutoff)) && forgettable(s.st, j) {
			out = append(out, j.ID)
		}
		return len(out) < limit
	})
	return out
}
