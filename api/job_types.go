package api

import "time"

// Firing is one slot of a schedule as it was handled.
type Firing struct {
	Slot    time.Time `json:"slot"`
	At      time.Time `json:"at"`
	Run     string    `json:"run,omitempty"`
	Outcome string    `json:"outcome"`
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
