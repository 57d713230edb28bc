package api

import "time"

// JobSpec is a job as submitted: a named DAG of stages.
type JobSpec struct {
	Name           string `json:"name"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// OnFailure "continue" lets the independent branches finish after a
	// stage failed; by default ("fail") the rest is cancelled.
	OnFailure string      `json:"on_failure,omitempty"`
	Stages    []StageSpec `json:"stages"`
	// Schedule, when set, makes the job periodic: it runs nothing itself,
	// and each firing starts a run of it (a job of its own).
	Schedule *Schedule `json:"schedule,omitempty"`
}

// Schedule fires a job: cron (seconds optional) or "@every 30s", read in
// time_zone (UTC when empty); catch_up skip (the default) or run_once for
// slots missed while no leader fired them; overlap forbid (the default),
// allow or replace when the previous run is still live.
type Schedule struct {
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone,omitempty"`
	CatchUp  string `json:"catch_up,omitempty"`
	Overlap  string `json:"overlap,omitempty"`
}

// Firing is one slot of a schedule as it was handled.
type Firing struct {
	Slot    time.Time `json:"slot"`
	At      time.Time `json:"at"`
	Run     string    `json:"run,omitempty"`
	Outcome string    `json:"outcome"`
}

// StageSpec is one stage: a task spec, the stages it depends on, its
// fan-out (count, or one instance per for_each item, the item in
// HERD_ITEM), the files it leaves in its working directory (outputs) and
// the outputs of earlier stages it reads (inputs, "stage.output"), found
// at $HERD_INPUTS/<stage>/<output> (<stage>/<instance>/<output> for a
// stage that fans out).
type StageSpec struct {
	Name      string   `json:"name"`
	DependsOn []string `json:"depends_on,omitempty"`
	Count     int      `json:"count,omitempty"`
	ForEach   []string `json:"for_each,omitempty"`
	Outputs   []string `json:"outputs,omitempty"`
	Inputs    []string `json:"inputs,omitempty"`
	Task      TaskSpec `json:"task"`
}

// JobSubmitResponse answers a job submit: 201 when created, 200 with the
// existing job when its idempotency key was seen before.
type JobSubmitResponse struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Index uint64 `json:"index"`
}

// Job is a job as the API shows it.
type Job struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	State       string          `json:"state"`
	OnFailure   string          `json:"on_failure,omitempty"`
	Stages      []JobStage      `json:"stages"`
	SubmittedAt time.Time       `json:"submitted_at"`
	CreateIndex uint64          `json:"create_index"`
	ModifyIndex uint64          `json:"modify_index"`
	Timeline    []TimelineEvent `json:"timeline,omitempty"`
	// A scheduled job: its schedule, latest firings, next one and live
	// (or latest) run; a run: the scheduled job it belongs to.
	Schedule    *Schedule `json:"schedule,omitempty"`
	Firings     []Firing  `json:"firings,omitempty"`
	NextFiring  time.Time `json:"next_firing,omitzero"`
	LastRun     string    `json:"last_run,omitempty"`
	ScheduledBy string    `json:"scheduled_by,omitempty"`
}

// JobStage is where a stage stands, with its tasks and, for each, the
// node its latest attempt ran on and how many attempts it took.
type JobStage struct {
	Name      string         `json:"name"`
	State     string         `json:"state"`
	DependsOn []string       `json:"depends_on,omitempty"`
	TaskIDs   []string       `json:"task_ids"`
	Tasks     []JobStageTask `json:"tasks,omitempty"`
}

// JobStageTask is one instance of a stage.
type JobStageTask struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	NodeID   string `json:"node_id,omitempty"`
	Attempts int    `json:"attempts"`
}

// JobList is a page of jobs.
type JobList struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next,omitempty"`
}

// Job states.
const (
	JobScheduled = "SCHEDULED"
	JobPending   = "PENDING"
	JobRunning   = "RUNNING"
	JobSucceeded = "SUCCEEDED"
	JobFailed    = "FAILED"
	JobCancelled = "CANCELLED"
)
