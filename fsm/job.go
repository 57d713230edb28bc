package fsm

import (
	"slices"
	"time"

	"herd/internal/stageid"
	"herd/spec"
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

// Job is the replicated record of a submitted job.
type Job struct {
	ID     string        `json:"id"`
	Spec   spec.Job      `json:"spec"`
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
